#include "odc/distributed/group/shm_host_group.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "exchange_parts.h"
#include "odc/core/error.h"
#include "odc/distributed/group/local_launch.h"
#include "shm_segment.h"

namespace odc::distributed {
namespace {

using shm::Clock;
constexpr auto kLivenessEvery = std::chrono::milliseconds(100);  // how often a wait looks for dead peers
constexpr std::size_t kMaxJobIdLength = 200;

// What is wrong with a job id ("" = nothing): it becomes part of a file name in /dev/shm.
std::string job_id_problem(std::string_view job) {
  if (job.empty()) return "the job id is empty";
  if (job.size() > kMaxJobIdLength) return fmt::format("the job id has {} characters, at most {} fit", job.size(), kMaxJobIdLength);
  for (const char c : job) {
    if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '.' && c != '_' && c != '-') {
      return fmt::format("the job id holds '{}'; use letters, digits, '.', '_' and '-'", c);
    }
  }
  return {};
}

shm::Deadline deadline_after(double seconds) {
  return {Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds)), seconds};
}

// The bytes of a `total`-byte contribution that the round at byte `offset` carries.
std::uint64_t piece(std::uint64_t total, std::uint64_t offset, std::uint64_t chunk) {
  return total > offset ? std::min(chunk, total - offset) : 0;
}

std::string ranks_list(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

}  // namespace

ShmHostGroup::ShmHostGroup(std::string job, int rank, int size, double timeout_s)
    : job_(std::move(job)), rank_(rank), size_(size), timeout_s_(timeout_s) {
  if (const auto problem = job_id_problem(job_); !problem.empty()) fail("local job id '{}': {}", job_, problem);
  if (size < 1 || size > kMaxLocalRanks) {
    fail("local job '{}': a group of {} ranks; expected 1 to {}", job_, size, kMaxLocalRanks);
  }
  if (rank < 0 || rank >= size) fail("local job '{}': rank {} is not one of the group's ranks 0..{}", job_, rank, size - 1);
  if (!(timeout_s > 0)) fail("local job '{}': the timeout must be positive, got {:g} s", job_, timeout_s);
  const auto deadline = deadline_after(timeout_s);
  const std::string name = local_segment_name(job_);
  segment_ = rank == 0 ? shm::Segment::create(name, job_, size, deadline)
                       : shm::Segment::open(name, job_, rank, size, deadline);
  join(deadline);
}

ShmHostGroup::~ShmHostGroup() {
  // Peers still waiting for this rank learn it will not come (threads of one process share a pid).
  if (segment_) segment_->slot(rank_).state.store(shm::kLeft, std::memory_order_release);
}

void ShmHostGroup::join(const shm::Deadline& deadline) {
  shm::Header& header = segment_->header();
  shm::RankSlot& mine = segment_->slot(rank_);
  std::uint64_t earlier = 0;
  if (!mine.pid.compare_exchange_strong(earlier, static_cast<std::uint64_t>(::getpid()))) {
    fail("local job '{}': rank {} has joined already (pid {}): every process needs a rank of its own ({})", job_, rank_,
         earlier, kLocalRankVariable);
  }
  mine.state.store(shm::kJoined, std::memory_order_release);
  header.joined.fetch_add(1, std::memory_order_acq_rel);
  shm::Backoff backoff;
  auto next_check = Clock::now();
  while (header.joined.load(std::memory_order_acquire) < static_cast<std::uint64_t>(size_)) {
    const auto now = Clock::now();
    if (now >= next_check) {
      for (int r = 0; r < size_; ++r) {
        if (const auto why = departure(r); !why.empty()) {
          mine.state.store(shm::kLeft, std::memory_order_release);
          fail("local job '{}': {} while rank {} waited for every rank to join", job_, why, rank_);
        }
      }
      next_check = now + kLivenessEvery;
    }
    if (now >= deadline.at) {
      std::vector<std::string> missing;
      for (int r = 0; r < size_; ++r) {
        if (segment_->slot(r).pid.load() == 0) missing.push_back(std::to_string(r));
      }
      mine.state.store(shm::kLeft, std::memory_order_release);
      fail("local job '{}': rank {} waited {:g} s for rank(s) {} to join", job_, rank_, timeout_s_, ranks_list(missing));
    }
    backoff.pause();
  }
  // Every rank has the segment mapped: its name is no longer needed.
  if (rank_ == 0) segment_->unlink();
}

