// Attention over key segments (context parallelism) on CpuBackend, fp32 and bf16 modes: a sequence
// cut zig-zag over k members (model::ContextCut), each member attending with its two chunks as
// query segments and the sequence's prefix up to each chunk's end as that segment's keys, must give
// the rows of the unsplit attention; the members' dk/dv, summed back onto the rows they came from,
// the unsplit dk/dv.
//
// Tolerances. fp32: 1e-6 normwise relative (||split - full|| / ||full|| per output). A split row
// sees exactly the keys the full row sees, but the kernel's GEMMs run over other block shapes (the
// chunk's rows instead of the full sequence's 64-row blocks, which also carry masked zeros), so
// the dot products and the PV sums may add in another order, and dk/dv add the members' partial
// sums in another order: a few fp32 roundings (2^-24 each) per element, ~1e-7 normwise.
// bf16 mode: out, lse and dq bitwise: each query row's keys are visited in 64-key tiles from key
// 0 by the same operations, in either case. dk/dv 1e-2 normwise: each member rounds its partial
// sums to bf16 once (2^-9 relative) before they are added, where the unsplit rounds the total once;
// partials of mixed sign can exceed the total a few times, so 2^-9 x a few, with margin.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "odc/backend/cpu_backend.h"
#include "odc/core/dtype.h"
#include "odc/core/error.h"
#include "odc/model/context_split.h"

using namespace odc;
using backend::ConstView;
using backend::CpuBackend;
using backend::View;

namespace {

ConstView cv(const std::vector<float>& v) {
  return {v.data(), DType::f32, Device::cpu(), static_cast<std::int64_t>(v.size())};
}
View mv(std::vector<float>& v) { return {v.data(), DType::f32, Device::cpu(), static_cast<std::int64_t>(v.size())}; }
ConstView iv(const std::vector<std::int32_t>& v) {
  return {v.data(), DType::i32, Device::cpu(), static_cast<std::int64_t>(v.size())};
}

std::vector<float> random_values(std::size_t n, std::uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(dist(rng)));  // representable: both modes see the same inputs
  return v;
}

double normwise(const std::vector<float>& ours, const std::vector<float>& ref) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    diff += (double(ours[i]) - ref[i]) * (double(ours[i]) - ref[i]);
    norm += double(ref[i]) * ref[i];
  }
  return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

struct Heads {
  int n = 4, kv = 1, d = 16;
  std::int64_t ldq() const { return std::int64_t(n) * d; }
  std::int64_t ldkv() const { return std::int64_t(kv) * d; }
};

struct Result {
  std::vector<float> out, lse, dq, dk, dv;  // lse [heads, rows]
};

// Rows [b, e) of a row-major [*, ld] matrix appended to `to`.
void append_rows(std::vector<float>& to, const std::vector<float>& from, std::int64_t ld, std::int64_t b, std::int64_t e) {
  to.insert(to.end(), from.begin() + b * ld, from.begin() + e * ld);
}

struct Split {
  double out = 0, lse = 0, dq = 0, dk = 0, dv = 0;  // normwise relative errors against the unsplit
};

