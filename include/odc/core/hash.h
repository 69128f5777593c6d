#pragma once
// 64-bit FNV-1a, incremental: used to fingerprint configs, datasets and plans so ranks can check
// that they agree (not for security).
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace odc {

class Fnv1a {
 public:
  Fnv1a& add(const void* data, std::size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < bytes; ++i) state_ = (state_ ^ p[i]) * 1099511628211ull;
    return *this;
  }
  Fnv1a& add(std::string_view text) { return add(text.data(), text.size()); }
  template <typename T>
  Fnv1a& add_value(const T& value) {
    return add(&value, sizeof(T));
  }
  std::uint64_t value() const { return state_; }

 private:
  std::uint64_t state_ = 1469598103934665603ull;
};

inline std::uint64_t fnv1a64(std::string_view text) { return Fnv1a().add(text).value(); }

}  // namespace odc
