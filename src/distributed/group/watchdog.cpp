#include "odc/distributed/group/watchdog.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "odc/core/error.h"

namespace odc::distributed {

namespace {

constexpr int kQueryTag = 1;
constexpr int kAnswerTag = 2;
constexpr int kAnswerBytes = 512;

double seconds_between(std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// Answers travel as "W|<seconds>|<where>" (waiting) or "B|<seconds>|<where>" (busy).
PeerState parse_answer(int rank, const char* text) {
  PeerState peer;
  peer.rank = rank;
  peer.answered = true;
  const std::string s(text);
  const auto bar1 = s.find('|');
  const auto bar2 = bar1 == std::string::npos ? std::string::npos : s.find('|', bar1 + 1);
  if (bar1 == 1 && bar2 != std::string::npos) {
    peer.waiting = s[0] == 'W';
    peer.seconds = std::strtod(s.c_str() + 2, nullptr);
    peer.where = s.substr(bar2 + 1);
  } else {
    peer.where = s;
  }
  return peer;
}

void default_handler(const WatchdogReport& report, MPI_Comm world) {
  const std::string message = report.message();
  if (!report.fatal) {
    spdlog::warn("{}", message);
    return;
  }
  spdlog::error("{}", message);
  spdlog::default_logger()->flush();
  std::fprintf(stderr, "odc-train: error: %s\n", message.c_str());
  std::fflush(stderr);
  MPI_Abort(world, 1);
  std::_Exit(1);
}

}  // namespace

std::string WatchdogReport::message() const {
  std::vector<std::string> silent;
  std::vector<std::string> states;
  bool busy = false;
  for (const auto& p : peers) {
    if (!p.answered) {
      silent.push_back(std::to_string(p.rank));
    } else {
      states.push_back(fmt::format("rank {} is {} '{}' for {:.1f} s", p.rank, p.waiting ? "waiting in" : "busy with",
                                   p.where, p.seconds));
      busy = busy || !p.waiting;
    }
  }
  std::string text = fmt::format("rank {} has waited {:.1f} s in '{}'{} (comm.timeout_s = {:g})", rank, waited_s, what,
                                 activity.empty() ? std::string() : fmt::format(" during '{}'", activity), timeout_s);
  if (!silent.empty()) {
    text += fmt::format("; rank(s) {} did not answer: dead, frozen or unreachable", fmt::join(silent, ", "));
  }
  if (!states.empty()) text += "; " + fmt::format("{}", fmt::join(states, "; "));
  if (!fatal) {
    text += "; waiting on (a peer is still busy)";
  } else if (silent.empty() && !busy) {
    text += "; every rank is waiting: nobody can make progress";
  }
  if (fatal) text += "; ending the job";
  return text;
}

Watchdog::Watchdog(MPI_Comm comm, double timeout_s, Handler handler) : timeout_s_(timeout_s), handler_(std::move(handler)) {
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &world_size_);
  if (world_size_ < 2 || !(timeout_s_ > 0)) return;
  if (MPI_Comm_dup(comm, &comm_) != MPI_SUCCESS) fail("watchdog: MPI_Comm_dup failed");
  // A send to a dead peer must come back as an error code, not end this rank before it reports.
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  if (!handler_) {
    handler_ = [](const WatchdogReport& report) { default_handler(report, MPI_COMM_WORLD); };
  }
  activity_since_ = Clock::now();
  MPI_Irecv(&query_buffer_, 1, MPI_CHAR, MPI_ANY_SOURCE, kQueryTag, comm_, &query_request_);
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  if (!thread_.joinable()) return;
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  if (query_request_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&query_request_);
    MPI_Wait(&query_request_, MPI_STATUS_IGNORE);
  }
  for (auto& a : answers_) {
    if (a->request != MPI_REQUEST_NULL) MPI_Wait(&a->request, MPI_STATUS_IGNORE);
  }
  MPI_Comm_free(&comm_);
}

Watchdog::Wait::Wait(Watchdog* watchdog, std::string what) : watchdog_(watchdog) {
  if (watchdog_ != nullptr) watchdog_->enter(std::move(what));
}

Watchdog::Wait::~Wait() {
  if (watchdog_ != nullptr) watchdog_->leave();
}

void Watchdog::enter(std::string what) {
  if (!thread_.joinable()) return;
  const std::lock_guard lock(mutex_);
  in_wait_ = true;
  wait_what_ = std::move(what);
  wait_since_ = Clock::now();
  next_check_ = wait_since_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
}

void Watchdog::leave() {
  if (!thread_.joinable()) return;
  const std::lock_guard lock(mutex_);
  in_wait_ = false;
}

void Watchdog::set_activity(std::string activity) {
  if (!thread_.joinable()) return;
  const std::lock_guard lock(mutex_);
  activity_ = std::move(activity);
  activity_since_ = Clock::now();
}

