// What every ODC transport shares: host adds (the accumulator memory of host transports) and how a
// peer is named by default.
#include "odc/distributed/transport/odc_transport.h"

#include <algorithm>

#include <fmt/format.h>

namespace odc::distributed {

namespace {

class HostAccumulatorMemory final : public AccumulatorMemory {
 public:
  void zero(float* dst, std::int64_t n) override { std::fill(dst, dst + n, 0.0f); }
  void add(float* acc, const float* in, std::int64_t n) override {
    // A chunk never overlaps the accumulator (a slot, a receive buffer or a client's buffer): vectorized.
    float* __restrict out = acc;
    const float* __restrict from = in;
#pragma omp simd
    for (std::int64_t i = 0; i < n; ++i) out[i] += from[i];
  }
  void fold(float* acc, const float* in, std::int64_t n) override { add(acc, in, n); }
  bool host_visible() const override { return true; }
};

}  // namespace

AccumulatorMemory& host_accumulator_memory() {
  static HostAccumulatorMemory memory;  // stateless
  return memory;
}

std::string OdcTransport::describe_peer(int rank) const { return fmt::format("rank {}", rank); }

}  // namespace odc::distributed
