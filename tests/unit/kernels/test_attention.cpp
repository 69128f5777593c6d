// Packed varlen causal GQA attention: forward against a naive double loop, backward against
// central finite differences in double, float against double.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "odc/kernels/attention.h"
#include "unit/kernels/kernel_test_support.h"

namespace {

using namespace odc::kernels::cpu;
using namespace odc::kernels::test;

struct Problem {
  std::vector<std::int32_t> cu_seqlens;
  int n_heads = 4;
  int n_kv_heads = 2;
  int head_dim = 8;
  std::vector<double> q, k, v;

  AttentionShape shape() const {
    AttentionShape s;
    s.cu_seqlens = cu_seqlens.data();
    s.num_seqs = int(cu_seqlens.size()) - 1;
    s.tokens = cu_seqlens.back();
    s.n_heads = n_heads;
    s.n_kv_heads = n_kv_heads;
    s.head_dim = head_dim;
    return s;
  }
  std::int64_t tokens() const { return cu_seqlens.back(); }
};

// Sequence lengths include 1 (a lone token attends only to itself) and one longer than the
// kernel's 64-row query block, several times over, so blocks, causal skipping and the diagonal
// mask all get exercised.
Problem make_problem(std::vector<std::int32_t> lengths, int heads, int kv_heads, int head_dim,
                     std::uint32_t seed) {
  Problem p;
  p.n_heads = heads;
  p.n_kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.cu_seqlens.push_back(0);
  for (auto len : lengths) p.cu_seqlens.push_back(p.cu_seqlens.back() + len);
  const auto t = std::size_t(p.tokens());
  // q spread over [-2, 2] so that softmax rows are far from uniform.
  p.q = random_vector(t * heads * head_dim, seed, -2.0, 2.0);
  p.k = random_vector(t * kv_heads * head_dim, seed + 1);
  p.v = random_vector(t * kv_heads * head_dim, seed + 2);
  return p;
}

// Straightforward definition: for each query, softmax over the keys of its own sequence at or
// before it, then the weighted sum of values.
void reference_forward(const Problem& p, std::vector<double>& out, std::vector<double>& lse) {
  const int d = p.head_dim;
  const int group = p.n_heads / p.n_kv_heads;
  const double scale = 1.0 / std::sqrt(double(d));
  out.assign(p.q.size(), 0.0);
  lse.assign(std::size_t(p.n_heads * p.tokens()), 0.0);
  for (std::size_t s = 0; s + 1 < p.cu_seqlens.size(); ++s) {
    const int begin = p.cu_seqlens[s];
    const int end = p.cu_seqlens[s + 1];
    for (int h = 0; h < p.n_heads; ++h) {
      const int g = h / group;
      for (int i = begin; i < end; ++i) {
        std::vector<double> score;
        for (int j = begin; j <= i; ++j) {
          double acc = 0;
          for (int c = 0; c < d; ++c) {
            acc += p.q[(i * p.n_heads + h) * d + c] * p.k[(j * p.n_kv_heads + g) * d + c];
          }
          score.push_back(acc * scale);
        }
        double m = -std::numeric_limits<double>::infinity();
        for (double x : score) m = std::max(m, x);
        double sum = 0;
        for (double x : score) sum += std::exp(x - m);
        lse[h * p.tokens() + i] = m + std::log(sum);
        for (int j = begin; j <= i; ++j) {
          const double w = std::exp(score[j - begin] - m) / sum;
          for (int c = 0; c < d; ++c) {
            out[(i * p.n_heads + h) * d + c] += w * p.v[(j * p.n_kv_heads + g) * d + c];
          }
        }
      }
    }
  }
}

template <typename T>
struct Result {
  std::vector<T> out, lse, dq, dk, dv;
};

// Runs forward and backward of the kernel in precision T with upstream gradient dout.
template <typename T>
Result<T> run_kernel(const Problem& p, const std::vector<double>& dout) {
  Result<T> r;
  const auto q = convert<T>(p.q), k = convert<T>(p.k), v = convert<T>(p.v);
  const auto dout_t = convert<T>(dout);
  r.out.assign(q.size(), T(0));
  r.lse.assign(std::size_t(p.n_heads * p.tokens()), T(0));
  const AttentionShape shape = p.shape();
  attention_forward(shape, q.data(), k.data(), v.data(), r.out.data(), r.lse.data());
  // Output buffers start as NaN: the kernel must overwrite them, not accumulate into them.
  const T nan = std::numeric_limits<T>::quiet_NaN();
  r.dq.assign(q.size(), nan);
  r.dk.assign(k.size(), nan);
  r.dv.assign(v.size(), nan);
  attention_backward(shape, q.data(), k.data(), v.data(), r.out.data(), r.lse.data(), dout_t.data(),
                     r.dq.data(), r.dk.data(), r.dv.data());
  return r;
}

double forward_loss(const Problem& p, const std::vector<double>& weights) {
  std::vector<double> out(p.q.size()), lse(std::size_t(p.n_heads * p.tokens()));
  attention_forward(p.shape(), p.q.data(), p.k.data(), p.v.data(), out.data(), lse.data());
  return dot(out, weights);
}

}  // namespace