double Watchdog::answer_wait_s() const { return std::clamp(timeout_s_ / 4.0, 0.2, 10.0); }

std::string Watchdog::describe_self() {
  const std::lock_guard lock(mutex_);
  const auto now = Clock::now();
  std::string text;
  if (in_wait_) {
    text = fmt::format("W|{:.3f}|{}{}", seconds_between(wait_since_, now), wait_what_,
                       activity_.empty() ? std::string() : " during " + activity_);
  } else {
    text = fmt::format("B|{:.3f}|{}", seconds_between(activity_since_, now), activity_.empty() ? "starting up" : activity_);
  }
  if (text.size() >= kAnswerBytes) text.resize(kAnswerBytes - 1);
  return text;
}

// Answers every query that has arrived; drops answers whose send completed.
void Watchdog::serve_queries() {
  for (;;) {
    int arrived = 0;
    MPI_Status status;
    if (MPI_Test(&query_request_, &arrived, &status) != MPI_SUCCESS || !arrived) break;
    auto answer = std::make_unique<Answer>();
    answer->text = describe_self();
    MPI_Isend(answer->text.c_str(), static_cast<int>(answer->text.size() + 1), MPI_CHAR, status.MPI_SOURCE, kAnswerTag,
              comm_, &answer->request);
    answers_.push_back(std::move(answer));
    MPI_Irecv(&query_buffer_, 1, MPI_CHAR, MPI_ANY_SOURCE, kQueryTag, comm_, &query_request_);
  }
  std::erase_if(answers_, [](const std::unique_ptr<Answer>& a) {
    int done = 0;
    if (a->request != MPI_REQUEST_NULL) MPI_Test(&a->request, &done, MPI_STATUS_IGNORE);
    return a->request == MPI_REQUEST_NULL;
  });
}

void Watchdog::loop() {
  const auto poll = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::clamp(timeout_s_ / 20.0, 0.01, 0.2)));
  std::unique_lock lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, poll);
    if (stop_) break;
    const auto now = Clock::now();
    const bool expired = in_wait_ && now >= next_check_;
    const std::string what = wait_what_;
    const std::string activity = activity_;
    const double waited = seconds_between(wait_since_, now);
    lock.unlock();
    serve_queries();
    if (expired) diagnose(what, activity, waited);
    lock.lock();
  }
}

void Watchdog::diagnose(const std::string& what, const std::string& activity, double waited) {
  WatchdogReport report;
  report.rank = rank_;
  report.what = what;
  report.activity = activity;
  report.waited_s = waited;
  report.timeout_s = timeout_s_;
  const char query = 'q';
  std::vector<MPI_Request> sends, receives;
  std::vector<std::vector<char>> buffers;
  std::vector<int> peers;
  for (int p = 0; p < world_size_; ++p) {
    if (p == rank_) continue;
    peers.push_back(p);
    buffers.emplace_back(kAnswerBytes, '\0');
    sends.emplace_back(MPI_REQUEST_NULL);
    receives.emplace_back(MPI_REQUEST_NULL);
    MPI_Isend(&query, 1, MPI_CHAR, p, kQueryTag, comm_, &sends.back());
    MPI_Irecv(buffers.back().data(), kAnswerBytes, MPI_CHAR, p, kAnswerTag, comm_, &receives.back());
  }
  std::vector<bool> answered(peers.size(), false);
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(answer_wait_s()));
  while (Clock::now() < deadline && std::count(answered.begin(), answered.end(), false) > 0) {
    serve_queries();  // peers that diagnose at the same moment query us too
    for (std::size_t i = 0; i < peers.size(); ++i) {
      int done = 0;
      if (!answered[i] && MPI_Test(&receives[i], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) answered[i] = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  bool busy_peer = false;
  for (std::size_t i = 0; i < peers.size(); ++i) {
    PeerState peer;
    if (answered[i]) {
      buffers[i].back() = '\0';
      peer = parse_answer(peers[i], buffers[i].data());
    } else {
      peer.rank = peers[i];
      // The peer never answers: these requests stay with MPI until the job ends.
      MPI_Request_free(&receives[i]);
    }
    busy_peer = busy_peer || (peer.answered && !peer.waiting);
    report.peers.push_back(std::move(peer));
  }
  for (auto& s : sends) {
    if (s != MPI_REQUEST_NULL) MPI_Request_free(&s);
  }
  const bool all_answered = std::all_of(answered.begin(), answered.end(), [](bool a) { return a; });
  report.fatal = !(all_answered && busy_peer);
  {
    const std::lock_guard lock(mutex_);
    next_check_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  }
  handler_(report);
}

}  // namespace odc::distributed
