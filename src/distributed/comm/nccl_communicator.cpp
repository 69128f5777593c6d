#include "nccl_communicator.h"

#include <cuda_runtime.h>

#include <chrono>
#include <cstring>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/ranges.h>

#include "odc/core/error.h"

namespace odc::distributed {

namespace {

std::string to_hex(const void* data, std::size_t bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const auto* p = static_cast<const unsigned char*>(data);
  std::string out;
  out.reserve(2 * bytes);
  for (std::size_t i = 0; i < bytes; ++i) {
    out += kDigits[p[i] >> 4];
    out += kDigits[p[i] & 15];
  }
  return out;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// False unless `text` is exactly 2 * bytes lowercase hex digits (then written to `out`).
bool from_hex(std::string_view text, void* out, std::size_t bytes) {
  if (text.size() != 2 * bytes) return false;
  auto* p = static_cast<unsigned char*>(out);
  for (std::size_t i = 0; i < bytes; ++i) {
    const int hi = hex_digit(text[2 * i]), lo = hex_digit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    p[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return true;
}

std::string describe(const NcclOperation& op) {
  if (op.unit < 0) return std::string(op.kind);
  return fmt::format("{} of unit {} ({})", op.kind, op.unit, op.unit_name);
}

// This rank's GPU as "UUID<TAB>PCI bus id<TAB>device index": the UUID is unique across hosts.
std::string gpu_identity(int device) {
  cudaDeviceProp prop{};
  kernels::cuda::check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  char bus[32] = {};
  kernels::cuda::check_cuda(cudaDeviceGetPCIBusId(bus, sizeof bus, device), "cudaDeviceGetPCIBusId");
  return fmt::format("GPU-{}\t{}\t{}", to_hex(prop.uuid.bytes, sizeof prop.uuid.bytes), bus, device);
}

// Rank 0's verdict on every rank's GPU: empty when they are distinct, else the message naming the
// ranks that share one.
std::string shared_gpu_problem(const std::vector<std::string>& identities) {
  std::map<std::string, std::vector<int>> ranks_of;  // UUID -> ranks
  std::map<std::string, std::string> where;          // UUID -> "PCI bus id (device N)"
  for (std::size_t r = 0; r < identities.size(); ++r) {
    const std::string& id = identities[r];
    const auto tab = id.find('\t'), tab2 = id.find('\t', tab + 1);
    const std::string uuid = id.substr(0, tab);
    ranks_of[uuid].push_back(static_cast<int>(r));
    where[uuid] = fmt::format("{} (device {})", id.substr(tab + 1, tab2 - tab - 1), id.substr(tab2 + 1));
  }
  for (const auto& [uuid, ranks] : ranks_of) {
    if (ranks.size() < 2) continue;
    return fmt::format(
        "the collective comm on GPUs (NCCL) needs one GPU per rank, but ranks {} share GPU {} at {}: NCCL "
        "refuses duplicate devices. Give every rank its own GPU (e.g. CUDA_VISIBLE_DEVICES per rank), or use "
        "train.comm=odc, whose CUDA IPC transport serves ranks that share a GPU",
        fmt::join(ranks, ", "), uuid, where[uuid]);
  }
  return {};
}

}  // namespace

NcclCommunicator::NcclCommunicator(HostGroup& group, int device, double timeout_s)
    : rank_(group.rank()), size_(group.size()), timeout_s_(timeout_s) {
  if (!(timeout_s > 0)) fail("rank {}: NCCL needs a positive comm.timeout_s, got {}", rank_, timeout_s);
  kernels::cuda::set_device(device);
  // Every rank learns the same verdict before any rank starts NCCL (which would hang or fail
  // differently per rank on a shared GPU).
  const std::vector<std::string> identities = group.gather_text(gpu_identity(device), "the GPU of every rank (NCCL)");
  std::string problem = group.is_root() ? shared_gpu_problem(identities) : std::string();
  group.broadcast(problem, "the GPU check of every rank (NCCL)");
  if (!problem.empty()) throw Error(problem);

  ncclUniqueId id{};
  std::string id_text;
  if (group.is_root()) {
    const ncclResult_t made = ncclGetUniqueId(&id);
    // The other ranks must not wait for an id that never comes: they get an empty one and fail too.
    if (made == ncclSuccess) id_text = to_hex(&id, sizeof id);
    group.broadcast(id_text, "the NCCL unique id");
    if (made != ncclSuccess) {
      fail("rank 0: ncclGetUniqueId failed: {} ({})", ncclGetErrorString(made), ncclGetLastError(nullptr));
    }
  } else {
    group.broadcast(id_text, "the NCCL unique id");
    if (id_text.empty()) fail("rank {}: rank 0 could not create the NCCL unique id (see its error)", rank_);
    if (!from_hex(id_text, &id, sizeof id)) {
      fail("rank {}: the NCCL unique id from rank 0 is not {} hex digits: '{}'", rank_, 2 * sizeof id, id_text);
    }
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t started = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
  const NcclOperation init{"initialization", -1, {}};
  if (started != ncclSuccess && started != ncclInProgress) {
    const std::string detail = ncclGetLastError(comm_);
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    state_ = State::aborted;
    fail("rank {}: NCCL {} of {} ranks on device {}: {} ({})", rank_, describe(init), size_, device,
         ncclGetErrorString(started), detail);
  }
  poll(init, [] { return true; });
}

NcclCommunicator::~NcclCommunicator() { close(true); }

ncclComm_t NcclCommunicator::get(const NcclOperation& op) const {
  if (state_ != State::open) {
    fail("rank {}: NCCL {}: the communicator was {}", rank_, describe(op),
         state_ == State::aborted ? "aborted after an earlier error" : "closed");
  }
  return comm_;
}

void NcclCommunicator::abort_and_fail(const NcclOperation& op, const std::string& problem) {
  const std::string detail = comm_ != nullptr ? ncclGetLastError(comm_) : "";
  if (comm_ != nullptr) ncclCommAbort(comm_);
  comm_ = nullptr;
  state_ = State::aborted;
  if (detail.empty()) fail("rank {}: NCCL {}: {}", rank_, describe(op), problem);
  fail("rank {}: NCCL {}: {} ({})", rank_, describe(op), problem, detail);
}

template <typename Ready>
void NcclCommunicator::poll(const NcclOperation& op, Ready&& ready) {
  (void)get(op);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
  for (int round = 0;; ++round) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t asked = ncclCommGetAsyncError(comm_, &state);
    if (asked != ncclSuccess) abort_and_fail(op, ncclGetErrorString(asked));
    if (state != ncclSuccess && state != ncclInProgress) abort_and_fail(op, ncclGetErrorString(state));
    bool done = false;
    try {
      done = state == ncclSuccess && ready();
    } catch (const Error& e) {  // a CUDA error of the awaited work
      abort_and_fail(op, e.what());
    }
    if (done) return;
    if (std::chrono::steady_clock::now() > deadline) {
      abort_and_fail(op, fmt::format("not complete after comm.timeout_s = {} s: a peer rank stalled, died or "
                                     "runs other collectives, or this GPU's work before it is stuck; the "
                                     "communicator is aborted",
                                     timeout_s_));
    }
    // Spin briefly (collectives of one unit take micro- to milliseconds), then leave the core to
    // the other threads of the machine.
    if (round < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

void NcclCommunicator::enqueued(ncclResult_t result, const NcclOperation& op) {
  if (result == ncclSuccess) return;
  if (result != ncclInProgress) abort_and_fail(op, ncclGetErrorString(result));
  poll(op, [] { return true; });
}

void NcclCommunicator::check(const NcclOperation& op) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t asked = ncclCommGetAsyncError(get(op), &state);
  if (asked != ncclSuccess) abort_and_fail(op, ncclGetErrorString(asked));
  if (state != ncclSuccess && state != ncclInProgress) abort_and_fail(op, ncclGetErrorString(state));
}

void NcclCommunicator::await(const kernels::cuda::Event& event, const NcclOperation& op) {
  poll(op, [&] { return event.query(); });
}

void NcclCommunicator::close(bool clean) noexcept {
  if (state_ != State::open) return;
  ncclComm_t comm = std::exchange(comm_, nullptr);
  state_ = clean ? State::closed : State::aborted;
  if (clean) {
    const ncclResult_t finalizing = ncclCommFinalize(comm);  // non-blocking: usually ncclInProgress
    clean = finalizing == ncclSuccess || finalizing == ncclInProgress;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
  while (clean) {
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
      clean = false;
    } else if (state == ncclSuccess) {
      break;
    } else if (std::chrono::steady_clock::now() > deadline) {
      clean = false;
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  if (clean) {
    ncclCommDestroy(comm);
  } else {
    ncclCommAbort(comm);
  }
}

}  // namespace odc::distributed
