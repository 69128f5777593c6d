#include "odc/core/device_specs.h"

#include "odc/core/error.h"
#include "odc/core/text.h"

namespace odc {

const std::vector<DeviceSpec>& device_specs() {
  // NVIDIA datasheets: A100 SXM4 80GB (312 TFLOP/s bf16 dense, 19.5 fp32, 2.039 TB/s HBM2e,
  // NVLink 3 600 GB/s bidirectional), H100 SXM5 (989 / 67 TFLOP/s, 3.35 TB/s HBM3, NVLink 4
  // 900 GB/s bidirectional), H200 SXM (same compute as H100, 4.8 TB/s HBM3e).
  static const std::vector<DeviceSpec> specs = {
      {"a100-80gb", "NVIDIA A100 SXM4 80GB", 312e12, 19.5e12, 2.039e12, 300e9, 8},
      {"h100-sxm", "NVIDIA H100 SXM5 80GB", 989e12, 67e12, 3.35e12, 450e9, 8},
      {"h200", "NVIDIA H200 SXM 141GB", 989e12, 67e12, 4.8e12, 450e9, 8},
  };
  return specs;
}

const DeviceSpec& device_spec(std::string_view name) {
  const std::string wanted = lower_ascii(name);
  std::string known;
  for (const auto& spec : device_specs()) {
    if (spec.name == wanted) return spec;
    known += (known.empty() ? "" : ", ") + spec.name;
  }
  fail("unknown device '{}' (known devices: {})", name, known);
}

}  // namespace odc
