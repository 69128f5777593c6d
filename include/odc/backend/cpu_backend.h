#pragma once
// CpuBackend: the model's ops on the host, in fp32, through the CPU kernels (odc/kernels/*.h,
// src/kernels/cpu). Views alias host memory: uploads are free.
#include <memory>

#include "odc/backend/backend.h"

namespace odc::backend {

class CpuBackend final : public Backend {
 public:
  // `threads`: compute threads for the kernels (BLAS), >= 1.
  explicit CpuBackend(int threads = 1);

  std::string_view name() const override { return "cpu"; }
  DeviceMemory& memory() override;
  DType activation_dtype() const override { return DType::f32; }
  // The best of several 1024^3 sgemms through the BLAS the kernels use, with the current thread
  // count (about 0.2 s; the best, since other processes on the machine only ever make a run
  // slower). MFU against it says how much of what this machine's BLAS can do the training
  // reaches: the honest CPU analogue of a GPU's datasheet peak (named devices: core/device_specs.h).
  double measure_peak_flops() override;

  ConstView upload(std::span<const std::int32_t> host, Buffer& staging) override;
  ConstView upload(std::span<const float> host, Buffer& staging) override;
  void download(ConstView source, std::span<float> host) override;
  void copy(ConstView source, View target) override;
  void zero(View target) override;
  void gather_rows(ConstView source, ConstView rows, std::int64_t width, View target) override;
  void scatter_rows(ConstView source, ConstView rows, std::int64_t width, View target) override;

  void rmsnorm_forward(ConstView x, ConstView weight, View y, View rstd, std::int64_t rows, std::int64_t dim,
                       double eps) override;
  void rmsnorm_backward(ConstView dy, ConstView x, ConstView weight, ConstView rstd, View dx, View dweight,
                        std::int64_t rows, std::int64_t dim, bool dx_accumulate) override;
  void linear_forward(ConstView x, ConstView weight, ConstView bias, View y, std::int64_t rows, std::int64_t in,
                      std::int64_t out) override;
  void linear_forward_add(ConstView x, ConstView weight, View y, std::int64_t rows, std::int64_t in,
                          std::int64_t out) override;
  void linear_backward(ConstView dy, ConstView x, ConstView weight, View dx, View dweight, View dbias,
                       std::int64_t rows, std::int64_t in, std::int64_t out, bool dx_accumulate) override;
  void rope_tables(ConstView positions, std::int64_t tokens, const std::vector<double>& inv_freq, View cos,
                   View sin) override;
  void rope_forward(View x, ConstView cos, ConstView sin, std::int64_t tokens, int heads, int head_dim) override;
  void rope_backward(View dx, ConstView cos, ConstView sin, std::int64_t tokens, int heads, int head_dim) override;
  void attention_forward(const AttentionShape& shape, ConstView q, ConstView k, ConstView v, View out,
                         View lse) override;
  void attention_backward(const AttentionShape& shape, ConstView q, ConstView k, ConstView v, ConstView out,
                          ConstView lse, ConstView dout, View dq, View dk, View dv) override;
  void swiglu_forward(ConstView gate, ConstView up, View h, std::int64_t n) override;
  void swiglu_backward(ConstView dh, ConstView gate, ConstView up, View dgate, View dup, std::int64_t n) override;
  void embedding_forward(ConstView ids, ConstView table, View out, std::int64_t tokens, std::int64_t dim) override;
  void embedding_backward(ConstView ids, ConstView dout, View dtable, std::int64_t tokens, std::int64_t dim) override;
  void cross_entropy(ConstView logits, ConstView targets, ConstView weights, std::int64_t rows, std::int64_t vocab,
                     View dlogits, View nll, LossSums& sums) override;

 private:
  std::unique_ptr<DeviceMemory> memory_;
};

}  // namespace odc::backend
