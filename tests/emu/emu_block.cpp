// Fibers and the block scheduler of the CUDA emulator (see emu_block.h).
#include "emu_block.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "odc/core/error.h"

#if !defined(__x86_64__)
#error "the CUDA emulator's fiber switch is written for x86-64"
#endif

// Context switch (System V x86-64): saves the callee-saved registers, MXCSR and the x87 control
// word on the current stack, stores the stack pointer in *save and continues on `load`'s stack.
// A new fiber's stack is laid out as if it had been switched out just before the trampoline,
// which calls r13(r12).
extern "C" void odc_emu_switch(void** save, void* load);
extern "C" void odc_emu_trampoline();
asm(R"(
  .text
  .globl odc_emu_switch
  .type odc_emu_switch, @function
odc_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size odc_emu_switch, .-odc_emu_switch
  .globl odc_emu_trampoline
  .type odc_emu_trampoline, @function
odc_emu_trampoline:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size odc_emu_trampoline, .-odc_emu_trampoline
)");

namespace odc_emu {

namespace {

constexpr std::size_t kStackBytes = 128 * 1024;  // kernels keep their fragments on the stack
constexpr std::size_t kGuardBytes = 4096;         // PROT_NONE below each stack: overflow faults
constexpr std::size_t kStaticArenaBytes = 48 * 1024;

[[noreturn]] void emu_error(const std::string& what) { throw odc::Error("cuda emulation: " + what); }

// Stack pointer of a fiber that starts in fn(arg) when first switched to.
void* initial_stack(unsigned char* top, void (*fn)(void*), void* arg) {
  auto* sp = reinterpret_cast<std::uint64_t*>(top) - 8;  // 16-aligned; ret leaves rsp = top
  std::uint32_t mxcsr = 0;
  std::uint16_t fcw = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fcw));
  sp[0] = static_cast<std::uint64_t>(mxcsr) | (static_cast<std::uint64_t>(fcw) << 32);
  sp[1] = 0;                                          // r15
  sp[2] = 0;                                          // r14
  sp[3] = reinterpret_cast<std::uint64_t>(fn);        // r13
  sp[4] = reinterpret_cast<std::uint64_t>(arg);       // r12
  sp[5] = 0;                                          // rbx
  sp[6] = 0;                                          // rbp
  sp[7] = reinterpret_cast<std::uint64_t>(&odc_emu_trampoline);
  return sp;
}

struct LaunchLimits {
  std::mutex mutex;
  std::map<const void*, std::size_t> max_dynamic;  // raised by cudaFuncSetAttribute
  std::map<std::string, std::uint64_t> launches;   // per kernel name (launch_count)
};
LaunchLimits& limits() {
  static LaunchLimits l;
  return l;
}

std::string site(const std::source_location& w) {
  const std::string file = w.file_name();
  const auto slash = file.rfind('/');
  return fmt::format("{}:{}", slash == std::string::npos ? file : file.substr(slash + 1), w.line());
}

}  // namespace

struct Block::Stacks {
  unsigned char* base = nullptr;
  std::size_t bytes = 0;
  explicit Stacks(int n) : bytes(static_cast<std::size_t>(n) * (kStackBytes + kGuardBytes)) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) emu_error(fmt::format("cannot map {} fiber stacks", n));
    base = static_cast<unsigned char*>(p);
    for (int i = 0; i < n; ++i) {
      mprotect(base + static_cast<std::size_t>(i) * (kStackBytes + kGuardBytes), kGuardBytes, PROT_NONE);
    }
  }
  ~Stacks() { munmap(base, bytes); }
  unsigned char* top(int i) const {
    return base + static_cast<std::size_t>(i + 1) * (kStackBytes + kGuardBytes);
  }
};

bool Site::matches(const std::source_location& where) const {
  if (file.empty() || static_cast<int>(where.line()) != line) return false;
  const std::string name = where.file_name();
  return name.size() >= file.size() && name.compare(name.size() - file.size(), file.size(), file) == 0;
}

Faults& faults() {
  static Faults f;
  return f;
}

Schedule& schedule() {
  static Schedule s = Schedule::warps_forward;
  return s;
}

Block::Block(const char* kernel, Index3 grid, Index3 block, std::size_t dynamic_smem)
    : kernel_(kernel), grid_(grid), block_(block),
      n_threads_(static_cast<int>(block.x * block.y * block.z)), threads_(n_threads_),
      warps_((n_threads_ + 31) / 32), dynamic_bytes_(dynamic_smem),
      dynamic_storage_(new unsigned char[std::max<std::size_t>(dynamic_smem, 16) + 16]),
      static_arena_(kStaticArenaBytes + 16), stacks_(std::make_unique<Stacks>(n_threads_)) {
  auto addr = reinterpret_cast<std::uintptr_t>(dynamic_storage_.get());
  dynamic_ = dynamic_storage_.get() + ((16 - (addr & 15)) & 15);
}

Block::~Block() = default;

