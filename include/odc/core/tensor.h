#pragma once
// Tensor: shape + dtype + device over RAII storage. CPU storage is 64-byte aligned host memory.
// Tensors are move-only (a copy of weights or activations is always explicit: clone()).
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "odc/core/dtype.h"
#include "odc/core/error.h"

namespace odc {

using Shape = std::vector<std::int64_t>;
std::int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  // Allocates zero-initialized storage (large storage: pages mapped from the system, zero when
  // first touched, resident only once touched).
  Tensor(Shape shape, DType dtype, Device device = Device::cpu());
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor() = default;

  static Tensor zeros(Shape shape, DType dtype = DType::f32) { return Tensor(std::move(shape), dtype); }

  const Shape& shape() const { return shape_; }
  std::int64_t dim(int i) const;
  int ndim() const { return static_cast<int>(shape_.size()); }
  std::int64_t numel() const { return numel_; }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool empty() const { return numel_ == 0; }

  void* raw() { return storage_.get(); }
  const void* raw() const { return storage_.get(); }

  // Typed access; checks that T matches the dtype.
  template <typename T>
  T* data();
  template <typename T>
  const T* data() const;
  template <typename T>
  std::span<T> span() { return {data<T>(), static_cast<std::size_t>(numel_)}; }
  template <typename T>
  std::span<const T> span() const { return {data<T>(), static_cast<std::size_t>(numel_)}; }

  void zero();
  Tensor clone() const;
  // Reinterprets the shape (same numel); the storage is kept.
  void reshape(Shape shape);

 private:
  struct Free {
    Free() noexcept : bytes(0) {}
    explicit Free(std::size_t size) noexcept : bytes(size) {}
    std::size_t bytes;  // the storage's size: mapped storage is unmapped, the rest freed
    void operator()(void* p) const noexcept;
  };
  Shape shape_;
  std::int64_t numel_ = 0;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu();
  std::unique_ptr<void, Free> storage_;
};

template <typename T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<std::uint32_t>() { return DType::u32; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<std::uint16_t>() { return DType::bf16; }

template <typename T>
T* Tensor::data() {
  ODC_CHECK(dtype_size(dtype_of<T>()) == dtype_size(dtype_),
            "tensor of {} accessed as {}", dtype_name(dtype_), dtype_name(dtype_of<T>()));
  ODC_CHECK(device_.kind == DeviceKind::cpu, "host access to a device tensor");
  return static_cast<T*>(storage_.get());
}
template <typename T>
const T* Tensor::data() const {
  return const_cast<Tensor*>(this)->data<T>();
}

}  // namespace odc
