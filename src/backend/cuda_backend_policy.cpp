// CudaBackend: the policy objective's ops (kernels/cuda_policy_loss.h). The coefficients' sums
// stay in a device accumulator across a head's chunks; resolve_policy reads them once.
#include "cuda_backend_impl.h"
#include "odc/kernels/cuda_policy_loss.h"

namespace odc::backend {

namespace cu = kernels::cuda;

namespace {

// A per-row fp32 input of `rows` values (empty and optional: null).
const float* rows_in(ConstView v, std::int64_t rows, const char* what, bool optional) {
  if (optional && v.empty()) return nullptr;
  ODC_CHECK(!v.empty() && v.count >= rows, "policy_coefficients: {} holds {} values for {} rows", what, v.count, rows);
  return f32_in(v, "policy_coefficients");
}

}  // namespace

void CudaBackend::row_entropy(ConstView logits, std::int64_t rows, std::int64_t vocab, View out) {
  ODC_CHECK(out.count >= rows && logits.count >= rows * vocab,
            "row_entropy: {} rows of {} into {} values from a view of {}", rows, vocab, out.count, logits.count);
  cu::row_entropy(bf16_in(logits, "row_entropy"), rows, vocab, f32_out(out, "row_entropy"), impl_->s());
}

void CudaBackend::policy_coefficients(ConstView nll, ConstView old_logp, ConstView advantages, ConstView ref_logp,
                                      ConstView weights, ConstView entropy, std::int64_t rows,
                                      const kernels::PolicyLossParams& params, View coef,
                                      kernels::PolicyLossSums& sums) {
  (void)sums;  // the rows' sums stay on the device until resolve_policy
  ODC_CHECK(coef.count >= rows, "policy_coefficients: {} coefficients for {} rows", coef.count, rows);
  const View partials = impl_->policy_partials.get(cu::policy_coefficients_scratch());
  cu::policy_coefficients(rows_in(nll, rows, "nll", false), rows_in(old_logp, rows, "old_logp", false),
                          rows_in(advantages, rows, "advantages", false), rows_in(ref_logp, rows, "ref_logp", true),
                          rows_in(weights, rows, "weights", false), rows_in(entropy, rows, "entropy", true), rows,
                          params, f32_out(coef, "policy_coefficients"), static_cast<double*>(partials.data),
                          static_cast<double*>(impl_->policy_sums.get(cu::kPolicySumFields).data), impl_->s());
}

void CudaBackend::resolve_policy(kernels::PolicyLossSums& sums) {
  double host[cu::kPolicySumFields] = {};
  const View pending = impl_->policy_sums.get(cu::kPolicySumFields);
  cu::copy_to_host_async(host, pending.data, sizeof(host), impl_->s());
  impl_->stream.synchronize();
  cu::add_policy_sums(host, sums);
  cu::memset_async(pending.data, 0, sizeof(host), impl_->s());  // the empty accumulator
}

}  // namespace odc::backend
