// ShmHostGroup: ranks of one host meet in POSIX shared memory. Most cases run the ranks as threads
// (each constructs its member with the same job id); the dead-peer, stale-segment and
// cross-process cases use odc_shm_group_peer, a rank in a process of its own.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "odc/core/error.h"
#include "odc/distributed/group/local_launch.h"
#include "odc/distributed/group/shm_host_group.h"

extern char** environ;

using namespace odc;
using distributed::HostGroup;
using distributed::ShmHostGroup;

namespace {

using Clock = std::chrono::steady_clock;

// A job id no other test (or test process) uses.
std::string job_id(const std::string& name) { return fmt::format("unit-{}-{}", ::getpid(), name); }

bool segment_exists(const std::string& job) {
  const int fd = ::shm_open(distributed::local_segment_name(job).c_str(), O_RDONLY, 0);
  if (fd >= 0) ::close(fd);
  return fd >= 0;
}

// Runs `body` on every rank of a ShmHostGroup whose ranks are threads; each rank's odc::Error
// message ("" = none), the constructor's included.
std::vector<std::string> on_every_shm_rank(const std::string& job, int size, const std::function<void(HostGroup&)>& body,
                                           double timeout_s = 30.0) {
  std::vector<std::string> errors(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        ShmHostGroup group(job, r, size, timeout_s);
        body(group);
      } catch (const Error& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// odc_shm_group_peer in a process of its own, its stderr in `log`; reaped by wait().
class Peer {
 public:
  Peer(const std::vector<std::string>& args, const std::string& log) {
    std::vector<std::string> all = {ODC_SHM_GROUP_PEER};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (e != 0) fail("cannot start {}: {}", argv[0], std::strerror(e));
  }
  ~Peer() {
    if (!reaped_) {
      ::kill(pid_, SIGKILL);
      wait();
    }
  }
  pid_t pid() const { return pid_; }
  // The exit status (128 + N for signal N).
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
};

std::string read_file(const std::string& path) {
  std::string text;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buffer[4096];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, f)) > 0;) text.append(buffer, n);
    std::fclose(f);
  }
  return text;
}

// Sets (or with nullopt unsets) an environment variable for a scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

}  // namespace

