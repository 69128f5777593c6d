// attention_cache.cu's batched decode (attention_decode_batch: one launch for every sequence,
// each with its own caches) executed by the emulator, over many sequences with ragged cached
// lengths (0, 1, around the 128-thread stride, and long ones), MHA, GQA and MQA, head_dim 64 and
// 128, under the three thread interleavings:
//   - the append: each cache holds its new key and value row at row `past` afterwards, every
//     earlier row untouched (the caches end at a guard page just after that row, and the row
//     starts as NaN bits: a missing or misplaced append shows as NaN or a fault);
//   - bitwise the per-sequence path (the row written, then attention_cached_forward per sequence:
//     the default Backend::attention_decode_batch's launches);
//   - against the float64 attention of each query row over its keys. Tolerance as
//     test_attention_cache.cpp's: exact bf16 inputs, fp32 scores, softmax and sums, the output
//     rounded to bf16 once (relative 2^-9 per element); 4e-3 normwise leaves room for fp32 sums
//     over up to ~1000 keys. A wrong sequence, kv head or offset gives errors of order 1.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <tuple>
#include <vector>

#include "emu_block.h"
#include "emu_test_support.h"
#include "odc/kernels/cuda_attention_cache.h"
#include "odc/kernels/cuda_device.h"

namespace kc = odc::kernels::cuda;
using namespace odc_emu_test;

namespace {

struct Shape {
  int heads, kv_heads, head_dim;
};

// One sequence's caches: `past` random rows, then the new row's place (NaN bits until appended).
struct Caches {
  std::int64_t past;
  Bf16Data k, v;  // the past rows' values
  std::unique_ptr<GuardedBuffer> k_buf, v_buf;
};

std::vector<double> reference(const Shape& s, const std::vector<Caches>& caches, const Bf16Data& q,
                              const Bf16Data& k_new, const Bf16Data& v_new) {
  const std::size_t d = static_cast<std::size_t>(s.head_dim), kv = static_cast<std::size_t>(s.kv_heads) * d;
  const std::size_t qd = static_cast<std::size_t>(s.heads) * d, group = static_cast<std::size_t>(s.heads / s.kv_heads);
  std::vector<double> out(caches.size() * qd);
  for (std::size_t i = 0; i < caches.size(); ++i) {
    const auto keys = static_cast<std::size_t>(caches[i].past + 1);
    // Key j's element c of kv head g: the cached rows, then the new one.
    const auto key = [&](const Bf16Data& cached, const Bf16Data& fresh, std::size_t j, std::size_t g, std::size_t c) {
      return j + 1 < keys ? cached.values[j * kv + g * d + c] : fresh.values[i * kv + g * d + c];
    };
    for (std::size_t h = 0; h < static_cast<std::size_t>(s.heads); ++h) {
      const std::size_t g = h / group;
      std::vector<double> p(keys);
      double top = -INFINITY;
      for (std::size_t j = 0; j < keys; ++j) {
        double dot = 0.0;
        for (std::size_t c = 0; c < d; ++c) dot += q.values[i * qd + h * d + c] * key(caches[i].k, k_new, j, g, c);
        p[j] = dot / std::sqrt(static_cast<double>(d));
        top = std::max(top, p[j]);
      }
      double sum = 0.0;
      for (auto& x : p) sum += (x = std::exp(x - top));
      for (std::size_t c = 0; c < d; ++c) {
        double acc = 0.0;
        for (std::size_t j = 0; j < keys; ++j) acc += p[j] * key(caches[i].v, v_new, j, g, c);
        out[i * qd + h * d + c] = acc / sum;
      }
    }
  }
  return out;
}

void check_case(const Shape& s, const std::vector<std::int64_t>& pasts, std::uint32_t seed) {
  const auto n = static_cast<std::int64_t>(pasts.size());
  const std::size_t kv = static_cast<std::size_t>(s.kv_heads * s.head_dim),
                    qd = static_cast<std::size_t>(s.heads * s.head_dim);
  const Bf16Data q = random_bf16(static_cast<std::size_t>(n) * qd, 1.0f, seed),
                 k_new = random_bf16(static_cast<std::size_t>(n) * kv, 1.0f, seed + 1),
                 v_new = random_bf16(static_cast<std::size_t>(n) * kv, 1.0f, seed + 2);
  std::vector<Caches> caches;
  std::vector<kc::DecodeBatchEntry> table;
  for (std::size_t i = 0; i < pasts.size(); ++i) {
    const auto rows = static_cast<std::size_t>(pasts[i]);
    Caches c{pasts[i], random_bf16(rows * kv, 1.0f, seed + 10 + 2 * static_cast<std::uint32_t>(i)),
             random_bf16(rows * kv, 1.0f, seed + 11 + 2 * static_cast<std::uint32_t>(i)),
             std::make_unique<GuardedBuffer>((rows + 1) * kv * 2),
             std::make_unique<GuardedBuffer>((rows + 1) * kv * 2)};
    c.k_buf->write(c.k.bits);
    c.v_buf->write(c.v.bits);
    table.push_back({c.k_buf->as<std::uint16_t>(), c.v_buf->as<std::uint16_t>(), pasts[i], 0});
    caches.push_back(std::move(c));
  }
  GuardedBuffer q_buf(q.bits.size() * 2), k_buf(k_new.bits.size() * 2), v_buf(v_new.bits.size() * 2),
      o_buf(q.bits.size() * 2);
  q_buf.write(q.bits);
  k_buf.write(k_new.bits);
  v_buf.write(v_new.bits);
  kc::DeviceAllocator allocator;
  const std::int64_t scratch = kc::decode_batch_scratch(table, s.heads);
  // The emulator's device memory is the host's: the table is read where it lies.
  kc::attention_decode_batch({n, s.heads, s.kv_heads, s.head_dim}, table.data(), scratch, q_buf.as<std::uint16_t>(),
                             k_buf.as<std::uint16_t>(), v_buf.as<std::uint16_t>(), o_buf.as<std::uint16_t>(), allocator,
                             nullptr);
  const std::vector<std::uint16_t> out = o_buf.read<std::uint16_t>(q.bits.size());

  std::vector<std::uint16_t> per_sequence(out.size());
  GuardedBuffer row_out(qd * 2);
  for (std::size_t i = 0; i < caches.size(); ++i) {
    INFO("sequence " << i << " after " << pasts[i] << " rows");
    const auto rows = static_cast<std::size_t>(pasts[i]);
    for (const auto& [buf, cached, fresh] : {std::tuple{caches[i].k_buf.get(), &caches[i].k, &k_new},
                                             std::tuple{caches[i].v_buf.get(), &caches[i].v, &v_new}}) {
      std::vector<std::uint16_t> want = cached->bits;
      want.insert(want.end(), fresh->bits.begin() + static_cast<std::ptrdiff_t>(i * kv),
                  fresh->bits.begin() + static_cast<std::ptrdiff_t>((i + 1) * kv));
      CHECK(buf->read<std::uint16_t>((rows + 1) * kv) == want);
    }
    // The per-sequence launch over the appended caches.
    kc::attention_cached_forward({1, pasts[i], s.heads, s.kv_heads, s.head_dim}, q_buf.as<std::uint16_t>() + i * qd,
                                 caches[i].k_buf->as<std::uint16_t>(), caches[i].v_buf->as<std::uint16_t>(),
                                 row_out.as<std::uint16_t>(), allocator, nullptr);
    const auto row = row_out.read<std::uint16_t>(qd);
    std::copy(row.begin(), row.end(), per_sequence.begin() + static_cast<std::ptrdiff_t>(i * qd));
  }
  CHECK(out == per_sequence);
  const double error = normwise_error(widen(out), reference(s, caches, q, k_new, v_new));
  INFO("normwise error " << error);
  CHECK(error < 4e-3);
}

}  // namespace

