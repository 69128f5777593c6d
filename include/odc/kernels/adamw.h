#pragma once
// AdamW with decoupled weight decay (PyTorch torch.optim.AdamW semantics):
//   p -= lr * weight_decay * p
//   m = b1*m + (1-b1)*g ;  v = b2*v + (1-b2)*g^2          with g = grad * grad_scale
//   p -= lr * (m / (1-b1^step)) / (sqrt(v / (1-b2^step)) + eps)
// step counts from 1. grad_scale carries global-norm clipping.
#include <cstdint>

namespace odc::kernels {

// Shared by the CPU and CUDA kernels.
struct AdamWParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  std::int64_t step = 1;
  double grad_scale = 1.0;
};

}  // namespace odc::kernels

namespace odc::kernels::cpu {

using kernels::AdamWParams;

template <typename T>
void adamw_step(T* param, const T* grad, T* exp_avg, T* exp_avg_sq, std::int64_t n,
                const AdamWParams& params);

// Sum of squares of n elements, accumulated in double (for the global gradient norm).
template <typename T>
double sum_of_squares(const T* x, std::int64_t n);

}  // namespace odc::kernels::cpu
