#pragma once
// Shared by the CUDA tests (tests/cuda/*.cpp): bf16 random inputs that the CPU reference sees
// exactly, host<->device buffers, and the two parity checks with their stated tolerances.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "odc/core/dtype.h"
#include "odc/kernels/cuda_device.h"

namespace odc::test::cuda {

namespace cu = odc::kernels::cuda;

using Bits = std::vector<std::uint16_t>;

// Random normal values already rounded to bf16, as float (the CPU input) and as bits (the GPU's).
// A packed attention microbatch of the given sequence lengths: its bounds and the element counts
// of q-like ([tokens, n_heads * head_dim]), k/v-like and lse ([n_heads, tokens]) tensors.
struct PackedAttention {
  std::vector<std::int32_t> cu_seqlens;
  std::int64_t tokens = 0;
  int num_seqs = 0;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  std::size_t nq = 0, nkv = 0, nlse = 0;
  // Key segments (empty: the keys are the query rows); nkv counts key_tokens rows then.
  std::vector<std::int32_t> cu_seqlens_k;
  std::int64_t key_tokens = 0;

  // The CPU kernels' and the CUDA kernels' shape of it (they point into cu_seqlens).
  template <typename Shape>
  Shape shape() const {
    Shape s;
    s.cu_seqlens = cu_seqlens.data();
    s.num_seqs = num_seqs;
    s.tokens = tokens;
    s.n_heads = n_heads;
    s.n_kv_heads = n_kv_heads;
    s.head_dim = head_dim;
    if (!cu_seqlens_k.empty()) {
      s.cu_seqlens_k = cu_seqlens_k.data();
      s.key_tokens = key_tokens;
    }
    return s;
  }
};
inline PackedAttention packed_attention(const std::vector<std::int32_t>& seqlens, int n_heads, int n_kv_heads,
                                        int head_dim, const std::vector<std::int32_t>& key_lens = {}) {
  PackedAttention p;
  p.cu_seqlens = {0};
  for (std::int32_t len : seqlens) p.cu_seqlens.push_back(p.cu_seqlens.back() + len);
  p.tokens = p.cu_seqlens.back();
  p.num_seqs = static_cast<int>(seqlens.size());
  p.n_heads = n_heads;
  p.n_kv_heads = n_kv_heads;
  p.head_dim = head_dim;
  p.nq = static_cast<std::size_t>(p.tokens) * n_heads * head_dim;
  p.nkv = static_cast<std::size_t>(p.tokens) * n_kv_heads * head_dim;
  if (!key_lens.empty()) {
    p.cu_seqlens_k = {0};
    for (std::int32_t len : key_lens) p.cu_seqlens_k.push_back(p.cu_seqlens_k.back() + len);
    p.key_tokens = p.cu_seqlens_k.back();
    p.nkv = static_cast<std::size_t>(p.key_tokens) * n_kv_heads * head_dim;
  }
  p.nlse = static_cast<std::size_t>(p.tokens) * n_heads;
  return p;
}

struct Bf16Data {
  std::vector<float> f;
  Bits bits;
};

inline Bf16Data random_bf16(std::size_t n, std::mt19937& rng, float scale = 1.0f, float offset = 0.0f) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Bf16Data out;
  out.f.resize(n);
  out.bits.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    out.bits[i] = odc::f32_to_bf16(offset + scale * dist(rng));
    out.f[i] = odc::bf16_to_f32(out.bits[i]);
  }
  return out;
}

inline std::vector<float> random_f32(std::size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> out(n);
  for (auto& v : out) v = dist(rng);
  return out;
}

inline std::vector<float> to_f32(const Bits& bits) {
  std::vector<float> out(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) out[i] = odc::bf16_to_f32(bits[i]);
  return out;
}

// A device buffer filled from a host vector.
template <typename T>
cu::DeviceBuffer to_device(cu::DeviceAllocator& alloc, const std::vector<T>& host) {
  cu::DeviceBuffer buf(alloc, host.size() * sizeof(T));
  cu::upload(buf.get(), host);
  return buf;
}

template <typename T>
std::vector<T> from_device(const cu::DeviceBuffer& buf, std::size_t count) {
  cu::device_synchronize();
  return cu::download<T>(buf.get(), count);
}

