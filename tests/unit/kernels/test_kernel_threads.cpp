// The CPU kernels spread their work over the compute threads in pieces that do not depend on the
// thread count, so their results must be bitwise the same with 1 and 2 threads (the attention's
// GEMMs run single-threaded inside each (sequence, kv head) piece). Sizes span many pieces.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "kernel_test_support.h"
#include "odc/kernels/attention.h"
#include "odc/kernels/cross_entropy.h"
#include "odc/kernels/matmul.h"
#include "odc/kernels/rmsnorm.h"
#include "odc/kernels/rope.h"
#include "odc/kernels/swiglu.h"

namespace odc::kernels::cpu {
namespace {

using test::random_vector;

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs `compute` with 1 and then 2 threads and returns both outputs.
std::pair<std::vector<float>, std::vector<float>> with_1_and_2_threads(const std::function<std::vector<float>()>& compute) {
  const int before = num_threads();
  set_num_threads(1);
  std::vector<float> one = compute();
  set_num_threads(2);
  std::vector<float> two = compute();
  set_num_threads(before);
  return {std::move(one), std::move(two)};
}

void append(std::vector<float>& out, const std::vector<float>& part) { out.insert(out.end(), part.begin(), part.end()); }

TEST_CASE("CPU kernels give bitwise the same results with 1 and 2 threads", "[kernels][threads]") {
  SECTION("SwiGLU forward and backward, with a ragged tail") {
    const std::int64_t n = 3 * 16384 + 7;
    const auto g = random_vector<float>(n, 1, -4, 4), u = random_vector<float>(n, 2), dh = random_vector<float>(n, 3);
    auto [one, two] = with_1_and_2_threads([&] {
      std::vector<float> h(n), dg(n), du(n);
      swiglu_forward(g.data(), u.data(), h.data(), n);
      swiglu_backward(dh.data(), g.data(), u.data(), dg.data(), du.data(), n);
      append(h, dg);
      append(h, du);
      return h;
    });
    CHECK(bitwise_equal(one, two));
  }
  SECTION("RMSNorm forward and backward (the weight gradient sums over many row pieces)") {
    const std::int64_t rows = 1000, dim = 96;
    const auto x = random_vector<float>(rows * dim, 4), w = random_vector<float>(dim, 5), dy = random_vector<float>(rows * dim, 6);
    auto [one, two] = with_1_and_2_threads([&] {
      std::vector<float> y(rows * dim), rstd(rows), dx(rows * dim), dw(dim, 0.5f);
      rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), rows, dim, 1e-5);
      rmsnorm_backward(dy.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), rows, dim, false);
      append(y, rstd);
      append(y, dx);
      append(y, dw);
      return y;
    });
    CHECK(bitwise_equal(one, two));
  }
  SECTION("RoPE forward and backward") {
    const std::int64_t tokens = 700;
    const int heads = 4, head_dim = 16;
    const auto x = random_vector<float>(tokens * heads * head_dim, 7);
    const auto c = random_vector<float>(tokens * head_dim / 2, 8), s = random_vector<float>(tokens * head_dim / 2, 9);
    auto [one, two] = with_1_and_2_threads([&] {
      std::vector<float> y = x;
      rope_forward(y.data(), c.data(), s.data(), tokens, heads, head_dim);
      std::vector<float> back = y;
      rope_backward(back.data(), c.data(), s.data(), tokens, heads, head_dim);
      append(y, back);
      return y;
    });
    CHECK(bitwise_equal(one, two));
  }
  SECTION("cross-entropy: per-row gradients and the summed loss") {
    const std::int64_t rows = 333, vocab = 77;
    const auto logits = random_vector<float>(rows * vocab, 10, -3, 3);
    std::vector<std::int32_t> targets(rows);
    std::vector<float> weights(rows);
    for (std::int64_t r = 0; r < rows; ++r) {
      targets[r] = static_cast<std::int32_t>((r * 31) % vocab);
      weights[r] = r % 5 == 0 ? 0.0f : 1.0f / float(rows);
    }
    auto [one, two] = with_1_and_2_threads([&] {
      std::vector<float> d(rows * vocab), nll(rows);
      const double loss = cross_entropy_forward_backward(logits.data(), targets.data(), weights.data(), rows, vocab,
                                                          d.data(), nll.data());
      append(d, nll);
      float parts[2];
      std::memcpy(parts, &loss, sizeof loss);
      d.insert(d.end(), parts, parts + 2);
      return d;
    });
    CHECK(bitwise_equal(one, two));
  }
  SECTION("attention forward and backward over ragged packed sequences with GQA") {
    const std::vector<std::int32_t> cu = {0, 5, 133, 133, 200, 457};
    AttentionShape shape{cu.data(), 5, 457, 8, 2, 16};
    const std::int64_t qn = shape.tokens * shape.n_heads * shape.head_dim;
    const std::int64_t kvn = shape.tokens * shape.n_kv_heads * shape.head_dim;
    const auto q = random_vector<float>(qn, 11), k = random_vector<float>(kvn, 12), v = random_vector<float>(kvn, 13);
    const auto dout = random_vector<float>(qn, 14);
    auto [one, two] = with_1_and_2_threads([&] {
      std::vector<float> out(qn), lse(shape.n_heads * shape.tokens), dq(qn), dk(kvn), dv(kvn);
      attention_forward(shape, q.data(), k.data(), v.data(), out.data(), lse.data());
      attention_backward(shape, q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), dq.data(),
                         dk.data(), dv.data());
      for (const auto* part : {&lse, &dq, &dk, &dv}) append(out, *part);
      return out;
    });
    CHECK(bitwise_equal(one, two));
  }
}

}  // namespace
}  // namespace odc::kernels::cpu
