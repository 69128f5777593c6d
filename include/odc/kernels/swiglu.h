#pragma once
// SwiGLU activation of the LLaMA MLP: h = silu(gate) * up, silu(g) = g * sigmoid(g).
// (The three projections gate/up/down are linear layers; see matmul.h.)
#include <cstdint>

namespace odc::kernels::cpu {

template <typename T>
void swiglu_forward(const T* gate, const T* up, T* h, std::int64_t n);

// dgate, dup overwritten.
template <typename T>
void swiglu_backward(const T* dh, const T* gate, const T* up, T* dgate, T* dup, std::int64_t n);

}  // namespace odc::kernels::cpu
