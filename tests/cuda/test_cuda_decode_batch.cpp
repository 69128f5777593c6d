// Batched decoding on the GPU (GPU only: the runner skips without a device):
// CudaBackend::attention_decode_batch, one launch for every sequence over a table of its caches,
//   - against the same backend's per-sequence path (set_per_sequence_decode: two copies and one
//     attention_cached launch per sequence): bitwise the same outputs and caches, and the same
//     bits again on a second run;
//   - against CpuBackend(1, bf16)'s attention_decode_batch on the same bf16 values: the caches
//     exactly (the new rows are copies), the outputs within 1e-2 normwise (test_cuda_backend.cpp's
//     per-op bound: fp32 sums in another order, one bf16 rounding of the output);
// over 64 sequences with ragged cached lengths (0, 1, across the 128-thread stride, up to 2047),
// the LLaMA-3.2-1B heads (32/8 of 64) and Qwen2-1.5B's (12/2 of 128); and forward_cached_batch
// of the tiny model: the same logits bit for bit through either path at every step.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backend_pair.h"
#include "cuda_model_support.h"
#include "odc/backend/cpu_backend.h"
#include "odc/backend/cuda_backend.h"
#include "odc/model/kv_cache.h"
#include "odc/model/llama_model.h"
#include "support/resident_weights.h"

using namespace odc;
using backend::View;
using test::cuda::bf16_values;
using test::cuda::Pair;

namespace {

double normwise(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::isfinite(num) ? std::sqrt(num / den) : INFINITY;
}

struct HeadShape {
  int heads, kv_heads, head_dim;
};

}  // namespace

TEST_CASE("CudaBackend attention_decode_batch: one launch, bitwise the per-sequence launches, near the CPU",
          "[cuda][backend][decode]") {
  backend::CpuBackend cb(1, DType::bf16);
  backend::CudaBackend gb(0);
  std::mt19937 rng(17);
  std::vector<std::int64_t> past;
  for (int i = 0; i < 64; ++i) past.push_back(i < 4 ? i : (i * 977) % 2048);  // 0, 1, 2, 3, then ragged up to 2047
  for (const HeadShape s : {HeadShape{32, 8, 64}, HeadShape{12, 2, 128}}) {
    CAPTURE(s.heads, s.kv_heads, s.head_dim);
    const std::int64_t kv = std::int64_t{s.kv_heads} * s.head_dim, qd = std::int64_t{s.heads} * s.head_dim;
    const auto n = static_cast<std::int64_t>(past.size());
    Pair q(cb, gb, bf16_values(static_cast<std::size_t>(n * qd), rng), DType::bf16);
    Pair k_new(cb, gb, bf16_values(static_cast<std::size_t>(n * kv), rng), DType::bf16);
    Pair v_new(cb, gb, bf16_values(static_cast<std::size_t>(n * kv), rng), DType::bf16);
    // Per sequence: its caches on both sides, and a second GPU copy for the per-sequence path.
    std::vector<std::unique_ptr<Pair>> k, v, k2, v2;
    std::vector<View> kc, vc, kg, vg, kg2, vg2;
    for (const std::int64_t p : past) {
      const auto values = static_cast<std::size_t>((p + 1) * kv);
      auto keys = bf16_values(values, rng), vals = bf16_values(values, rng);
      k.push_back(std::make_unique<Pair>(cb, gb, keys, DType::bf16));
      v.push_back(std::make_unique<Pair>(cb, gb, vals, DType::bf16));
      k2.push_back(std::make_unique<Pair>(cb, gb, keys, DType::bf16));
      v2.push_back(std::make_unique<Pair>(cb, gb, vals, DType::bf16));
      kc.push_back(k.back()->c), vc.push_back(v.back()->c), kg.push_back(k.back()->g), vg.push_back(v.back()->g);
      kg2.push_back(k2.back()->g), vg2.push_back(v2.back()->g);
    }
    Pair out(cb, gb, static_cast<std::size_t>(n * qd), DType::bf16),
        out2(cb, gb, static_cast<std::size_t>(n * qd), DType::bf16);
    const backend::DecodeAttentionShape shape{past, s.heads, s.kv_heads, s.head_dim};
    cb.attention_decode_batch(shape, q.c, k_new.c, v_new.c, kc, vc, out.c);
    gb.attention_decode_batch(shape, q.g, k_new.g, v_new.g, kg, vg, out.g);
    gb.set_per_sequence_decode(true);
    gb.attention_decode_batch(shape, q.g, k_new.g, v_new.g, kg2, vg2, out2.g);
    gb.set_per_sequence_decode(false);
    const auto batched = out.gpu_values(gb), looped = out2.gpu_values(gb);
    CHECK(std::memcmp(batched.data(), looped.data(), batched.size() * sizeof(float)) == 0);
    for (std::size_t i = 0; i < past.size(); ++i) {
      INFO("sequence " << i << " after " << past[i] << " rows");
      CHECK(k[i]->gpu_values(gb) == k[i]->cpu_values());
      CHECK(v[i]->gpu_values(gb) == v[i]->cpu_values());
      CHECK(k2[i]->gpu_values(gb) == k[i]->cpu_values());
    }
    const double e = normwise(batched, out.cpu_values());
    std::printf("[cuda-decode] heads %d/%d x %d: %zu sequences, out normwise vs cpu-bf16 %.3e (bound 1e-2)\n", s.heads,
                s.kv_heads, s.head_dim, past.size(), e);
    CHECK(e <= 1e-2);
    // Again on the appended caches (their new rows rewritten with the same values): the same bits.
    gb.attention_decode_batch(shape, q.g, k_new.g, v_new.g, kg, vg, out.g);
    const auto again = out.gpu_values(gb);
    CHECK(std::memcmp(again.data(), batched.data(), batched.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("CudaBackend forward_cached_batch: the batched decode gives the per-sequence path's logits bit for bit",
          "[cuda][backend][decode]") {
  const auto config = test::cuda::gpu_tiny_model();
  model::LlamaModel m(config, std::make_unique<backend::CudaBackend>(0));
  bench::ResidentWeights weights(m.backend(), m.units(), config, 5);
  const std::vector<int> prompts{7, 0, 1, 90, 33, 2, 150, 12};
  std::vector<std::vector<float>> runs[2];
  for (const bool per_sequence : {false, true}) {
    m.backend().set_per_sequence_decode(per_sequence);
    std::vector<model::KvCache> caches;
    std::vector<model::KvCache*> pointers;
    std::vector<float> logits;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      caches.emplace_back(m.backend(), config, 200);
      std::vector<std::int32_t> prompt;
      for (int t = 0; t < prompts[i]; ++t)
        prompt.push_back(static_cast<std::int32_t>((t * 13 + 5 * i + 2) % config.vocab_size));
      if (!prompt.empty()) m.forward_cached(prompt, caches.back(), weights, logits);
    }
    for (auto& c : caches) pointers.push_back(&c);
    for (int step = 0; step < 8; ++step) {
      std::vector<std::int32_t> next;
      for (std::size_t i = 0; i < prompts.size(); ++i)
        next.push_back(static_cast<std::int32_t>((step * 41 + 3 * i) % config.vocab_size));
      m.forward_cached_batch(next, pointers, weights, logits);
      runs[per_sequence ? 1 : 0].push_back(logits);
    }
  }
  m.backend().set_per_sequence_decode(false);
  for (std::size_t step = 0; step < runs[0].size(); ++step) {
    INFO("step " << step);
    CHECK(std::memcmp(runs[0][step].data(), runs[1][step].data(), runs[0][step].size() * sizeof(float)) == 0);
  }
}