// The whole sequence in one segment, then each member of the cut with key segments.
Split run_split(CpuBackend& be, std::int64_t length, int k, Heads h, std::uint32_t seed) {
  const auto q = random_values(std::size_t(length * h.ldq()), seed, 2.0f);
  const auto kk = random_values(std::size_t(length * h.ldkv()), seed + 1, 2.0f);
  const auto v = random_values(std::size_t(length * h.ldkv()), seed + 2, 1.0f);
  const auto dout = random_values(std::size_t(length * h.ldq()), seed + 3, 1.0f);

  const std::vector<std::int32_t> cu_full = {0, std::int32_t(length)};
  const backend::AttentionShape full_shape{iv(cu_full), cu_full, 1, length, h.n, h.kv, h.d};
  Result full{std::vector<float>(q.size()), std::vector<float>(std::size_t(h.n * length)),
              std::vector<float>(q.size()), std::vector<float>(kk.size()), std::vector<float>(kk.size())};
  be.attention_forward(full_shape, cv(q), cv(kk), cv(v), mv(full.out), mv(full.lse));
  be.attention_backward(full_shape, cv(q), cv(kk), cv(v), cv(full.out), cv(full.lse), cv(dout), mv(full.dq),
                        mv(full.dk), mv(full.dv));

  // The split's rows, gathered back to position order; dk/dv summed onto positions.
  Result split{std::vector<float>(q.size()), std::vector<float>(full.lse.size()), std::vector<float>(q.size()),
               std::vector<float>(kk.size(), 0.0f), std::vector<float>(kk.size(), 0.0f)};
  const model::ContextCut cut{length, k};
  for (int m = 0; m < k; ++m) {
    std::vector<std::int32_t> cu = {0}, cu_k = {0};
    std::vector<float> mq, mk, mv_, mdo;
    for (int c : cut.chunks_of(m)) {
      const std::int64_t b = cut.chunk_begin(c), e = cut.chunk_begin(c + 1);
      cu.push_back(cu.back() + std::int32_t(e - b));
      cu_k.push_back(cu_k.back() + std::int32_t(e));  // the keys of positions [0, e)
      append_rows(mq, q, h.ldq(), b, e);
      append_rows(mdo, dout, h.ldq(), b, e);
      append_rows(mk, kk, h.ldkv(), 0, e);
      append_rows(mv_, v, h.ldkv(), 0, e);
    }
    const std::int64_t rows = cu.back(), keys = cu_k.back();
    backend::AttentionShape shape{iv(cu), cu, 2, rows, h.n, h.kv, h.d};
    shape.cu_seqlens_k = iv(cu_k);
    shape.host_cu_seqlens_k = cu_k;
    shape.key_tokens = keys;
    std::vector<float> out(mq.size()), lse(std::size_t(h.n * rows)), dq(mq.size()), dk(mk.size()), dv(mk.size());
    be.attention_forward(shape, cv(mq), cv(mk), cv(mv_), mv(out), mv(lse));
    be.attention_backward(shape, cv(mq), cv(mk), cv(mv_), cv(out), cv(lse), cv(mdo), mv(dq), mv(dk), mv(dv));
    std::int64_t row = 0, key = 0;
    for (int c : cut.chunks_of(m)) {
      const std::int64_t b = cut.chunk_begin(c), e = cut.chunk_begin(c + 1);
      for (std::int64_t i = 0; i < e - b; ++i, ++row) {
        for (std::int64_t x = 0; x < h.ldq(); ++x) {
          split.out[std::size_t((b + i) * h.ldq() + x)] = out[std::size_t(row * h.ldq() + x)];
          split.dq[std::size_t((b + i) * h.ldq() + x)] = dq[std::size_t(row * h.ldq() + x)];
        }
        for (int hh = 0; hh < h.n; ++hh) {
          split.lse[std::size_t(hh * length + b + i)] = lse[std::size_t(hh * rows + row)];
        }
      }
      for (std::int64_t j = 0; j < e; ++j, ++key) {
        for (std::int64_t x = 0; x < h.ldkv(); ++x) {
          split.dk[std::size_t(j * h.ldkv() + x)] += dk[std::size_t(key * h.ldkv() + x)];
          split.dv[std::size_t(j * h.ldkv() + x)] += dv[std::size_t(key * h.ldkv() + x)];
        }
      }
    }
  }
  return {normwise(split.out, full.out), normwise(split.lse, full.lse), normwise(split.dq, full.dq),
          normwise(split.dk, full.dk), normwise(split.dv, full.dv)};
}

}  // namespace

TEST_CASE("key segments fp32: a zig-zag split over 2 and 3 members reproduces the unsplit attention",
          "[backend][attention][key_segments]") {
  CpuBackend be(1);
  // L = 37 (odd: chunks of unequal length), GQA 4/1 (fewer kv heads than members) and MHA 2/2;
  // L = 5 over 3 members: 6 chunks of 1, 1, 1, 1, 1, 0 (member 0's second chunk is empty); L =
  // 150 over 2: chunks longer than the kernel's 64-row blocks.
  struct Case {
    std::int64_t length;
    int k;
    Heads heads;
  };
  for (const Case& c : {Case{37, 2, {4, 1, 16}}, Case{37, 3, {4, 1, 16}}, Case{37, 2, {2, 2, 8}},
                        Case{37, 3, {2, 2, 8}}, Case{5, 3, {4, 1, 16}}, Case{150, 2, {4, 2, 16}}}) {
    const Split e = run_split(be, c.length, c.k, c.heads, 100 + std::uint32_t(c.length + c.k));
    INFO("L " << c.length << " k " << c.k << " heads " << c.heads.n << "/" << c.heads.kv << ": out " << e.out
              << " lse " << e.lse << " dq " << e.dq << " dk " << e.dk << " dv " << e.dv);
    CHECK(e.out <= 1e-6);
    CHECK(e.lse <= 1e-6);
    CHECK(e.dq <= 1e-6);
    CHECK(e.dk <= 1e-6);
    CHECK(e.dv <= 1e-6);
  }
}

TEST_CASE("key segments bf16 mode: forward and dq bitwise, dk/dv at bf16 rounding",
          "[backend][attention][key_segments][bf16]") {
  CpuBackend be(1, DType::bf16);
  for (const auto& [length, k] : {std::pair<std::int64_t, int>{37, 2}, {37, 3}, {5, 3}, {150, 2}}) {
    const Split e = run_split(be, length, k, {4, 1, 16}, 200 + std::uint32_t(length + k));
    INFO("L " << length << " k " << k << ": out " << e.out << " lse " << e.lse << " dq " << e.dq << " dk " << e.dk
              << " dv " << e.dv);
    CHECK(e.out == 0.0);
    CHECK(e.lse == 0.0);
    CHECK(e.dq == 0.0);
    CHECK(e.dk <= 1e-2);
    CHECK(e.dv <= 1e-2);
  }
}