TEST_CASE("attention forward matches the naive definition (GQA, packed, long sequence)",
          "[kernels][attention]") {
  // head_dim 64 as in real models; 300 tokens span five 64-row blocks.
  const Problem p = make_problem({1, 7, 300, 45}, 4, 2, 64, 11);
  std::vector<double> ref_out, ref_lse;
  reference_forward(p, ref_out, ref_lse);
  const std::vector<double> no_grad(p.q.size(), 0.0);

  const auto d = run_kernel<double>(p, no_grad);
  // Double: only summation order differs from the reference.
  CHECK(relative_error(d.out, ref_out) < 1e-12);
  CHECK(max_abs_diff(d.lse, ref_lse) < 1e-12);

  // Float: inputs rounded to float (relative 6e-8), 64-term dot products, exp with < 2 ulp error
  // and sums over up to 300 keys: tens of float roundoffs in practice (measured ~3 ulp on out,
  // ~6e-7 on lse values up to ~10); the bounds leave a 10x margin.
  const auto f = run_kernel<float>(p, no_grad);
  CHECK(relative_error(f.out, ref_out) < 2e-6);
  CHECK(max_abs_diff(f.lse, ref_lse) < 1e-5);

  // A lone token attends to itself only: its output is its own value row, its lse its own score.
  for (int h = 0; h < 4; ++h) {
    const int g = h / 2;
    for (int c = 0; c < 64; ++c) CHECK(d.out[h * 64 + c] == Approx(p.v[g * 64 + c]).margin(1e-15));
  }
}

TEST_CASE("attention maps query heads to kv heads for MHA, GQA and MQA", "[kernels][attention]") {
  // The kernel stacks the query heads of a kv group; groups of 8 use 32-row blocks, so the
  // 70-token sequence spans three of them.
  for (auto [heads, kv_heads] :
       {std::pair{4, 4}, std::pair{4, 2}, std::pair{4, 1}, std::pair{8, 1}}) {
    CAPTURE(heads, kv_heads);
    const Problem p = make_problem({5, 70, 1}, heads, kv_heads, 16, 40 + heads + kv_heads);
    std::vector<double> ref_out, ref_lse;
    reference_forward(p, ref_out, ref_lse);
    const auto d = run_kernel<double>(p, std::vector<double>(p.q.size(), 0.0));
    CHECK(relative_error(d.out, ref_out) < 1e-12);
    CHECK(max_abs_diff(d.lse, ref_lse) < 1e-12);
  }
}

TEST_CASE("attention backward matches central finite differences in double",
          "[kernels][attention]") {
  // 140 tokens = three 64-row query blocks (the last one partial); lengths 1 and 5 give a lone
  // token and a short sequence.
  Problem p = make_problem({1, 5, 140, 9}, 4, 2, 8, 21);
  const auto weights = random_vector(p.q.size(), 99);  // loss = sum(out * weights)
  const auto analytic = run_kernel<double>(p, weights);

  // Every 11th element of q, k and v (11 is coprime to the row lengths 32 and 16, so every head
  // and channel is hit, across all sequences and blocks): about 900 finite differences.
  // rel error = max |analytic - fd| / max |fd|.
  auto loss = [&] { return forward_loss(p, weights); };
  CHECK(gradient_error(analytic.dq, p.q, strided_indices(p.q.size(), 11), loss) < 1e-6);
  CHECK(gradient_error(analytic.dk, p.k, strided_indices(p.k.size(), 11), loss) < 1e-6);
  CHECK(gradient_error(analytic.dv, p.v, strided_indices(p.v.size(), 11), loss) < 1e-6);
  // The lone first token's query sees a single key: its softmax is constant, so dq vanishes (up
  // to the roundoff of dP - rowsum(dO*O), two dot products of the same terms).
  for (int c = 0; c < 4 * 8; ++c) CHECK(std::fabs(analytic.dq[c]) < 1e-14);
}

TEST_CASE("attention backward with a group of 8 query heads matches finite differences",
          "[kernels][attention]") {
  // 8 query heads on one kv head: 32-row blocks, so 40 tokens span two blocks and dk/dv sum the
  // contributions of all 8 heads.
  Problem p = make_problem({3, 40}, 8, 1, 4, 77);
  const auto weights = random_vector(p.q.size(), 78);
  const auto analytic = run_kernel<double>(p, weights);
  auto loss = [&] { return forward_loss(p, weights); };
  CHECK(gradient_error(analytic.dq, p.q, strided_indices(p.q.size(), 7), loss) < 1e-6);
  CHECK(gradient_error(analytic.dk, p.k, loss) < 1e-6);
  CHECK(gradient_error(analytic.dv, p.v, loss) < 1e-6);
}

TEST_CASE("attention float backward agrees with the double backward", "[kernels][attention]") {
  const Problem p = make_problem({1, 7, 300, 45}, 4, 2, 64, 31);
  const auto dout = random_vector(p.q.size(), 5);
  const auto d = run_kernel<double>(p, dout);
  const auto f = run_kernel<float>(p, dout);
  // Gradients accumulate over up to 300 keys (and 2 query heads for dk/dv) after the softmax
  // recomputation (measured below 7e-7 relative to the gradient scale); 1e-5 leaves margin.
  CHECK(relative_error(f.dq, d.dq) < 1e-5);
  CHECK(relative_error(f.dk, d.dk) < 1e-5);
  CHECK(relative_error(f.dv, d.dv) < 1e-5);
}
