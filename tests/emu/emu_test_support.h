#pragma once
// Helpers of the emulator tests: bf16 rounding written independently of the emulator's (so the
// two check each other), deterministic random data and error measures.
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

namespace odc_emu_test {

// Round to nearest even, by the definition: the two bf16 neighbours of f and the nearer one (the
// even one on a tie). Finite inputs only.
inline std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint32_t down = u & 0xffff0000u;
  const std::uint32_t rest = u & 0xffffu;
  std::uint32_t pick = down;
  if (rest > 0x8000u || (rest == 0x8000u && ((down >> 16) & 1u) != 0)) pick = down + 0x10000u;
  return static_cast<std::uint16_t>(pick >> 16);
}
inline float from_bf16(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// n bf16 values uniform in [-scale, scale), and their float values.
struct Bf16Data {
  std::vector<std::uint16_t> bits;
  std::vector<double> values;
};
inline Bf16Data random_bf16(std::size_t n, float scale, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  Bf16Data d;
  d.bits.resize(n);
  d.values.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    d.bits[i] = to_bf16(dist(rng));
    d.values[i] = from_bf16(d.bits[i]);
  }
  return d;
}

inline std::vector<double> widen(const std::vector<std::uint16_t>& bits) {
  std::vector<double> out(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) out[i] = from_bf16(bits[i]);
  return out;
}

// ||got - want||_2 / ||want||_2 (NaN in got gives NaN, which fails every comparison); 0 for
// empty or all-zero references matched exactly.
template <typename G>
double normwise_error(const std::vector<G>& got, const std::vector<double>& want) {
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  if (den == 0.0) return num == 0.0 ? 0.0 : INFINITY;
  return std::sqrt(num / den);
}

template <typename G>
double max_abs_error(const std::vector<G>& got, const std::vector<double>& want) {
  double m = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(d <= m)) m = d;  // NaN sticks
  }
  return m;
}

// "Device" memory whose last byte (rounded up to 16, the kernels' alignment) is followed by an
// inaccessible page: a kernel that reads or writes past the end of the buffer faults at once
// instead of touching a neighbour. Filled with all-ones bytes (NaN as bf16 / f32).
class GuardedBuffer {
 public:
  explicit GuardedBuffer(std::size_t bytes) {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    const std::size_t used = (bytes + 15) / 16 * 16;
    pages_ = (used + page - 1) / page * page + page;
    void* p = mmap(nullptr, pages_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("GuardedBuffer: mmap failed");
    base_ = static_cast<unsigned char*>(p);
    if (mprotect(base_ + pages_ - page, page, PROT_NONE) != 0) throw std::runtime_error("GuardedBuffer: mprotect failed");
    data_ = base_ + pages_ - page - used;
    std::memset(data_, 0xff, used);
  }
  ~GuardedBuffer() { munmap(base_, pages_); }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(data_);
  }
  template <typename T>
  std::vector<T> read(std::size_t count) const {
    std::vector<T> out(count);
    if (count > 0) std::memcpy(out.data(), data_, count * sizeof(T));
    return out;
  }
  template <typename T>
  void write(const std::vector<T>& v) {
    if (!v.empty()) std::memcpy(data_, v.data(), v.size() * sizeof(T));
  }

 private:
  unsigned char* base_ = nullptr;
  unsigned char* data_ = nullptr;
  std::size_t pages_ = 0;
};

}  // namespace odc_emu_test