TEST_CASE(
    "emu attention_decode_batch: one launch appends and attends for ragged sequences, bitwise the "
    "per-sequence kernel",
    "[emu][attention_cache]") {
  // Ragged: no cache, one row, around the block's 128-thread stride, and long ones; 24 sequences.
  const std::vector<std::int64_t> pasts = {0,   1, 5, 127, 128, 129, 300, 0,   64, 2, 1000, 17,
                                           255, 3, 0, 90,  511, 8,   33,  700, 1,  4, 200,  63};
  std::uint32_t seed = 3;
  for (const Shape s : {Shape{8, 2, 64}, Shape{8, 2, 128}, Shape{4, 4, 64}, Shape{6, 1, 128}}) {
    const auto order = static_cast<odc_emu::Schedule>(seed % 3);
    const odc_emu::UseSchedule use(order);
    INFO("heads " << s.heads << " kv heads " << s.kv_heads << " head_dim " << s.head_dim << " schedule "
                  << static_cast<int>(order));
    check_case(s, pasts, seed);
    seed += 7;
  }
}

TEST_CASE("emu attention_decode_batch: no sequences launch nothing, a bad shape is an error",
          "[emu][attention_cache]") {
  kc::DeviceAllocator allocator;
  CHECK_NOTHROW(
      kc::attention_decode_batch({0, 4, 2, 64}, nullptr, 0, nullptr, nullptr, nullptr, nullptr, allocator, nullptr));
  CHECK_THROWS_WITH(
      kc::attention_decode_batch({1, 4, 3, 64}, nullptr, 0, nullptr, nullptr, nullptr, nullptr, allocator, nullptr),
      Catch::Contains("4 heads, 3 kv heads"));
  std::vector<kc::DecodeBatchEntry> entries(2);
  entries[0].past = 5;
  entries[1].past = 0;
  CHECK(kc::decode_batch_scratch(entries, 4) == 4 * 6 + 4 * 1);
  CHECK(entries[1].scores == 24);
}