void Block::fiber_main(void* self) {
  Block& b = *tl_block;
  auto& t = *static_cast<EmuThread*>(self);
  try {
    b.body_.call(b.body_.ctx);
  } catch (...) {
    if (b.error_.empty()) {
      b.exception_ = std::current_exception();
      b.error_ = "exception";
    }
  }
  if (b.error_.empty()) b.thread_exited(t);
  t.state = WaitState::done;
  void* dummy = nullptr;
  odc_emu_switch(&dummy, b.scheduler_sp_);
  __builtin_unreachable();
}

void Block::run(Index3 idx, BodyRef body) {
  idx_ = idx;
  body_ = body;
  barrier_arrived_ = 0;
  exited_ = 0;
  live_ = n_threads_;
  error_.clear();
  exception_ = nullptr;
  // Shared memory is undefined at the start of a block: poison it (all-ones bytes are NaN as
  // bf16, f32 and f64), so that reading what nobody wrote shows up.
  std::memset(dynamic_, 0xff, dynamic_bytes_);
  statics_.clear();
  static_used_ = 0;
  for (WarpState& w : warps_) w = WarpState{};
  for (int i = 0; i < n_threads_; ++i) {
    EmuThread& t = threads_[i];
    t = EmuThread{};
    t.linear = i;
    t.idx = {static_cast<unsigned>(i) % block_.x, static_cast<unsigned>(i) / block_.x % block_.y,
             static_cast<unsigned>(i) / (block_.x * block_.y)};
    t.lane = i & 31;
    t.warp = i >> 5;
    warps_[t.warp].existing |= 1u << t.lane;
    t.sp = initial_stack(stacks_->top(i), &Block::fiber_main, &t);
  }
  Block* const outer_block = tl_block;
  EmuThread* const outer_thread = tl_thread;
  tl_block = this;
  const Schedule order = schedule();
  const int n_warps = static_cast<int>(warps_.size());
  while (live_ > 0 && error_.empty()) {
    bool progressed = false;
    if (order == Schedule::round_robin) {
      progressed = run_pass(0, n_threads_);
    } else {
      for (int i = 0; i < n_warps && error_.empty(); ++i) {
        const int w = order == Schedule::warps_forward ? i : n_warps - 1 - i;
        const int first = w * 32;
        while (error_.empty() && run_pass(first, std::min(32, n_threads_ - first))) progressed = true;
      }
    }
    if (!progressed && error_.empty()) {
      error_ = "deadlock: every live thread is blocked: " + blocked_summary();
    }
  }
  tl_block = outer_block;
  tl_thread = outer_thread;
  if (exception_) std::rethrow_exception(exception_);
  if (!error_.empty()) {
    emu_error(fmt::format("kernel {} block ({},{},{}): {}", kernel_, idx.x, idx.y, idx.z, error_));
  }
}

bool Block::run_pass(int first, int count) {
  bool ran = false;
  for (int i = first; i < first + count; ++i) {
    EmuThread& t = threads_[i];
    if (t.state != WaitState::running) continue;
    tl_thread = &t;
    odc_emu_switch(&scheduler_sp_, t.sp);
    ran = true;
    if (!error_.empty()) break;
  }
  return ran;
}

std::string Block::describe(const EmuThread& t) const {
  return fmt::format("thread ({},{},{}) (warp {} lane {})", t.idx.x, t.idx.y, t.idx.z, t.warp, t.lane);
}

std::string Block::blocked_summary() const {
  std::map<std::string, int> counts;
  for (const EmuThread& t : threads_) {
    if (t.state == WaitState::barrier) ++counts["__syncthreads at " + site(t.where)];
    if (t.state == WaitState::warp) {
      ++counts[fmt::format("warp {} {} at {}", t.warp, warps_[t.warp].what, site(t.where))];
    }
  }
  std::string out;
  for (const auto& [what, n] : counts) out += fmt::format("{}{} thread(s) at {}", out.empty() ? "" : "; ", n, what);
  return out + fmt::format("; {} exited", exited_);
}

void Block::yield(EmuThread& t) {
  odc_emu_switch(&t.sp, scheduler_sp_);
  tl_thread = &t;
}

void Block::fail(const std::string& message) {
  EmuThread& t = *tl_thread;
  if (error_.empty()) error_ = describe(t) + ": " + message;
  t.state = WaitState::done;
  void* dummy = nullptr;
  odc_emu_switch(&dummy, scheduler_sp_);
  __builtin_unreachable();
}

void Block::thread_exited(EmuThread& t) {
  ++exited_;
  --live_;
  WarpState& w = warps_[t.warp];
  w.exited |= 1u << t.lane;
  if (barrier_arrived_ > 0) {
    fail(fmt::format("exited while {} thread(s) wait at __syncthreads ({})", barrier_arrived_,
                     blocked_summary()));
  }
  if (w.arrived != 0 && (w.mask & (1u << t.lane)) != 0) {
    fail(fmt::format("exited while lanes 0x{:08x} of its warp wait for it at {}", w.arrived, w.what));
  }
}

