#pragma once
// Weighted softmax cross-entropy over logits rows. Row r contributes
//   weight[r] * (logsumexp(logits[r,:]) - logits[r, target[r]]).
// Rows with weight 0 contribute nothing (their target is not read).
#include <cstdint>

namespace odc::kernels::cpu {

// Returns sum_r weight[r] * nll_r (accumulated in double). If nll != nullptr, nll[r] receives the
// unweighted per-row loss (0 for weight-0 rows). If dlogits != nullptr it receives
// weight[r] * (softmax(logits[r]) - onehot(target[r])); dlogits may alias logits (in place).
template <typename T>
double cross_entropy_forward_backward(const T* logits, const std::int32_t* targets,
                                      const float* weights, std::int64_t rows, std::int64_t vocab,
                                      T* dlogits, T* nll);

}  // namespace odc::kernels::cpu
