// Attention of new rows over a key/value cache (attention_cache.h) against a naive double loop
// and against the packed attention it replaces during decoding: a prefill is attention_forward of
// the sequence, and decoding it row by row, or in chunks, gives the same rows.
//
// Tolerances: in double the kernel and the references differ only in summation order, so 1e-12
// relative to the output's scale (about 1e-16 per term over at most a few hundred keys) has a
// wide margin; float against double: 1e-5 (fp32 epsilon 6e-8 times the few hundred terms of a
// row, the exp's error, and the normalization).
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "odc/kernels/attention.h"
#include "odc/kernels/attention_cache.h"
#include "unit/kernels/kernel_test_support.h"

namespace {

using namespace odc::kernels::cpu;
using namespace odc::kernels::test;

struct Sequence {
  std::int64_t length = 0;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  std::vector<double> q, k, v;  // [length, heads * d], [length, kv_heads * d] (the full cache)
  std::int64_t ldq() const { return std::int64_t(n_heads) * head_dim; }
  std::int64_t ldkv() const { return std::int64_t(n_kv_heads) * head_dim; }
};

Sequence make_sequence(std::int64_t length, int heads, int kv_heads, int head_dim, std::uint32_t seed) {
  Sequence s{length, heads, kv_heads, head_dim, {}, {}, {}};
  s.q = random_vector(std::size_t(length * s.ldq()), seed, -2.0, 2.0);  // peaked softmax rows
  s.k = random_vector(std::size_t(length * s.ldkv()), seed + 1);
  s.v = random_vector(std::size_t(length * s.ldkv()), seed + 2);
  return s;
}

// Row t attends to keys [0, t]: the definition, per query head.
std::vector<double> reference(const Sequence& s) {
  const int d = s.head_dim, group = s.n_heads / s.n_kv_heads;
  std::vector<double> out(s.q.size(), 0.0);
  for (std::int64_t t = 0; t < s.length; ++t) {
    for (int h = 0; h < s.n_heads; ++h) {
      const int kvh = h / group;
      std::vector<double> p(std::size_t(t + 1));
      double max = -1e300, sum = 0;
      for (std::int64_t j = 0; j <= t; ++j) {
        double dot = 0;
        for (int c = 0; c < d; ++c) dot += s.q[std::size_t(t * s.ldq() + h * d + c)] * s.k[std::size_t(j * s.ldkv() + kvh * d + c)];
        p[std::size_t(j)] = dot / std::sqrt(double(d));
        max = std::max(max, p[std::size_t(j)]);
      }
      for (auto& x : p) sum += (x = std::exp(x - max));
      for (int c = 0; c < d; ++c) {
        double acc = 0;
        for (std::int64_t j = 0; j <= t; ++j) acc += p[std::size_t(j)] * s.v[std::size_t(j * s.ldkv() + kvh * d + c)];
        out[std::size_t(t * s.ldq() + h * d + c)] = acc / sum;
      }
    }
  }
  return out;
}

// The rows of `s` run in chunks of the given sizes, each over the cache of everything before it.
template <typename T>
std::vector<T> run_in_chunks(const Sequence& s, const std::vector<std::int64_t>& chunks) {
  const auto q = convert<T>(s.q), k = convert<T>(s.k), v = convert<T>(s.v);
  std::vector<T> out(q.size(), T(-7));  // every element must be written
  std::int64_t past = 0;
  for (const std::int64_t n : chunks) {
    const CachedAttentionShape shape{n, past, s.n_heads, s.n_kv_heads, s.head_dim};
    attention_cached_forward<T>(shape, q.data() + past * s.ldq(), k.data(), v.data(), out.data() + past * s.ldq());
    past += n;
  }
  REQUIRE(past == s.length);
  return out;
}

}  // namespace

TEST_CASE("cached attention: prefill, row-by-row decoding and chunks match the definition (MHA, GQA, MQA)",
          "[kernels][attention_cache]") {
  // 150 rows: more than one 64-row block in the prefill; group sizes 1, 2, 4 (kv heads 4, 2, 1).
  for (const int kv_heads : {4, 2, 1}) {
    const Sequence s = make_sequence(150, 4, kv_heads, 8, 100u + std::uint32_t(kv_heads));
    const auto want = reference(s);
    INFO("kv_heads " << kv_heads);
    CHECK(relative_error(run_in_chunks<double>(s, {150}), want) < 1e-12);
    CHECK(relative_error(run_in_chunks<double>(s, std::vector<std::int64_t>(150, 1)), want) < 1e-12);
    CHECK(relative_error(run_in_chunks<double>(s, {7, 1, 1, 64, 70, 7}), want) < 1e-12);
    CHECK(relative_error(run_in_chunks<float>(s, {20, 1, 129}), want) < 1e-5);
  }
}

TEST_CASE("cached attention over a prefix equals attention_forward of the sequence (group of 8, head_dim 16)",
          "[kernels][attention_cache]") {
  const Sequence s = make_sequence(80, 8, 1, 16, 7);
  std::vector<std::int32_t> cu = {0, std::int32_t(s.length)};
  const AttentionShape packed{cu.data(), 1, s.length, s.n_heads, s.n_kv_heads, s.head_dim};
  std::vector<double> full(s.q.size()), lse(std::size_t(s.n_heads * s.length));
  attention_forward<double>(packed, s.q.data(), s.k.data(), s.v.data(), full.data(), lse.data());
  CHECK(relative_error(run_in_chunks<double>(s, {33, 1, 46}), full) < 1e-12);
  // Decoding row t sees only the cache's first t + 1 rows: garbage beyond them changes nothing.
  Sequence noisy = s;
  const std::int64_t past = 40;
  std::vector<double> k = s.k, v = s.v;
  for (std::size_t i = std::size_t((past + 1) * s.ldkv()); i < k.size(); ++i) k[i] = v[i] = 1e6;
  std::vector<double> row(std::size_t(s.ldq()));
  attention_cached_forward<double>({1, past, s.n_heads, s.n_kv_heads, s.head_dim}, s.q.data() + past * s.ldq(),
                                   k.data(), v.data(), row.data());
  const std::vector<double> want(full.begin() + past * s.ldq(), full.begin() + (past + 1) * s.ldq());
  CHECK(relative_error(row, want) < 1e-12);
}

TEST_CASE("cached attention with no new rows writes nothing", "[kernels][attention_cache]") {
  const Sequence s = make_sequence(4, 2, 1, 4, 3);
  std::vector<double> out(s.q.size(), 5.0);
  attention_cached_forward<double>({0, 4, 2, 1, 4}, s.q.data(), s.k.data(), s.v.data(), out.data());
  for (const double x : out) CHECK(x == 5.0);
}
