// A ShmHostGroup rank in a process of its own, for tests/unit/distributed/group/test_shm_host_group.cpp
// (whose other ranks are threads of the test): a peer that really is another process, that can
// exit without a word, and whose pid the group then finds gone.
//
// usage: odc_shm_group_peer JOB RANK SIZE TIMEOUT_S ACTION [ARGUMENT]
//   exit           join, then _exit(0) without any call (the group's destructor does not run)
//   barrier WHAT   join, call barrier(WHAT)
//   calls          join, run the exchanges of check_calls below against a rank 0 that does the same
// Exit status: 0 done, 1 an odc::Error (printed on stderr) or a wrong result, 2 usage.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "odc/core/error.h"
#include "odc/distributed/group/shm_host_group.h"

namespace {

// The rank-r side of the exchanges the test's rank 0 makes: the returned text says what was wrong.
std::string check_calls(odc::distributed::HostGroup& g) {
  g.barrier("the first barrier");
  std::vector<double> sums = {1.0 * g.rank(), 0.25};
  g.all_reduce_sum(sums, "the sums");
  if (sums != std::vector<double>{0.0 + g.rank(), 0.5}) return "wrong sums";
  const std::vector<std::int32_t> mine = {g.rank() * 10, g.rank() * 10 + 1};
  std::vector<std::int32_t> none;
  g.gather_values<std::int32_t>(mine, none, "the values");
  const std::string text(3'000'000 + 17 * static_cast<std::size_t>(g.rank()), static_cast<char>('a' + g.rank()));
  if (!g.gather_text(text, "the texts").empty()) return "gather_text returned text on a rank other than 0";
  std::string message = "not this";
  g.broadcast(message, "the broadcast");
  if (message != std::string(2'500'000, 'z')) return "wrong broadcast";
  g.barrier("the last barrier");
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: odc_shm_group_peer JOB RANK SIZE TIMEOUT_S exit|barrier WHAT|calls\n");
    return 2;
  }
  const std::string action = argv[5];
  try {
    odc::distributed::ShmHostGroup group(argv[1], std::atoi(argv[2]), std::atoi(argv[3]), std::atof(argv[4]));
    if (action == "exit") _exit(0);
    if (action == "barrier" && argc > 6) {
      group.barrier(argv[6]);
      return 0;
    }
    if (action == "calls") {
      const auto problem = check_calls(group);
      if (problem.empty()) return 0;
      std::fprintf(stderr, "odc_shm_group_peer: %s\n", problem.c_str());
      return 1;
    }
    std::fprintf(stderr, "odc_shm_group_peer: unknown action '%s'\n", action.c_str());
    return 2;
  } catch (const odc::Error& e) {
    std::fprintf(stderr, "odc_shm_group_peer: error: %s\n", e.what());
    return 1;
  }
}
