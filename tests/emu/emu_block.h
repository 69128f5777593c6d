#pragma once
// The CUDA execution model on the CPU: one thread block at a time, each CUDA thread a stackful
// fiber on the calling OS thread, run round-robin until it blocks at a block barrier
// (__syncthreads) or a warp-collective operation (shfl, ldmatrix, mma, __syncwarp). A barrier or
// collective that cannot complete (a thread exited, lanes of a warp at different operations or
// with different masks, every live thread blocked) is an odc::Error naming the kernel, the block,
// the threads and the source lines; never a hang.
//
// Used by cuda_emu.h (the device API) and ptx_emu.h (the PTX wrappers); tests do not call it.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

namespace odc_emu {

struct Index3 {
  unsigned x, y, z;
};

// A type-erased reference to the kernel body (valid for the duration of a launch).
struct BodyRef {
  void (*call)(const void* ctx) = nullptr;
  const void* ctx = nullptr;
};

// One pending cp.async copy (ptx_emu.h).
struct AsyncCopy {
  unsigned char* dst;
  const unsigned char* src;
  int bytes;
  bool valid;  // false: zero-fill, nothing read
};

enum class WaitState : std::uint8_t { running, barrier, warp, done };

struct EmuThread {
  void* sp = nullptr;  // saved stack pointer while switched out
  Index3 idx{};
  int linear = 0;
  int lane = 0;
  int warp = 0;
  WaitState state = WaitState::running;
  std::source_location where{};             // the barrier / collective it waits at
  std::vector<AsyncCopy> open_group;        // cp.async issued since the last commit_group
  std::deque<std::vector<AsyncCopy>> groups;  // committed, oldest first
};

// A warp-collective operation: every participating lane deposits pointers to its inputs and
// outputs (on its own fiber stack); the last lane to arrive runs `combine` for all of them.
struct WarpState;
using Combine = void (*)(WarpState&);

struct WarpState {
  struct Slot {
    const void* in = nullptr;
    void* out = nullptr;
  };
  unsigned arrived = 0;
  unsigned mask = 0;
  Combine combine = nullptr;
  const char* what = nullptr;
  unsigned existing = 0;  // lanes that exist (a partial last warp has fewer)
  unsigned exited = 0;
  Slot slots[32];
};

class Block {
 public:
  Block(const char* kernel, Index3 grid, Index3 block, std::size_t dynamic_smem);
  ~Block();
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  // Runs every thread of block `idx` to completion; throws odc::Error on an emulation error.
  void run(Index3 idx, BodyRef body);

  // ---- called from inside a fiber ----
  void syncthreads(std::source_location where);
  // Joins the warp collective of this lane's warp over `mask` (which must include this lane).
  void warp_collective(unsigned mask, const char* what, Combine combine, const void* in, void* out,
                       std::source_location where);
  [[noreturn]] void fail(const std::string& message);

  // True when [p, p + bytes) lies inside this block's shared memory (dynamic or static).
  bool in_shared(const void* p, std::size_t bytes) const;
  unsigned char* dynamic_smem() { return dynamic_; }
  std::size_t dynamic_smem_bytes() const { return dynamic_bytes_; }
  // Storage of one static __shared__ variable (keyed by its declaration site), poisoned at the
  // start of each block, the same for every thread of the block.
  void* static_shared(const void* site, std::size_t bytes, std::size_t align);

  Index3 grid_dim() const { return grid_; }
  Index3 block_dim() const { return block_; }
  Index3 block_idx() const { return idx_; }
  const char* kernel() const { return kernel_; }

  static void fiber_main(void* self);

 private:
  std::string describe(const EmuThread& t) const;
  std::string blocked_summary() const;
  void thread_exited(EmuThread& t);
  void yield(EmuThread& t);
  // Runs the runnable threads [first, first + count) once each; true if any ran.
  bool run_pass(int first, int count);