TEST_CASE("shm group: every call gives MPI's results on 1, 2 and 4 ranks, payloads of several MB too", "[distributed][shm]") {
  for (int size : {1, 2, 4}) {
    const auto n = static_cast<std::size_t>(size);
    std::vector<std::vector<double>> sums(n), big_sums(n);
    std::vector<std::vector<std::int32_t>> gathered(n);
    std::vector<std::vector<std::string>> texts(n);
    std::vector<std::string> broadcasts(n);
    std::vector<std::uint64_t> chunks(n);
    std::vector<std::vector<std::int32_t>> gathered_last(n);
    std::vector<int> empties(n, 0);
    // Rank r's text: over 3 chunks, a different length on every rank, a byte pattern that shows
    // misplaced chunks.
    const auto text_of = [](int r) {
      std::string t(3'000'000 + 1'000 * static_cast<std::size_t>(r) + static_cast<std::size_t>(r), '\0');
      for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<char>('a' + (i / 4096 + static_cast<std::size_t>(r)) % 26);
      return t;
    };
    const auto value_of = [](int r, std::size_t i) { return 0.1 * (r + 1) + 1e-3 * static_cast<double>(i); };
    constexpr std::size_t kBig = 400'000;  // 3.2 MB of doubles
    const std::string broadcast_text(5'000'000, 'q');
    const auto errors = on_every_shm_rank(job_id(fmt::format("calls{}", size)), size, [&](HostGroup& g) {
      const auto r = static_cast<std::size_t>(g.rank());
      chunks[r] = dynamic_cast<ShmHostGroup&>(g).chunk_bytes();
      for (int round = 0; round < 50; ++round) {  // repeated exchanges must not mix rounds
        std::vector<double> v = {1.0 * g.rank(), 0.5, static_cast<double>(round)};
        g.all_reduce_sum(v, "sum");
        sums[r] = v;
      }
      std::vector<double> big(kBig);
      for (std::size_t i = 0; i < kBig; ++i) big[i] = value_of(g.rank(), i);
      g.all_reduce_sum(big, "big sum");
      big_sums[r] = big;
      const std::vector<std::int32_t> mine = {g.rank() * 10, g.rank() * 10 + 1};
      std::vector<std::int32_t> all(g.is_root() ? 2 * static_cast<std::size_t>(g.size()) : 0);
      g.gather_values<std::int32_t>(mine, all, "gather");
      gathered[r] = all;
      // To another rank (the export's pieces go to the rank writing their file).
      const bool last = g.rank() == g.size() - 1;
      std::vector<std::int32_t> at_last(last ? 2 * static_cast<std::size_t>(g.size()) : 0);
      g.gather_values<std::int32_t>(mine, at_last, "gather to the last rank", g.size() - 1);
      gathered_last[r] = at_last;
      texts[r] = g.gather_text(text_of(g.rank()), "texts");
      std::string message = g.is_root() ? broadcast_text : "ignored";
      g.broadcast(message, "broadcast");
      broadcasts[r] = message;
      std::string empty = g.is_root() ? "" : "ignored";
      g.broadcast(empty, "empty broadcast");
      empties[r] = empty.empty();
      g.barrier("done");
    });
    for (int r = 0; r < size; ++r) {
      const auto i = static_cast<std::size_t>(r);
      REQUIRE(errors[i].empty());
      CHECK(sums[i] == std::vector<double>{size * (size - 1) / 2.0, 0.5 * size, 49.0 * size});
      CHECK(broadcasts[i] == broadcast_text);
      // Summed in rank order from 0.0 on every rank: the same bits as this loop, on every rank.
      std::size_t wrong = 0;
      for (std::size_t k = 0; k < kBig; ++k) {
        double expected = 0.0;
        for (int q = 0; q < size; ++q) expected += value_of(q, k);
        if (std::memcmp(&expected, &big_sums[i][k], sizeof(double)) != 0) ++wrong;
      }
      CHECK(wrong == 0);
      std::vector<std::int32_t> everyone;
      for (int q = 0; q < size; ++q) everyone.insert(everyone.end(), {q * 10, q * 10 + 1});
      CHECK(gathered_last[i] == (r == size - 1 ? everyone : std::vector<std::int32_t>{}));
      if (r == 0) {
        std::vector<std::int32_t> expected;
        for (int q = 0; q < size; ++q) expected.insert(expected.end(), {q * 10, q * 10 + 1});
        CHECK(gathered[i] == expected);
        REQUIRE(texts[i].size() == n);
        for (int q = 0; q < size; ++q) CHECK((texts[i][static_cast<std::size_t>(q)] == text_of(q)));
      } else {
        CHECK(texts[i].empty());
      }
    }
    CHECK(empties == std::vector<int>(n, 1));
    // The payloads above took three rounds or more.
    CHECK(2 * chunks[0] < 3'000'000);
    CHECK(segment_exists(job_id(fmt::format("calls{}", size))) == false);
  }
}

TEST_CASE("shm group: ranks calling different exchanges fail on every rank, naming both", "[distributed][shm]") {
  const auto errors = on_every_shm_rank(job_id("mismatch"), 3, [](HostGroup& g) {
    if (g.rank() == 2) {
      g.barrier("the checkpoint barrier");
    } else {
      std::vector<double> v = {1.0};
      g.all_reduce_sum(v, "the loss sum");
    }
  });
  for (const auto& e : errors) {
    CHECK_THAT(e, Catch::Contains("rank 2 called barrier 'the checkpoint barrier' while rank 0 called all_reduce_sum "
                                  "of 1 values 'the loss sum'"));
  }
  // Different sizes of a fixed-size exchange are a mismatch too; the group stays broken after it.
  std::vector<std::string> later(2);
  const auto sizes = on_every_shm_rank(job_id("sizes"), 2, [&](HostGroup& g) {
    std::vector<double> v(static_cast<std::size_t>(1 + g.rank()), 1.0);
    try {
      g.all_reduce_sum(v, "sums");
    } catch (const Error&) {
    }
    try {
      g.barrier("after the error");
    } catch (const Error& e) {
      later[static_cast<std::size_t>(g.rank())] = e.what();
    }
  });
  for (const auto& e : later) CHECK_THAT(e, Catch::Contains("rank 1 called all_reduce_sum of 2 values 'sums' while rank 0 called all_reduce_sum of 1 values 'sums'"));
  // Another `what` of the same kind.
  const auto what = on_every_shm_rank(job_id("what"), 2, [](HostGroup& g) { g.barrier(g.rank() == 0 ? "a" : "b"); });
  for (const auto& e : what) CHECK_THAT(e, Catch::Contains("rank 1 called barrier 'b' while rank 0 called barrier 'a'"));
}

TEST_CASE("shm group: a rank that never arrives is an error after the timeout, naming it and its activity", "[distributed][shm]") {
  const auto start = Clock::now();
  const auto errors = on_every_shm_rank(job_id("timeout"), 3, [](HostGroup& g) {
    if (g.rank() == 2) {
      g.announce("step 3: microbatch 1/2");
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // alive, busy, its member kept
      return;
    }
    g.barrier("the start-up barrier");
  }, 0.5);
  const double seconds = seconds_since(start);
  // The rank that times out first tells the other, which may stop waiting before its own timeout.
  for (int r : {0, 1}) {
    CHECK_THAT(errors[static_cast<std::size_t>(r)],
               Catch::Contains("waited 0.5 s in barrier 'the start-up barrier' for the ranks that have not arrived: "
                               "rank 2 (last announced 'step 3: microbatch 1/2')"));
  }
  CHECK(errors[2].empty());
  CHECK(seconds < 3.0);
}

TEST_CASE("shm group: a rank that left the group is reported at once, not after the timeout", "[distributed][shm]") {
  const auto start = Clock::now();
  const auto errors = on_every_shm_rank(job_id("left"), 2, [](HostGroup& g) {
    if (g.rank() == 0) g.barrier("the stop-signal check");
  });
  CHECK_THAT(errors[0], Catch::Contains(fmt::format("rank 1 (pid {}) left the group while rank 0 waited for it in "
                                                    "barrier 'the stop-signal check'", ::getpid())));
  CHECK(seconds_since(start) < 2.0);
}

TEST_CASE("shm group: the segment's name is gone once every rank joined, and after a failed join", "[distributed][shm]") {
  const std::string job = job_id("unlinked");
  std::vector<int> present(2, -1);
  const auto errors = on_every_shm_rank(job, 2, [&](HostGroup& g) {
    g.barrier("joined");
    present[static_cast<std::size_t>(g.rank())] = segment_exists(job) ? 1 : 0;
    g.barrier("checked");
  });
  CHECK(errors == std::vector<std::string>{"", ""});
  CHECK(present == std::vector<int>{0, 0});
  // Rank 1 never starts: rank 0's join fails after the timeout and removes the name.
  const std::string lonely = job_id("lonely");
  const auto start = Clock::now();
  try {
    ShmHostGroup group(lonely, 0, 2, 0.3);
    FAIL("joined without rank 1");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains(fmt::format("local job '{}': rank 0 waited 0.3 s for rank(s) 1 to join", lonely)));
  }
  CHECK(seconds_since(start) < 2.0);
  CHECK_FALSE(segment_exists(lonely));
  // A rank other than 0 waits for rank 0 to create the segment, bounded the same way.
  try {
    ShmHostGroup group(lonely, 1, 2, 0.3);
    FAIL("joined without rank 0");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("rank 1 waited 0.3 s for rank 0 to create /dev/shm/odc-host-group-" + lonely));
  }
}

