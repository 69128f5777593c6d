#include "odc/core/tensor.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <sys/mman.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace odc {

namespace {
constexpr std::size_t kAlignment = 64;
// From this size on, storage is mapped from the system: its pages arrive zeroed when first
// touched, so a large tensor costs no memset and holds no resident memory until it is written
// (a store's masters that a checkpoint load fills, gradients and moments before the first step).
constexpr std::size_t kMapBytes = std::size_t{1} << 20;

void* aligned_zeroed(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  if (bytes >= kMapBytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fail("out of host memory mapping {} bytes: {}", bytes, std::strerror(errno));
    return p;
  }
  const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) fail("out of host memory allocating {} bytes", bytes);
  std::memset(p, 0, rounded);
  return p;
}
}  // namespace

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) {
    if (d < 0) fail("negative dimension in shape {}", shape_str(shape));
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

Tensor::Tensor(Shape shape, DType dtype, Device device)
    : shape_(std::move(shape)), numel_(shape_numel(shape_)), dtype_(dtype), device_(device) {
  if (device_.kind != DeviceKind::cpu) {
    fail("Tensor on a CUDA device needs the CUDA backend allocator (not part of the CPU build)");
  }
  storage_ = std::unique_ptr<void, Free>(aligned_zeroed(nbytes()), Free{nbytes()});
}

void Tensor::Free::operator()(void* p) const noexcept {
  if (bytes >= kMapBytes) {
    ::munmap(p, bytes);
  } else {
    std::free(p);
  }
}

std::int64_t Tensor::dim(int i) const {
  ODC_CHECK(i >= 0 && i < ndim(), "dim {} of a {}-d tensor", i, ndim());
  return shape_[static_cast<std::size_t>(i)];
}

void Tensor::zero() {
  if (storage_) std::memset(storage_.get(), 0, nbytes());
}

Tensor Tensor::clone() const {
  Tensor out(shape_, dtype_, device_);
  if (nbytes() > 0) std::memcpy(out.raw(), raw(), nbytes());
  return out;
}

void Tensor::reshape(Shape shape) {
  if (shape_numel(shape) != numel_) {
    fail("cannot reshape {} ({} elements) to {}", shape_str(shape_), numel_, shape_str(shape));
  }
  shape_ = std::move(shape);
}

}  // namespace odc
