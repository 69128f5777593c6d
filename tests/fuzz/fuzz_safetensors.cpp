// libFuzzer target for the safetensors reader: any byte string is either a valid file or an
// odc::Error, never a crash, an out-of-bounds read (run under ASan/UBSan) or a hang. The bytes are
// parsed from memory through the same validation the mmap path uses, then every tensor the header
// accepted is read back in full, so an accepted byte range that escapes the buffer shows up here.
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "odc/core/dtype.h"
#include "odc/core/error.h"
#include "odc/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::byte> image(size);
  if (size > 0) std::memcpy(image.data(), data, size);
  try {
    const odc::io::SafetensorsFile file(std::move(image), "fuzz input");
    float sink = 0.0f;
    for (const auto& name : file.names()) {
      const auto& info = file.info(name);
      if (info.bytes.size() != static_cast<std::size_t>(info.numel()) * odc::dtype_size(info.dtype)) {
        __builtin_trap();  // the reader promised a span of exactly shape x dtype size
      }
      switch (info.dtype) {
        case odc::DType::f32:
        case odc::DType::bf16:
        case odc::DType::f16:
        case odc::DType::f64: {
          // Bounded so a huge (but valid) tensor does not make one input take seconds.
          const std::int64_t count = std::min<std::int64_t>(info.numel(), 1 << 16);
          std::vector<float> values(static_cast<std::size_t>(count));
          file.read_f32_range(name, info.numel() - count, count, values.data());
          for (float v : values) sink += v;
          break;
        }
        default:
          for (std::byte b : info.bytes) sink += static_cast<float>(b);
      }
    }
    volatile float keep = sink;  // the reads must not be optimized away
    (void)keep;
  } catch (const odc::Error&) {
    // Rejected input: the expected outcome for almost everything a fuzzer produces.
  }
  return 0;
}