std::string ShmHostGroup::departure(int rank) const {
  const shm::RankSlot& slot = segment_->slot(rank);
  const std::uint64_t pid = slot.pid.load();
  if (slot.state.load(std::memory_order_acquire) == shm::kLeft) return fmt::format("rank {} (pid {}) left the group", rank, pid);
  if (pid != 0 && process_exited(pid)) return fmt::format("rank {} (pid {}) exited", rank, pid);
  return {};
}

std::uint64_t ShmHostGroup::chunk_bytes() const { return segment_->header().chunk_bytes; }

void ShmHostGroup::give_up(const std::string& detail) {
  broken_ = fmt::format("local job '{}': {}", job_, detail);
  shm::Header& header = segment_->header();
  std::uint64_t nobody = 0;
  if (header.aborted_by.compare_exchange_strong(nobody, shm::kAbortWriting)) {
    header.abort_message.write(detail);
    header.aborted_by.store(static_cast<std::uint64_t>(rank_) + 1, std::memory_order_release);
  }
  fail("{}", broken_);
}

void ShmHostGroup::wait_for_every_rank(const std::string& label) {
  const shm::Header& header = segment_->header();
  const auto deadline = deadline_after(timeout_s_);
  auto next_check = Clock::now() + kLivenessEvery;
  shm::Backoff backoff;
  std::vector<int> missing;
  for (;;) {
    missing.clear();
    for (int r = 0; r < size_; ++r) {
      if (segment_->slot(r).arrived.load(std::memory_order_acquire) < round_) missing.push_back(r);
    }
    if (missing.empty()) return;
    if (const std::uint64_t first = header.aborted_by.load(std::memory_order_acquire);
        first != 0 && first != shm::kAbortWriting) {
      give_up(fmt::format("rank {} stopped waiting in {}: rank {} failed first: {}", rank_, label, first - 1,
                          header.abort_message.read()));
    }
    const auto now = Clock::now();
    if (now >= next_check) {
      for (const int r : missing) {
        if (const auto why = departure(r); !why.empty()) {
          give_up(fmt::format("{} while rank {} waited for it in {}", why, rank_, label));
        }
      }
      next_check = now + kLivenessEvery;
    }
    if (now >= deadline.at) {
      std::vector<std::string> late;
      for (const int r : missing) {
        const auto activity = segment_->slot(r).activity.read();
        late.push_back(activity.empty() ? fmt::format("rank {} (announced nothing)", r)
                                        : fmt::format("rank {} (last announced '{}')", r, activity));
      }
      give_up(fmt::format("rank {} waited {:g} s in {} for the ranks that have not arrived: {}", rank_, timeout_s_, label,
                          ranks_list(late)));
    }
    backoff.pause();
  }
}

std::vector<std::string> ShmHostGroup::exchange(std::string_view kind, std::string_view what, std::string_view mine,
                                                Readers readers, int root) {
  if (!broken_.empty()) fail("{}", broken_);
  std::string label = fmt::format("{} '{}'", kind, what);
  label.resize(std::min(label.size(), shm::kLabelBytes));
  const auto reads = [&](int source) {
    switch (readers) {
      case Readers::none: return false;
      case Readers::root_reads_all: return rank_ == root;
      case Readers::all_read_all: return true;
      case Readers::all_read_root: return source == 0;
    }
    return false;
  };
  const std::uint64_t chunk = chunk_bytes();
  std::vector<std::string> out(static_cast<std::size_t>(size_));
  std::vector<std::uint64_t> totals(static_cast<std::size_t>(size_));
  std::uint64_t rounds = 1;
  for (std::uint64_t k = 0; k < rounds; ++k) {
    ++round_;
    const std::uint64_t offset = k * chunk;
    if (k == 0) {
      shm::ChunkHeader& header = segment_->chunk_header(round_, rank_);
      header.total = mine.size();
      header.label_length = label.size();
      std::memcpy(header.label, label.data(), label.size());
    }
    if (const auto n = piece(mine.size(), offset, chunk); n > 0) {
      std::memcpy(segment_->chunk_data(round_, rank_), mine.data() + offset, n);
    }
    segment_->slot(rank_).arrived.store(round_, std::memory_order_release);
    wait_for_every_rank(label);
    if (k == 0) {
      // Every rank sees every label, so every rank throws the same error naming both sides.
      const auto label_of = [&](int r) {
        const shm::ChunkHeader& h = segment_->chunk_header(round_, r);
        return std::string(h.label, std::min<std::uint64_t>(h.label_length, shm::kLabelBytes));
      };
      const std::string root_label = label_of(0);
      std::vector<std::string> mismatches;
      for (int r = 1; r < size_; ++r) {
        if (const auto other = label_of(r); other != root_label) {
          mismatches.push_back(fmt::format("rank {} called {} while rank 0 called {}", r, other, root_label));
        }
      }
      if (!mismatches.empty()) give_up(ranks_list(mismatches));
      std::uint64_t largest = 0;
      for (int r = 0; r < size_; ++r) {
        const auto i = static_cast<std::size_t>(r);
        totals[i] = segment_->chunk_header(round_, r).total;
        largest = std::max(largest, totals[i]);
        if (reads(r)) out[i].reserve(totals[i]);
      }
      rounds = std::max<std::uint64_t>(1, (largest + chunk - 1) / chunk);
    }
    for (int r = 0; r < size_; ++r) {
      const auto i = static_cast<std::size_t>(r);
      if (!reads(r)) continue;
      out[i].append(reinterpret_cast<const char*>(segment_->chunk_data(round_, r)), piece(totals[i], offset, chunk));
    }
  }
  return out;
}

