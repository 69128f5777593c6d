#pragma once
// Runs a body once per rank of an in-process group, each rank in its own thread (the fake of a
// multi-rank job for unit tests; Catch2 assertions are not thread-safe, so bodies record what they
// see and the test checks it afterwards), and collects each rank's odc::Error message ("" = none).
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "odc/core/error.h"
#include "odc/distributed/group/in_process_group.h"

namespace odc::test {

inline std::vector<std::string> on_every_rank(int size, const std::function<void(distributed::HostGroup&)>& body,
                                              double timeout_s = 30.0) {
  auto members = distributed::InProcessGroup::create(size, timeout_s);
  std::vector<std::string> errors(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(*members[static_cast<std::size_t>(r)]);
      } catch (const Error& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace odc::test