TEST_CASE("key segments: identity bounds are the plain attention bit for bit and bad bounds are odc::Error",
          "[backend][attention][key_segments]") {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    CpuBackend be(1, dtype);
    const Heads h{4, 2, 8};
    const std::vector<std::int32_t> cu = {0, 9, 9, 80};
    const std::int64_t T = 80;
    const auto q = random_values(std::size_t(T * h.ldq()), 5, 2.0f), k = random_values(std::size_t(T * h.ldkv()), 6, 2.0f);
    const auto v = random_values(std::size_t(T * h.ldkv()), 7, 1.0f), dout = random_values(std::size_t(T * h.ldq()), 8, 1.0f);
    const backend::AttentionShape plain{iv(cu), cu, 3, T, h.n, h.kv, h.d};
    backend::AttentionShape keyed = plain;
    keyed.cu_seqlens_k = iv(cu);
    keyed.host_cu_seqlens_k = cu;
    keyed.key_tokens = T;
    std::vector<Result> r(2);
    for (int i = 0; i < 2; ++i) {
      const backend::AttentionShape& s = i == 0 ? plain : keyed;
      r[i] = {std::vector<float>(q.size()), std::vector<float>(std::size_t(h.n * T)), std::vector<float>(q.size()),
              std::vector<float>(k.size()), std::vector<float>(k.size())};
      be.attention_forward(s, cv(q), cv(k), cv(v), mv(r[i].out), mv(r[i].lse));
      be.attention_backward(s, cv(q), cv(k), cv(v), cv(r[i].out), cv(r[i].lse), cv(dout), mv(r[i].dq), mv(r[i].dk),
                            mv(r[i].dv));
    }
    CHECK(r[0].out == r[1].out);
    CHECK(r[0].lse == r[1].lse);
    CHECK(r[0].dq == r[1].dq);
    CHECK(r[0].dk == r[1].dk);
    CHECK(r[0].dv == r[1].dv);

    // Segment 2 has 71 query rows; 70 keys are one short of its own positions.
    const std::vector<std::int32_t> short_k = {0, 9, 9, 79};
    keyed.cu_seqlens_k = iv(short_k);
    keyed.host_cu_seqlens_k = short_k;
    keyed.key_tokens = 79;
    std::vector<float> out(q.size()), lse(std::size_t(h.n * T));
    CHECK_THROWS_WITH(be.attention_forward(keyed, cv(q), cv(k), cv(v), mv(out), mv(lse)),
                      Catch::Contains("segment 2 has 71 query rows but only 70 key rows"));
    // key_tokens not the end of the key bounds.
    keyed.cu_seqlens_k = iv(cu);
    keyed.key_tokens = 81;
    CHECK_THROWS_WITH(be.attention_forward(keyed, cv(q), cv(k), cv(v), mv(out), mv(lse)),
                      Catch::Contains("cu_seqlens_k ends at 80 but key_tokens = 81"));
  }
}

TEST_CASE("key segments: a query segment without rows has any keys, and their dk/dv are zero",
          "[backend][attention][key_segments]") {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    CpuBackend be(1, dtype);
    const Heads h{2, 1, 8};
    const std::vector<std::int32_t> cu = {0, 0, 3}, cu_k = {0, 6, 10};  // 6 keys nobody attends; 3 queries on 4 keys
    const auto q = random_values(std::size_t(3 * h.ldq()), 9, 1.0f), dout = random_values(std::size_t(3 * h.ldq()), 10, 1.0f);
    const auto k = random_values(std::size_t(10 * h.ldkv()), 11, 1.0f), v = random_values(std::size_t(10 * h.ldkv()), 12, 1.0f);
    backend::AttentionShape s{iv(cu), cu, 2, 3, h.n, h.kv, h.d};
    s.cu_seqlens_k = iv(cu_k);
    s.host_cu_seqlens_k = cu_k;
    s.key_tokens = 10;
    std::vector<float> out(q.size()), lse(std::size_t(h.n * 3)), dq(q.size());
    std::vector<float> dk(k.size(), 1.0f), dv(k.size(), 1.0f);  // overwritten
    be.attention_forward(s, cv(q), cv(k), cv(v), mv(out), mv(lse));
    be.attention_backward(s, cv(q), cv(k), cv(v), cv(out), cv(lse), cv(dout), mv(dq), mv(dk), mv(dv));
    for (std::int64_t i = 0; i < 6 * h.ldkv(); ++i) {
      REQUIRE(dk[std::size_t(i)] == 0.0f);
      REQUIRE(dv[std::size_t(i)] == 0.0f);
    }
    // Query row 0 of segment 1 sees keys 6 and 7 (its own position 1 of 4 keys, offset 1).
    double nonzero = 0;
    for (std::int64_t i = 6 * h.ldkv(); i < 10 * h.ldkv(); ++i) nonzero += std::abs(dv[std::size_t(i)]);
    CHECK(nonzero > 0);
  }
}