void ShmHostGroup::barrier(std::string_view what) { exchange("barrier", what, {}, Readers::none); }

void ShmHostGroup::all_reduce_sum(std::span<double> values, std::string_view what) {
  const auto parts = exchange(fmt::format("all_reduce_sum of {} values", values.size()), what,
                              std::string_view(reinterpret_cast<const char*>(values.data()), values.size_bytes()),
                              Readers::all_read_all);
  detail::sum_in_rank_order(parts, values);  // the same bits on every rank
}

void ShmHostGroup::gather_to(int root, std::span<const std::byte> mine, std::span<std::byte> all,
                             std::string_view what) {
  detail::check_root(root, size_, what);
  const auto parts = exchange(fmt::format("gather of {} bytes to rank {}", mine.size(), root), what,
                              std::string_view(reinterpret_cast<const char*>(mine.data()), mine.size()),
                              Readers::root_reads_all, root);
  if (rank_ != root) return;
  detail::place_gathered(parts, mine.size(), all, what);
}

std::vector<std::string> ShmHostGroup::gather_text(std::string_view mine, std::string_view what) {
  auto parts = exchange("gather_text", what, mine, Readers::root_reads_all);
  if (!is_root()) return {};
  return parts;
}

void ShmHostGroup::broadcast(std::string& text, std::string_view what) {
  auto parts = exchange("broadcast", what, is_root() ? std::string_view(text) : std::string_view(), Readers::all_read_root);
  text = std::move(parts.front());
}

void ShmHostGroup::announce(std::string activity) { segment_->slot(rank_).activity.write(activity); }

bool launched_locally() { return std::getenv(kLocalJobVariable) != nullptr; }

namespace {

std::string required_variable(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) {
    fail("{} is not set: odc-run --local sets {}, {} and {} for every process it starts", name, kLocalJobVariable,
         kLocalRankVariable, kLocalSizeVariable);
  }
  return value;
}

int integer_variable(const char* name, int low, int high, const std::string& expected) {
  const std::string text = required_variable(name);
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || value < low || value > high) {
    fail("{}='{}': expected {}", name, text, expected);
  }
  return value;
}

}  // namespace

std::unique_ptr<ShmHostGroup> make_local_group_from_env(double timeout_s) {
  const std::string job = required_variable(kLocalJobVariable);
  if (const auto problem = job_id_problem(job); !problem.empty()) fail("{}='{}': {}", kLocalJobVariable, job, problem);
  const int size = integer_variable(kLocalSizeVariable, 1, kMaxLocalRanks,
                                    fmt::format("a number of ranks from 1 to {}", kMaxLocalRanks));
  const int rank = integer_variable(kLocalRankVariable, 0, size - 1,
                                    fmt::format("a rank from 0 to {} ({}={})", size - 1, kLocalSizeVariable, size));
  return std::make_unique<ShmHostGroup>(job, rank, size, timeout_s);
}

}  // namespace odc::distributed