TEST_CASE("shm group: bad arguments are errors naming them", "[distributed][shm]") {
  CHECK_THROWS_WITH(ShmHostGroup("a/b", 0, 1, 1.0), Catch::Contains("local job id 'a/b': the job id holds '/'"));
  CHECK_THROWS_WITH(ShmHostGroup(job_id("args"), 2, 2, 1.0), Catch::Contains("rank 2 is not one of the group's ranks 0..1"));
  CHECK_THROWS_WITH(ShmHostGroup(job_id("args"), 0, 0, 1.0), Catch::Contains("a group of 0 ranks; expected 1 to 256"));
  // The same rank twice (two processes given one ODC_LOCAL_RANK): one of them is refused; rank 0
  // then waits in vain for rank 2 (and the rank 1 that joined sees rank 0 leave).
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      try {
        ShmHostGroup group(job_id("twice"), t == 0 ? 0 : 1, 3, t == 0 ? 1.0 : 5.0);  // rank 0 gives up first
      } catch (const Error& e) {
        errors[static_cast<std::size_t>(t)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  const auto refused = std::count_if(errors.begin(), errors.end(), [](const std::string& e) {
    return e.find("rank 1 has joined already (pid") != std::string::npos;
  });
  CHECK(refused == 1);
  CHECK_THAT(errors[0], Catch::Contains("rank 0 waited 1 s for rank(s) 2 to join"));
  // Ranks told different sizes.
  std::string sizes_error;
  std::thread rank0([&] {
    try {
      ShmHostGroup group(job_id("told-sizes"), 0, 2, 1.0);
    } catch (const Error&) {  // waited in vain for rank 1
    }
  });
  try {
    ShmHostGroup group(job_id("told-sizes"), 1, 3, 5.0);
  } catch (const Error& e) {
    sizes_error = e.what();
  }
  rank0.join();
  CHECK_THAT(sizes_error, Catch::Contains("rank 1 was started for 3 ranks, but rank 0 created the group for 2"));
}

TEST_CASE("shm group: a peer process that exits is reported within a second, naming it", "[distributed][shm]") {
  const std::string job = job_id("exited");
  Peer peer({job, "1", "2", "30", "exit"}, job + ".log");
  ShmHostGroup group(job, 0, 2, 30.0);
  const auto start = Clock::now();
  std::string error;
  try {
    group.barrier("the minibatch-end barrier");  // the peer has exited, unreaped: a zombie
  } catch (const Error& e) {
    error = e.what();
  }
  const double seconds = seconds_since(start);
  CHECK_THAT(error, Catch::Contains(fmt::format("rank 1 (pid {}) exited while rank 0 waited for it in barrier "
                                                "'the minibatch-end barrier'", peer.pid())));
  CHECK(seconds < 2.0);
  CHECK(peer.wait() == 0);
  // The group is broken now: every later call says why.
  CHECK_THROWS_WITH(group.barrier("later"), Catch::Contains("rank 1 (pid"));
  std::remove((job + ".log").c_str());
}

TEST_CASE("shm group: a rank in another process exchanges every call with this one", "[distributed][shm]") {
  const std::string job = job_id("process");
  const std::string log = job + ".log";
  Peer peer({job, "1", "2", "30", "calls"}, log);
  ShmHostGroup g(job, 0, 2, 30.0);
  g.barrier("the first barrier");
  std::vector<double> sums = {0.0, 0.25};
  g.all_reduce_sum(sums, "the sums");
  CHECK(sums == std::vector<double>{1.0, 0.5});
  const std::vector<std::int32_t> mine = {0, 1};
  std::vector<std::int32_t> all(4);
  g.gather_values<std::int32_t>(mine, all, "the values");
  CHECK(all == std::vector<std::int32_t>{0, 1, 10, 11});
  const auto texts = g.gather_text(std::string(3'000'000, 'a'), "the texts");
  REQUIRE(texts.size() == 2);
  CHECK((texts[1] == std::string(3'000'017, 'b')));
  std::string message(2'500'000, 'z');
  g.broadcast(message, "the broadcast");
  g.barrier("the last barrier");
  CHECK(peer.wait() == 0);
  CHECK(read_file(log).empty());
  // Across processes, a different `what` fails on both sides.
  const std::string other = job_id("process-what");
  Peer mismatched({other, "1", "2", "30", "barrier", "the peer's barrier"}, log);
  ShmHostGroup h(other, 0, 2, 30.0);
  CHECK_THROWS_WITH(h.barrier("rank 0's barrier"),
                    Catch::Contains("rank 1 called barrier 'the peer's barrier' while rank 0 called barrier 'rank 0's barrier'"));
  CHECK(mismatched.wait() == 1);
  CHECK_THAT(read_file(log), Catch::Contains("rank 1 called barrier 'the peer's barrier' while rank 0 called barrier"));
  std::remove(log.c_str());
}

TEST_CASE("shm group: a stale segment of a dead job is replaced, a live one is an error", "[distributed][shm]") {
  const std::string job = job_id("stale");
  const std::string log = job + ".log";
  {
    // A rank 0 that dies (SIGKILL) while it waits for rank 1 leaves its segment behind.
    Peer dead({job, "0", "2", "30", "exit"}, log);
    for (int i = 0; i < 500 && !segment_exists(job); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    REQUIRE(segment_exists(job));
    ::kill(dead.pid(), SIGKILL);
    CHECK(dead.wait() == 128 + SIGKILL);
  }
  REQUIRE(segment_exists(job));
  const auto errors = on_every_shm_rank(job, 2, [](HostGroup& g) { g.barrier("over the new segment"); });
  CHECK(errors == std::vector<std::string>{"", ""});
  CHECK_FALSE(segment_exists(job));

  // A rank 0 that is alive owns its name: another job with that id is refused.
  const std::string busy = job_id("busy");
  Peer live({busy, "0", "2", "30", "exit"}, log);
  for (int i = 0; i < 500 && !segment_exists(busy); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK_THROWS_WITH(ShmHostGroup(busy, 0, 2, 1.0),
                    Catch::Contains(fmt::format("belongs to a running process (pid {}): another job uses the same job id",
                                                live.pid())));
  // Joining it as rank 1 completes its group: it removes the name and exits.
  { ShmHostGroup rank1(busy, 1, 2, 30.0); }
  CHECK(live.wait() == 0);
  CHECK_FALSE(segment_exists(busy));
  std::remove(log.c_str());
}

TEST_CASE("make_local_group_from_env reads odc-run's variables and names a bad one", "[distributed][shm]") {
  using distributed::make_local_group_from_env;
  {
    const ScopedEnv job("ODC_LOCAL_JOB", std::nullopt);
    CHECK_FALSE(distributed::launched_locally());
    CHECK_THROWS_WITH(make_local_group_from_env(1.0), Catch::Contains("ODC_LOCAL_JOB is not set: odc-run --local sets"));
  }
  const ScopedEnv job("ODC_LOCAL_JOB", job_id("env"));
  CHECK(distributed::launched_locally());
  {
    const ScopedEnv size("ODC_LOCAL_SIZE", "two");
    const ScopedEnv rank("ODC_LOCAL_RANK", "0");
    CHECK_THROWS_WITH(make_local_group_from_env(1.0), Catch::Contains("ODC_LOCAL_SIZE='two': expected a number of ranks from 1 to 256"));
  }
  {
    const ScopedEnv size("ODC_LOCAL_SIZE", "2");
    const ScopedEnv rank("ODC_LOCAL_RANK", "2");
    CHECK_THROWS_WITH(make_local_group_from_env(1.0),
                      Catch::Contains("ODC_LOCAL_RANK='2': expected a rank from 0 to 1 (ODC_LOCAL_SIZE=2)"));
  }
  {
    const ScopedEnv bad("ODC_LOCAL_JOB", "my job");
    CHECK_THROWS_WITH(make_local_group_from_env(1.0), Catch::Contains("ODC_LOCAL_JOB='my job': the job id holds ' '"));
  }
  const ScopedEnv size("ODC_LOCAL_SIZE", "1");
  const ScopedEnv rank("ODC_LOCAL_RANK", "0");
  const auto group = make_local_group_from_env(1.0);
  CHECK(group->rank() == 0);
  CHECK(group->size() == 1);
  std::string text = "one rank";
  group->broadcast(text, "alone");
  CHECK(text == "one rank");
  CHECK(group->gather_text("mine", "alone") == std::vector<std::string>{"mine"});
}
