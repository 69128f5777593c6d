#pragma once
// Emulated build only (tests/emu): the memory of the emulated device. Every allocation is host
// memory, but the runtime's bookkeeping is kept as the driver keeps it, so that the code above it
// (DeviceAllocator, PinnedBuffer, AttentionPlan) is exercised with its real error paths:
//
// * cudaMalloc / cudaFree, cudaMallocHost / cudaFreeHost and pool blocks are tracked by pointer;
//   freeing a pointer that is not the start of a live allocation of the right kind (device memory
//   through cudaFreeHost, an interior pointer, a double free) is cudaErrorInvalidValue.
// * Memory pools (cudaMemPoolCreate, cudaMallocFromPoolAsync, cudaFreeAsync, cudaMemPoolTrimTo,
//   the attributes ReleaseThreshold, Reserved/UsedMem Current/High, cudaMemPoolDestroy) keep their
//   freed blocks: a block is the request rounded up to kPoolGranule bytes; an allocation takes the
//   smallest free block that fits (no splitting), else reserves a new block. "Reserved" is the sum
//   of the pool's blocks, "used" the sum of those allocated. Every stream runs in program order,
//   so a block freed with cudaFreeAsync is reusable at once, and a synchronization (stream, event
//   or device) releases free blocks above a pool's release threshold, as the driver does.
//   cudaMemPoolProps::maxSize limits a pool's reserve; a destroyed pool with live blocks goes
//   away when the last one is freed.
// * DeviceCapacity limits the device memory (cudaMalloc'ed bytes plus every pool's reserve), so
//   that out-of-memory paths can be tested: beyond it, allocations fail with
//   cudaErrorMemoryAllocation.
//
// Status codes are the numeric cudaError_t values (0 success, 1 invalid value, 2 out of memory).
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace odc_emu::memory {

inline constexpr int kSuccess = 0;
inline constexpr int kInvalidValue = 1;
inline constexpr int kOutOfMemory = 2;
inline constexpr std::size_t kAlignment = 256;    // cudaMalloc's and the pools' alignment
inline constexpr std::size_t kPoolGranule = 512;  // the pools' block size unit

// The attributes, numbered as cudaMemPoolAttr.
enum class PoolAttr : int {
  release_threshold = 4,
  reserved_current = 5,
  reserved_high = 6,
  used_current = 7,
  used_high = 8,
};

struct Pool {
  std::uint64_t max_size = 0;  // 0: no limit of its own
  std::uint64_t release_threshold = 0;
  std::uint64_t reserved = 0, reserved_high = 0, used = 0, used_high = 0;
  std::multimap<std::size_t, void*> free_blocks;  // size -> block
  bool destroyed = false;
};

class Device {
 public:
  ~Device() {
    for (auto& [ptr, a] : live_) raw_free(ptr);
    for (auto& pool : pools_) {
      for (auto& [size, ptr] : pool->free_blocks) raw_free(ptr);
    }
  }

  int malloc_device(void** p, std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    *p = nullptr;
    const std::size_t size = bytes == 0 ? 1 : bytes;
    if (!fits(size)) return kOutOfMemory;
    *p = raw_alloc(size);
    if (*p == nullptr) return kOutOfMemory;
    live_.emplace(*p, Allocation{size, Kind::device, nullptr});
    device_bytes_ += size;
    return kSuccess;
  }

  int malloc_pinned(void** p, std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    *p = raw_alloc(bytes == 0 ? 1 : bytes);
    if (*p == nullptr) return kOutOfMemory;
    live_.emplace(*p, Allocation{bytes == 0 ? 1 : bytes, Kind::pinned, nullptr});
    return kSuccess;
  }

  int free_pinned(void* p) {
    if (p == nullptr) return kSuccess;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(p);
    if (it == live_.end() || it->second.kind != Kind::pinned) return kInvalidValue;
    live_.erase(it);
    raw_free(p);
    return kSuccess;
  }

  // cudaFree: device memory, or a pool block (returned to its pool, as after a cudaFreeAsync
  // followed by a synchronization).
  int free_device(void* p) {
    if (p == nullptr) return kSuccess;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(p);
    if (it == live_.end() || it->second.kind == Kind::pinned) return kInvalidValue;
    if (it->second.kind == Kind::pool) {
      release_block_locked(it);
      synchronized_locked();
      return kSuccess;
    }
    device_bytes_ -= it->second.bytes;
    live_.erase(it);
    raw_free(p);
    return kSuccess;
  }

  // cudaFreeAsync: a pool block goes back to its pool; plain device memory is freed.
  int free_async(void* p) {
    if (p == nullptr) return kSuccess;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = live_.find(p);
      if (it == live_.end() || it->second.kind == Kind::pinned) return kInvalidValue;
      if (it->second.kind == Kind::pool) {
        release_block_locked(it);
        return kSuccess;
      }
    }
    return free_device(p);
  }

  Pool* create_pool(std::uint64_t max_size) {
    std::lock_guard<std::mutex> lock(mutex_);
    pools_.push_back(std::make_unique<Pool>());
    pools_.back()->max_size = max_size;
    return pools_.back().get();
  }

  // The pool of cudaMallocAsync (release threshold 0, as the driver's default pool).
  Pool* default_pool() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (default_pool_ == nullptr) {
      pools_.push_back(std::make_unique<Pool>());
      default_pool_ = pools_.back().get();
    }
    return default_pool_;
  }

  int destroy_pool(Pool* pool) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!known_locked(pool) || pool == default_pool_) return kInvalidValue;
    trim_locked(*pool, 0);
    pool->destroyed = true;
    erase_if_done_locked(pool);
    return kSuccess;
  }

  int malloc_from_pool(void** p, std::size_t bytes, Pool* pool) {
    std::lock_guard<std::mutex> lock(mutex_);
    *p = nullptr;
    if (!known_locked(pool)) return kInvalidValue;
    const std::size_t size = ((bytes == 0 ? 1 : bytes) + kPoolGranule - 1) / kPoolGranule * kPoolGranule;
    auto fit = pool->free_blocks.lower_bound(size);
    std::size_t block = size;
    if (fit != pool->free_blocks.end()) {
      block = fit->first;
      *p = fit->second;
      pool->free_blocks.erase(fit);
    } else {
      if (pool->max_size != 0 && pool->reserved + size > pool->max_size) return kOutOfMemory;
      if (!fits(size)) return kOutOfMemory;
      *p = raw_alloc(size);
      if (*p == nullptr) return kOutOfMemory;
      pool->reserved += size;
      device_bytes_ += size;
      if (pool->reserved > pool->reserved_high) pool->reserved_high = pool->reserved;
    }
    live_.emplace(*p, Allocation{block, Kind::pool, pool});
    pool->used += block;
    if (pool->used > pool->used_high) pool->used_high = pool->used;
    return kSuccess;
  }

  int trim_to(Pool* pool, std::size_t keep) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!known_locked(pool)) return kInvalidValue;
    trim_locked(*pool, keep);
    return kSuccess;
  }

  int get_attribute(Pool* pool, PoolAttr attr, std::uint64_t* value) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!known_locked(pool) || value == nullptr) return kInvalidValue;
    switch (attr) {
      case PoolAttr::release_threshold: *value = pool->release_threshold; return kSuccess;
      case PoolAttr::reserved_current: *value = pool->reserved; return kSuccess;
      case PoolAttr::reserved_high: *value = pool->reserved_high; return kSuccess;
      case PoolAttr::used_current: *value = pool->used; return kSuccess;
      case PoolAttr::used_high: *value = pool->used_high; return kSuccess;
    }
    return kInvalidValue;
  }

  // Release threshold, and the high-water marks (which may only be reset to 0).
  int set_attribute(Pool* pool, PoolAttr attr, const std::uint64_t* value) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!known_locked(pool) || value == nullptr) return kInvalidValue;
    switch (attr) {
      case PoolAttr::release_threshold: pool->release_threshold = *value; return kSuccess;
      case PoolAttr::reserved_high:
        if (*value != 0) return kInvalidValue;
        pool->reserved_high = pool->reserved;
        return kSuccess;
      case PoolAttr::used_high:
        if (*value != 0) return kInvalidValue;
        pool->used_high = pool->used;
        return kSuccess;
      default: return kInvalidValue;
    }
  }

  // A stream, event or device synchronization: pools give back what exceeds their threshold.
  void synchronized() {
    std::lock_guard<std::mutex> lock(mutex_);
    synchronized_locked();
  }

  // Live allocations of each kind, and the device memory in use (cudaMalloc + pool reserves).
  std::size_t live_device_allocations() const { return count(Kind::device); }
  std::size_t live_pinned_allocations() const { return count(Kind::pinned); }
  std::size_t live_pool_blocks() const { return count(Kind::pool); }
  std::size_t device_bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return device_bytes_;
  }
  void set_capacity(std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    capacity_ = bytes;
  }
  std::size_t capacity() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return capacity_;
  }

 private:
  enum class Kind { device, pinned, pool };
  struct Allocation {
    std::size_t bytes;
    Kind kind;
    Pool* pool;
  };

  static void* raw_alloc(std::size_t bytes) {
    return ::operator new(bytes, std::align_val_t{kAlignment}, std::nothrow);
  }
  static void raw_free(void* p) { ::operator delete(p, std::align_val_t{kAlignment}); }

  bool fits(std::size_t bytes) const { return bytes <= capacity_ && device_bytes_ <= capacity_ - bytes; }

  bool known_locked(const Pool* pool) const {
    for (const auto& p : pools_) {
      if (p.get() == pool) return !p->destroyed;
    }
    return false;
  }

  std::size_t count(Kind kind) const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::size_t n = 0;
    for (const auto& [ptr, a] : live_) n += a.kind == kind;
    return n;
  }

  void release_block_locked(std::unordered_map<void*, Allocation>::iterator it) {
    Pool* pool = it->second.pool;
    pool->used -= it->second.bytes;
    pool->free_blocks.emplace(it->second.bytes, it->first);
    live_.erase(it);
    if (pool->destroyed) {
      trim_locked(*pool, 0);
      erase_if_done_locked(pool);
    }
  }

  // Frees free blocks, largest first, until the reserve is at most `keep`.
  void trim_locked(Pool& pool, std::size_t keep) {
    while (pool.reserved > keep && !pool.free_blocks.empty()) {
      auto largest = std::prev(pool.free_blocks.end());
      pool.reserved -= largest->first;
      device_bytes_ -= largest->first;
      raw_free(largest->second);
      pool.free_blocks.erase(largest);
    }
  }

  void erase_if_done_locked(Pool* pool) {
    if (!pool->destroyed || pool->used != 0) return;
    for (auto it = pools_.begin(); it != pools_.end(); ++it) {
      if (it->get() == pool) {
        pools_.erase(it);
        return;
      }
    }
  }

  void synchronized_locked() {
    for (auto& pool : pools_) trim_locked(*pool, pool->release_threshold);
  }

  mutable std::mutex mutex_;
  std::unordered_map<void*, Allocation> live_;
  std::vector<std::unique_ptr<Pool>> pools_;
  Pool* default_pool_ = nullptr;
  std::size_t device_bytes_ = 0;
  std::size_t capacity_ = std::numeric_limits<std::size_t>::max();
};

// The emulated device (one per process, as the GPU is).
inline Device& device() {
  static Device d;
  return d;
}

// Limits the device memory for a scope (tests of out-of-memory paths).
class DeviceCapacity {
 public:
  explicit DeviceCapacity(std::size_t bytes) : previous_(device().capacity()) { device().set_capacity(bytes); }
  ~DeviceCapacity() { device().set_capacity(previous_); }
  DeviceCapacity(const DeviceCapacity&) = delete;
  DeviceCapacity& operator=(const DeviceCapacity&) = delete;

 private:
  std::size_t previous_;
};

}  // namespace odc_emu::memory