void Block::syncthreads(std::source_location where) {
  EmuThread& t = *tl_thread;
  if (faults().skip_barrier.matches(where)) return;
  if (exited_ > 0) {
    fail(fmt::format("__syncthreads at {} after {} thread(s) of the block exited: not every thread "
                     "reaches this barrier",
                     site(where), exited_));
  }
  t.where = where;
  if (++barrier_arrived_ == n_threads_) {
    barrier_arrived_ = 0;
    for (EmuThread& other : threads_) other.state = WaitState::running;
    return;
  }
  t.state = WaitState::barrier;
  yield(t);
}

void Block::warp_collective(unsigned mask, const char* what, Combine combine, const void* in,
                            void* out, std::source_location where) {
  EmuThread& t = *tl_thread;
  WarpState& w = warps_[t.warp];
  const unsigned bit = 1u << t.lane;
  if ((mask & bit) == 0) {
    fail(fmt::format("{} at {} with membermask 0x{:08x}, which does not include the calling lane",
                     what, site(where), mask));
  }
  if ((mask & ~w.existing) != 0 || (mask & w.exited) != 0) {
    fail(fmt::format("{} at {} with membermask 0x{:08x} names lanes that do not exist or exited "
                     "(existing 0x{:08x}, exited 0x{:08x})",
                     what, site(where), mask, w.existing, w.exited));
  }
  if (w.arrived == 0) {
    w.mask = mask;
    w.combine = combine;
    w.what = what;
  } else if (w.mask != mask || w.combine != combine) {
    fail(fmt::format("{} at {} (mask 0x{:08x}) while lanes 0x{:08x} of the warp wait at {} (mask "
                     "0x{:08x}): the warp diverged",
                     what, site(where), mask, w.arrived, w.what, w.mask));
  }
  w.slots[t.lane] = {in, out};
  w.arrived |= bit;
  t.where = where;
  if (w.arrived == w.mask) {
    w.combine(w);
    w.arrived = 0;
    for (int lane = 0; lane < 32; ++lane) {
      if ((mask >> lane) & 1u) threads_[t.warp * 32 + lane].state = WaitState::running;
    }
    return;
  }
  t.state = WaitState::warp;
  yield(t);
}

bool Block::in_shared(const void* p, std::size_t bytes) const {
  const auto* c = static_cast<const unsigned char*>(p);
  if (c >= dynamic_ && c + bytes <= dynamic_ + dynamic_bytes_) return true;
  return c >= static_arena_.data() && c + bytes <= static_arena_.data() + static_used_;
}

void* Block::static_shared(const void* site_key, std::size_t bytes, std::size_t align) {
  for (const StaticVar& v : statics_) {
    if (v.site == site_key) return static_arena_.data() + v.offset;
  }
  const std::size_t offset = (static_used_ + align - 1) / align * align;
  if (offset + bytes > kStaticArenaBytes) {
    fail(fmt::format("static __shared__ variables exceed {} bytes", kStaticArenaBytes));
  }
  std::memset(static_arena_.data() + offset, 0xff, bytes);
  statics_.push_back({site_key, offset});
  static_used_ = offset + bytes;
  return static_arena_.data() + offset;
}

void set_max_dynamic_smem(const void* kernel_id, std::size_t bytes) {
  if (bytes > kMaxDynamicSmem) {
    emu_error(fmt::format("cudaFuncSetAttribute(MaxDynamicSharedMemorySize) = {} exceeds {} bytes",
                          bytes, kMaxDynamicSmem));
  }
  std::lock_guard<std::mutex> lock(limits().mutex);
  limits().max_dynamic[kernel_id] = bytes;
}

std::uint64_t launch_count(const std::string& kernel) {
  std::lock_guard<std::mutex> lock(limits().mutex);
  const auto it = limits().launches.find(kernel);
  return it == limits().launches.end() ? 0 : it->second;
}

void run_grid(const char* kernel, const void* kernel_id, Index3 grid, Index3 block,
              std::size_t dynamic_smem, BodyRef body) {
  const std::uint64_t threads = std::uint64_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.z > 64) {
    emu_error(fmt::format("launch of {}: block ({},{},{}) is not a valid block shape", kernel,
                          block.x, block.y, block.z));
  }
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x >= (1u << 31) || grid.y > 65535 ||
      grid.z > 65535) {
    emu_error(fmt::format("launch of {}: grid ({},{},{}) is not a valid grid", kernel, grid.x,
                          grid.y, grid.z));
  }
  std::size_t limit = kDefaultDynamicSmem;
  {
    std::lock_guard<std::mutex> lock(limits().mutex);
    ++limits().launches[kernel];
    const auto it = limits().max_dynamic.find(kernel_id);
    if (it != limits().max_dynamic.end()) limit = std::max(limit, it->second);
  }
  if (dynamic_smem > limit) {
    emu_error(fmt::format("launch of {}: {} bytes of dynamic shared memory exceed the kernel's "
                          "limit of {} (cudaFuncSetAttribute not called?)",
                          kernel, dynamic_smem, limit));
  }
  Block b(kernel, grid, block, dynamic_smem);
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) b.run({x, y, z}, body);
    }
  }
}

}  // namespace odc_emu
