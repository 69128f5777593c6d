#pragma once
// PushLedger: the minibatch-end accounting of ODC's gradient pushes, one for every transport.
//
// A client counts the messages (chunks) it sends each owner; the owner's serve loop counts the
// messages it has applied from each client. At the minibatch end one exchange over the group
// tells every owner how many messages each client sent it (the count matrix, summed), and the
// owner waits until it has applied that many from every client. The wait is bounded: after
// comm.timeout_s it fails naming each client still short (how many of how many, and what the
// transport knows of that peer); a peer the transport knows to be gone is named within a second.
//
// Thread safety: sent() and the exchange on the compute thread; applied() on the serve thread;
// wait() on the compute thread.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "odc/distributed/group/host_group.h"

namespace odc::distributed {

class PushLedger {
 public:
  // What a wait asks of its transport, each optional:
  struct Peers {
    // Rethrows a failure of the transport (its progress thread's), checked at every wake-up.
    std::function<void()> check_failure;
    // How to name `rank` in an error ("rank 2 (pid 123) exited"); empty: "rank 2".
    std::function<std::string(int rank)> describe;
    // Whether `rank` is known to be gone (its process exited): then the wait fails at once.
    std::function<bool(int rank)> gone;
  };

  explicit PushLedger(HostGroup& group);

  // Zeroes both counts (before the minibatch-start barrier; nothing is in flight then).
  void begin();
  void sent(int owner, std::int64_t messages) { sent_[static_cast<std::size_t>(owner)] += messages; }
  // The serve loop applied `messages` more from `client`; wakes a waiter.
  void applied(int client, std::int64_t messages);
  std::int64_t applied_from(int client) const;
  std::int64_t sent_to(int owner) const { return sent_[static_cast<std::size_t>(owner)]; }

  // Collective over the group: how many messages each client sent this rank this minibatch.
  std::vector<std::int64_t> exchange(std::string_view what);
  // Blocks until applied_from(c) >= expected[c] for every client; fails as said above. `what`
  // names the wait in errors.
  void wait(const std::vector<std::int64_t>& expected, double timeout_s, const Peers& peers, std::string_view what);

 private:
  HostGroup& group_;
  int rank_;
  int world_;
  std::vector<std::int64_t> sent_;  // compute thread
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::int64_t> applied_;  // guarded by mutex_
};

}  // namespace odc::distributed
