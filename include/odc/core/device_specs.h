#pragma once
// Named accelerators: the peak numbers MFU is measured against (train/) and the simulator's
// defaults for compute and links (sim/). Vendor datasheet values; dense (no sparsity) FLOP/s.
#include <string>
#include <string_view>
#include <vector>

namespace odc {

struct DeviceSpec {
  std::string name;                 // "a100-80gb", "h100-sxm", "h200"
  std::string description;
  double peak_bf16_flops = 0.0;     // dense tensor-core bf16, FLOP/s
  double peak_fp32_flops = 0.0;     // non-tensor-core fp32, FLOP/s
  double memory_bandwidth = 0.0;    // HBM, bytes/s
  double intra_node_bandwidth = 0.0;  // per GPU, per direction (NVLink through NVSwitch), bytes/s
  int devices_per_node = 8;
};

// The table, in a fixed order.
const std::vector<DeviceSpec>& device_specs();
// Looks a name up (case-insensitive); odc::Error listing the known names when absent.
const DeviceSpec& device_spec(std::string_view name);

}  // namespace odc