// Forward parity: |gpu - ref| <= rel * |ref| + atol_frac * max|ref| elementwise.
inline void check_close(const char* what, const std::vector<float>& gpu, const std::vector<float>& ref,
                 double rel = 1e-2, double atol_frac = 1e-4) {
  REQUIRE(gpu.size() == ref.size());
  double ref_max = 0.0;
  for (float v : ref) ref_max = std::max(ref_max, double(std::fabs(v)));
  const double atol = atol_frac * ref_max;
  double max_err = 0.0;
  std::size_t bad = 0, first_bad = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(double(gpu[i]) - double(ref[i]));
    max_err = std::max(max_err, err);
    if (!(err <= rel * std::fabs(double(ref[i])) + atol)) {
      if (bad++ == 0) first_bad = i;
    }
  }
  std::printf("[cuda] %-34s n=%zu max_abs_err=%.3e (ref max %.3e) mismatches=%zu\n", what,
              ref.size(), max_err, ref_max, bad);
  INFO(what << ": " << bad << " mismatches, first at " << first_bad << " gpu="
            << (bad ? gpu[first_bad] : 0.0f) << " ref=" << (bad ? ref[first_bad] : 0.0f));
  CHECK(bad == 0);
}

// Gradient parity: cosine similarity >= min_cosine (0.999) AND a normwise relative error
// ||gpu - ref||_2 / ||ref||_2 <= max_rel_norm (1e-2); the max abs error is printed too.
// The cosine alone passes errors up to sqrt(2 (1 - 0.999)) ~ 4.5% of the norm. The default 1e-2
// is what bf16 outputs justify: rounding a result to bf16 costs <= 2^-9 ~ 2e-3 relative per
// element (~1.1e-3 normwise on random data), and the kernels with bf16 intermediates (attention's
// P and dS) add about as much again, so correct kernels sit at 1e-3 .. 4e-3; 1e-2 leaves 2.5x
// headroom. fp32 outputs (parameter-gradient accumulators) pass a tighter bound where stated.
inline void check_grad(const char* what, const std::vector<float>& gpu, const std::vector<float>& ref,
                double min_cosine = 0.999, double max_rel_norm = 1e-2) {
  REQUIRE(gpu.size() == ref.size());
  double dot = 0.0, na = 0.0, nb = 0.0, nd = 0.0, max_err = 0.0;
  bool finite = true;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double a = gpu[i], b = ref[i];
    finite = finite && std::isfinite(a);
    dot += a * b;
    na += a * a;
    nb += b * b;
    nd += (a - b) * (a - b);
    max_err = std::max(max_err, std::fabs(a - b));
  }
  const double cosine = (na > 0 && nb > 0) ? dot / std::sqrt(na * nb) : (na == nb ? 1.0 : 0.0);
  const double rel_norm = nb > 0 ? std::sqrt(nd / nb) : (nd == 0 ? 0.0 : 1.0);
  std::printf("[cuda] %-34s n=%zu cosine=%.8f rel_norm=%.3e max_abs_err=%.3e (ref rms %.3e)\n",
              what, ref.size(), cosine, rel_norm, max_err,
              std::sqrt(nb / double(std::max<std::size_t>(1, ref.size()))));
  INFO(what << ": cosine " << cosine << ", normwise relative error " << rel_norm
            << ", max abs error " << max_err);
  CHECK(finite);
  CHECK(cosine >= min_cosine);
  CHECK(rel_norm <= max_rel_norm);
}

// Sum of a fixed-order fp32 reduction against a float64 reference, elementwise:
// |gpu[i] - ref[i]| <= terms[i] * 2^-24 * abs_sum[i], the classic bound for recursive summation
// of `terms` roundings (each rounding of a partial sum s costs <= 2^-24 |s| <= 2^-24 abs_sum).
inline void check_sum_bound(const char* what, const std::vector<float>& gpu,
                            const std::vector<double>& ref, const std::vector<double>& abs_sum,
                            double terms) {
  REQUIRE(gpu.size() == ref.size());
  REQUIRE(abs_sum.size() == ref.size());
  const double u = std::ldexp(1.0, -24);
  std::size_t bad = 0, first_bad = 0;
  double worst = 0.0;  // max of |err| / bound
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(double(gpu[i]) - ref[i]);
    const double bound = terms * u * abs_sum[i];
    worst = std::max(worst, bound > 0 ? err / bound : (err > 0 ? 1e30 : 0.0));
    if (!(err <= bound)) {
      if (bad++ == 0) first_bad = i;
    }
  }
  std::printf("[cuda] %-34s n=%zu worst err/bound=%.3e (terms %.0f) mismatches=%zu\n", what,
              ref.size(), worst, terms, bad);
  INFO(what << ": " << bad << " elements outside the bound, first at " << first_bad);
  CHECK(bad == 0);
}

}  // namespace odc::test::cuda
