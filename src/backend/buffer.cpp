#include "odc/backend/buffer.h"

#include "odc/core/error.h"

namespace odc::backend {

View View::at(std::int64_t offset, std::int64_t n) const {
  ODC_CHECK(offset >= 0 && n >= 0 && offset + n <= count, "view [{}, {}) outside a buffer of {} elements", offset,
            offset + n, count);
  return {static_cast<char*>(data) + static_cast<std::size_t>(offset) * dtype_size(dtype), dtype, device, n};
}

ConstView ConstView::at(std::int64_t offset, std::int64_t n) const {
  ODC_CHECK(offset >= 0 && n >= 0 && offset + n <= count, "view [{}, {}) outside a buffer of {} elements", offset,
            offset + n, count);
  return {static_cast<const char*>(data) + static_cast<std::size_t>(offset) * dtype_size(dtype), dtype, device, n};
}

View Buffer::get(std::int64_t count) {
  ODC_CHECK(count >= 0, "buffer of {} elements", count);
  const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype_);
  if (bytes > bytes_) {
    data_.reset();
    data_ = std::unique_ptr<void, BufferRelease>(memory_->allocate(bytes), BufferRelease{memory_, bytes});
    bytes_ = bytes;
  }
  return {data_.get(), dtype_, memory_->device(), count};
}

}  // namespace odc::backend
