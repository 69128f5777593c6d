// PushLedger, the minibatch-end accounting both ODC transports share, ranks as threads: the count
// exchange gives every owner what each client sent it; the wait returns once all is applied, names
// each short client after comm.timeout_s, names a gone peer at once, and rethrows a transport's
// failure.
#include <atomic>
#include <chrono>
#include <thread>

#include <catch2/catch.hpp>

#include "odc/core/error.h"
#include "odc/distributed/comm/push_ledger.h"
#include "unit/rank_threads.h"

using namespace odc;

TEST_CASE("the count exchange gives each owner what every client sent it, the wait ends once all is applied",
          "[distributed]") {
  constexpr int world = 3;
  std::vector<std::string> seen(world);
  // Client c sends owner o  (c + 1) * 10 + o  messages; each rank applies them on its own "serve thread".
  const auto errors = test::on_every_rank(world, [&](distributed::HostGroup& group) {
    const int r = group.rank();
    distributed::PushLedger ledger(group);
    for (int minibatch = 0; minibatch < 2; ++minibatch) {
      ledger.begin();
      for (int o = 0; o < world; ++o) ledger.sent(o, (r + 1) * 10 + o + minibatch);
      const auto expected = ledger.exchange("the test's count exchange");
      std::string& report = seen[static_cast<std::size_t>(r)];
      for (int c = 0; c < world; ++c) {
        if (expected[static_cast<std::size_t>(c)] != (c + 1) * 10 + r + minibatch) {
          report += "expected from " + std::to_string(c) + " is " + std::to_string(expected[static_cast<std::size_t>(c)]) + "; ";
        }
      }
      std::thread serve([&] {
        for (int c = 0; c < world; ++c) {
          for (std::int64_t k = 0; k < expected[static_cast<std::size_t>(c)]; ++k) ledger.applied(c, 1);
        }
      });
      ledger.wait(expected, 10.0, {}, "the test's wait");
      serve.join();
      if (ledger.applied_from(2) != expected[2]) report += "applied count; ";
      group.barrier("minibatch end");
    }
  });
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r);
    CHECK(errors[static_cast<std::size_t>(r)] == "");
    CHECK(seen[static_cast<std::size_t>(r)] == "");
  }
}

TEST_CASE("a client that never sends the pushes it counted is named after comm.timeout_s", "[distributed]") {
  const auto errors = test::on_every_rank(2, [&](distributed::HostGroup& group) {
    distributed::PushLedger ledger(group);
    ledger.begin();
    if (group.rank() == 1) ledger.sent(0, 2);  // rank 1 counts two pushes to rank 0 and never sends them
    const auto expected = ledger.exchange("the test's count exchange");
    distributed::PushLedger::Peers peers;
    peers.describe = [](int r) { return "rank " + std::to_string(r) + " (pid 42) is alive but not progressing"; };
    const auto start = std::chrono::steady_clock::now();
    ledger.wait(expected, 0.3, peers, "the minibatch-end wait for gradient pushes");
    if (group.rank() == 0) fail("rank 0's wait returned");
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(2)) fail("rank 1 waited for nothing");
  });
  CHECK_THAT(errors[0], Catch::Contains("rank 0: the minibatch-end wait for gradient pushes stalled after") &&
                            Catch::Contains("(comm.timeout_s = 0.3 s): gradient pushes still missing from rank 1 (pid "
                                            "42) is alive but not progressing (0 of 2)"));
  CHECK(errors[1] == "");
}

TEST_CASE("a gone peer is named within about a second, and a transport failure ends the wait", "[distributed]") {
  const auto errors = test::on_every_rank(2, [&](distributed::HostGroup& group) {
    distributed::PushLedger ledger(group);
    ledger.begin();
    ledger.sent(1 - group.rank(), 1);
    const auto expected = ledger.exchange("the test's count exchange");
    distributed::PushLedger::Peers peers;
    if (group.rank() == 0) {
      peers.gone = [](int r) { return r == 1; };
      peers.describe = [](int r) { return "rank " + std::to_string(r) + " (pid 7) exited"; };
    } else {
      std::atomic<int> checks{0};
      peers.check_failure = [&checks] {
        if (++checks == 3) fail("the transport failed: a malformed push");
      };
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      ledger.wait(expected, 60.0, peers, "the wait");
    } catch (const Error& e) {
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (took > 5.0) fail("{} (after {:.1f} s)", e.what(), took);
      throw;
    }
  });
  CHECK_THAT(errors[0], Catch::Contains("still missing from rank 1 (pid 7) exited (0 of 1)"));
  CHECK(errors[1] == "the transport failed: a malformed push");
}