  const char* kernel_;
  Index3 grid_, block_, idx_{};
  int n_threads_;
  std::vector<EmuThread> threads_;
  std::vector<WarpState> warps_;
  int barrier_arrived_ = 0;
  int exited_ = 0;
  int live_ = 0;
  std::string error_;
  std::exception_ptr exception_;
  void* scheduler_sp_ = nullptr;
  BodyRef body_{};
  unsigned char* dynamic_ = nullptr;
  std::size_t dynamic_bytes_;
  std::unique_ptr<unsigned char[]> dynamic_storage_;
  struct StaticVar {
    const void* site;
    std::size_t offset;
  };
  std::vector<StaticVar> statics_;
  std::vector<unsigned char> static_arena_;
  std::size_t static_used_ = 0;
  struct Stacks;
  std::unique_ptr<Stacks> stacks_;
};

// The block and the CUDA thread running now (null outside a launch).
inline thread_local Block* tl_block = nullptr;
inline thread_local EmuThread* tl_thread = nullptr;

inline Block& this_block() { return *tl_block; }
inline EmuThread& this_thread() { return *tl_thread; }

// Runs a grid: blocks in order (x fastest), each with its threads as fibers.
void run_grid(const char* kernel, const void* kernel_id, Index3 grid, Index3 block,
              std::size_t dynamic_smem, BodyRef body);

// Launches of the kernel of that name so far (the name as written at the launch): for tests
// of how many launches a path makes.
std::uint64_t launch_count(const std::string& kernel);

// Largest dynamic shared memory a launch may ask for once cudaFuncSetAttribute raised the limit
// (227 KiB, sm_90); without the attribute the limit is 48 KiB, as on the device.
inline constexpr std::size_t kMaxDynamicSmem = 227 * 1024;
inline constexpr std::size_t kDefaultDynamicSmem = 48 * 1024;
void set_max_dynamic_smem(const void* kernel_id, std::size_t bytes);

// The interleaving of a block's threads (tests choose; the default is warps_forward). Each is one
// deterministic order; a missing barrier shows up (as poisoned or stale shared memory) when some
// warp reads before another wrote, or overwrites before another read, in that order:
//   round_robin     every runnable thread in turn: warps advance in near lockstep, one warp
//                   collective per pass;
//   warps_forward   warp 0 runs until it is blocked at a block barrier (or done), then warp 1, ...:
//                   early warps run ahead of late ones;
//   warps_backward  the same from the last warp down: late warps run ahead.
enum class Schedule : std::uint8_t { round_robin, warps_forward, warps_backward };
Schedule& schedule();

class UseSchedule {
 public:
  explicit UseSchedule(Schedule s) : saved_(schedule()) { schedule() = s; }
  ~UseSchedule() { schedule() = saved_; }
  UseSchedule(const UseSchedule&) = delete;
  UseSchedule& operator=(const UseSchedule&) = delete;

 private:
  Schedule saved_;
};

// Planted faults (tests only): each makes the emulator behave as if one line of the kernel
// source were different, to prove that the tests catch that mistake. A site is a file-name
// suffix and a line; an empty file matches nothing.
struct Site {
  std::string file;
  int line = 0;
  bool matches(const std::source_location& where) const;
};
struct Faults {
  Site skip_barrier;                 // this __syncthreads does nothing
  Site skip_wait;                    // this cp.async.wait_group does nothing
  Site shfl_mask_site;               // this shfl uses shfl_mask instead of its own mask
  unsigned shfl_mask = 0xffffffffu;
  bool swap_ldmatrix_trans = false;  // ldmatrix .trans loads plain, and plain loads .trans
};
Faults& faults();

class PlantFault {
 public:
  explicit PlantFault(const Faults& f) : saved_(faults()) { faults() = f; }
  ~PlantFault() { faults() = saved_; }
  PlantFault(const PlantFault&) = delete;
  PlantFault& operator=(const PlantFault&) = delete;

 private:
  Faults saved_;
};

}  // namespace odc_emu
