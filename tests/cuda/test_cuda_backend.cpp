// CudaBackend against CpuBackend (GPU only: the runner skips without a device). Inputs are bf16
// values, so both backends see exactly the same numbers; the CPU computes in fp32, the GPU in bf16
// storage with fp32 accumulation. Tolerance: normwise relative error ||gpu - cpu|| / ||cpu|| <=
// 1e-2 per op (bf16 keeps 8 bits of mantissa, a relative rounding of 2^-9 ~ 2e-3 per stored
// value; an op rounds its output once and its fp32-accumulated internals stay near that, so 1e-2
// leaves ~5x headroom while a wrong index, transpose or missing term gives errors of order 1).
// The whole-model step compounds roundings over layers: loss within 1e-2 relative, gradients per
// unit within 5e-2 normwise. A 3-step training run on the GPU must repeat bit for bit.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <unistd.h>
#include <vector>

#include <catch2/catch.hpp>

#include "backend_pair.h"
#include "cuda_model_support.h"
#include "odc/backend/cpu_backend.h"
#include "odc/backend/cuda_backend.h"
#include "odc/distributed/comm/local_comm.h"
#include "odc/distributed/shard/shard_store.h"
#include "odc/kernels/cuda_device.h"
#include "odc/model/llama_model.h"
#include "odc/train/config/config_schema.h"
#include "odc/train/run/trainer.h"

using namespace odc;
using backend::ConstView;
using backend::View;
namespace cu = odc::kernels::cuda;

namespace {

using test::cuda::bf16_values;
using test::cuda::Pair;

double normwise_error(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  REQUIRE(gpu.size() == cpu.size());
  double diff = 0.0, ref = 0.0;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    REQUIRE(std::isfinite(gpu[i]));
    diff += (double(gpu[i]) - cpu[i]) * (double(gpu[i]) - cpu[i]);
    ref += double(cpu[i]) * cpu[i];
  }
  return ref > 0 ? std::sqrt(diff / ref) : std::sqrt(diff);
}

void check_normwise(const char* what, const std::vector<float>& gpu, const std::vector<float>& cpu, double bound) {
  const double e = normwise_error(gpu, cpu);
  std::printf("[cuda-backend] %-28s n=%zu normwise_rel_err=%.3e (bound %.0e)\n", what, cpu.size(), e, bound);
  INFO(what << ": normwise relative error " << e);
  CHECK(e <= bound);
}

ConstView ids_on(backend::Backend& b, const std::vector<std::int32_t>& host, backend::Buffer& staging) {
  return b.upload(std::span<const std::int32_t>(host), staging);
}

}  // namespace

TEST_CASE("CudaBackend ops agree with CpuBackend (normwise 1e-2)", "[cuda][backend]") {
  backend::CpuBackend cb(1);
  backend::CudaBackend gb(0);
  CHECK(gb.activation_dtype() == DType::bf16);
  CHECK(gb.device().kind == DeviceKind::cuda);
  std::mt19937 rng(5);
  const std::int64_t rows = 77, dim = 128, out = 96;

  SECTION("rmsnorm forward and backward") {
    Pair x(cb, gb, bf16_values(rows * dim, rng), DType::bf16), w(cb, gb, bf16_values(dim, rng, 0.5f), DType::bf16);
    Pair y(cb, gb, std::vector<float>(rows * dim), DType::bf16), rstd(cb, gb, std::vector<float>(rows), DType::f32);
    cb.rmsnorm_forward(x.c, w.c, y.c, rstd.c, rows, dim, 1e-5);
    gb.rmsnorm_forward(x.g, w.g, y.g, rstd.g, rows, dim, 1e-5);
    check_normwise("rmsnorm_forward y", y.gpu_values(gb), y.cpu_values(), 1e-2);
    check_normwise("rmsnorm_forward rstd", rstd.gpu_values(gb), rstd.cpu_values(), 1e-2);
    Pair dy(cb, gb, bf16_values(rows * dim, rng), DType::bf16), dx(cb, gb, std::vector<float>(rows * dim), DType::bf16);
    Pair dw(cb, gb, std::vector<float>(dim), DType::f32);
    cb.rmsnorm_backward(dy.c, x.c, w.c, rstd.c, dx.c, dw.c, rows, dim, false);
    gb.rmsnorm_backward(dy.g, x.g, w.g, rstd.g, dx.g, dw.g, rows, dim, false);
    check_normwise("rmsnorm_backward dx", dx.gpu_values(gb), dx.cpu_values(), 1e-2);
    check_normwise("rmsnorm_backward dweight", dw.gpu_values(gb), dw.cpu_values(), 1e-2);
  }
  SECTION("linear forward, forward_add and backward (fp32 weight gradients)") {
    Pair x(cb, gb, bf16_values(rows * dim, rng), DType::bf16), w(cb, gb, bf16_values(out * dim, rng, 0.1f), DType::bf16);
    Pair bias(cb, gb, bf16_values(out, rng), DType::bf16), y(cb, gb, bf16_values(rows * out, rng), DType::bf16);
    cb.linear_forward(x.c, w.c, bias.c, y.c, rows, dim, out);
    gb.linear_forward(x.g, w.g, bias.g, y.g, rows, dim, out);
    check_normwise("linear_forward", y.gpu_values(gb), y.cpu_values(), 1e-2);
    cb.linear_forward_add(x.c, w.c, y.c, rows, dim, out);
    gb.linear_forward_add(x.g, w.g, y.g, rows, dim, out);
    check_normwise("linear_forward_add", y.gpu_values(gb), y.cpu_values(), 1e-2);
    // The residual in the GEMM's epilogue: the same bits as copying it and adding (beta 1).
    Pair z(cb, gb, std::vector<float>(rows * out), DType::bf16), z_add(cb, gb, std::vector<float>(rows * out), DType::bf16);
    cb.linear_forward_residual(x.c, w.c, y.c, z.c, rows, dim, out);
    gb.linear_forward_residual(x.g, w.g, y.g, z.g, rows, dim, out);
    check_normwise("linear_forward_residual", z.gpu_values(gb), z.cpu_values(), 1e-2);
    gb.copy(y.g, z_add.g);
    gb.linear_forward_add(x.g, w.g, z_add.g, rows, dim, out);
    CHECK(z.gpu_values(gb) == z_add.gpu_values(gb));
    Pair dy(cb, gb, bf16_values(rows * out, rng), DType::bf16), dx(cb, gb, std::vector<float>(rows * dim), DType::bf16);
    Pair dw(cb, gb, bf16_values(out * dim, rng), DType::f32), db(cb, gb, bf16_values(out, rng), DType::f32);
    cb.linear_backward(dy.c, x.c, w.c, dx.c, dw.c, db.c, rows, dim, out, false);
    gb.linear_backward(dy.g, x.g, w.g, dx.g, dw.g, db.g, rows, dim, out, false);
    check_normwise("linear_backward dx", dx.gpu_values(gb), dx.cpu_values(), 1e-2);
    check_normwise("linear_backward dweight (+=)", dw.gpu_values(gb), dw.cpu_values(), 1e-2);
    check_normwise("linear_backward dbias (+=)", db.gpu_values(gb), db.cpu_values(), 1e-2);
  }
  SECTION("rope tables, rope forward/backward, swiglu") {
    const int heads = 3, head_dim = 64;
    std::vector<std::int32_t> positions(rows);
    for (std::int64_t t = 0; t < rows; ++t) positions[static_cast<std::size_t>(t)] = static_cast<std::int32_t>(t % 40);
    std::vector<double> inv_freq(head_dim / 2);
    for (int i = 0; i < head_dim / 2; ++i) inv_freq[static_cast<std::size_t>(i)] = std::pow(10000.0, -2.0 * i / head_dim);
    backend::Buffer pc(cb.memory(), DType::i32), pg(gb.memory(), DType::i32);
    Pair cos(cb, gb, std::vector<float>(rows * head_dim / 2), DType::f32), sin(cb, gb, std::vector<float>(rows * head_dim / 2), DType::f32);
    cb.rope_tables(ids_on(cb, positions, pc), rows, inv_freq, cos.c, sin.c);
    gb.rope_tables(ids_on(gb, positions, pg), rows, inv_freq, cos.g, sin.g);
    check_normwise("rope_tables cos", cos.gpu_values(gb), cos.cpu_values(), 1e-6);  // fp32 of the same double math
    check_normwise("rope_tables sin", sin.gpu_values(gb), sin.cpu_values(), 1e-6);
    Pair x(cb, gb, bf16_values(rows * heads * head_dim, rng), DType::bf16);
    cb.rope_forward(x.c, cos.c, sin.c, rows, heads, head_dim);
    gb.rope_forward(x.g, cos.g, sin.g, rows, heads, head_dim);
    check_normwise("rope_forward", x.gpu_values(gb), x.cpu_values(), 1e-2);
    cb.rope_backward(x.c, cos.c, sin.c, rows, heads, head_dim);
    gb.rope_backward(x.g, cos.g, sin.g, rows, heads, head_dim);
    check_normwise("rope_backward", x.gpu_values(gb), x.cpu_values(), 1e-2);
    // The fused gate/up layout [rows, 2 * out]: each row's gate, then its up.
    const std::int64_t n = rows * out;
    Pair gate_up(cb, gb, bf16_values(2 * n, rng), DType::bf16);
    Pair h(cb, gb, std::vector<float>(n), DType::bf16), dh(cb, gb, bf16_values(n, rng), DType::bf16);
    Pair dgate_up(cb, gb, std::vector<float>(2 * n), DType::bf16);
    cb.swiglu_forward(gate_up.c, h.c, rows, out);
    gb.swiglu_forward(gate_up.g, h.g, rows, out);
    check_normwise("swiglu_forward", h.gpu_values(gb), h.cpu_values(), 1e-2);
    cb.swiglu_backward(dh.c, gate_up.c, dgate_up.c, rows, out);
    gb.swiglu_backward(dh.g, gate_up.g, dgate_up.g, rows, out);
    check_normwise("swiglu_backward dgate_up", dgate_up.gpu_values(gb), dgate_up.cpu_values(), 1e-2);
  }
  SECTION("attention forward and backward over ragged sequences, GQA") {
    const std::vector<std::int32_t> cu_seqlens = {0, 5, 5, 70, 77};  // an empty sequence, tile edges
    const int heads = 4, kv_heads = 2, head_dim = 64;
    backend::Buffer sc(cb.memory(), DType::i32), sg(gb.memory(), DType::i32);
    backend::AttentionShape cs{ids_on(cb, cu_seqlens, sc), cu_seqlens, 4, rows, heads, kv_heads, head_dim};
    backend::AttentionShape gs{ids_on(gb, cu_seqlens, sg), cu_seqlens, 4, rows, heads, kv_heads, head_dim};
    gb.prepare_microbatch(gs);
    const std::int64_t qn = rows * heads * head_dim, kn = rows * kv_heads * head_dim;
    Pair q(cb, gb, bf16_values(qn, rng), DType::bf16), k(cb, gb, bf16_values(kn, rng), DType::bf16);
    Pair v(cb, gb, bf16_values(kn, rng), DType::bf16), o(cb, gb, std::vector<float>(qn), DType::bf16);
    Pair lse(cb, gb, std::vector<float>(rows * heads), DType::f32);
    cb.attention_forward(cs, q.c, k.c, v.c, o.c, lse.c);
    gb.attention_forward(gs, q.g, k.g, v.g, o.g, lse.g);
    check_normwise("attention_forward out", o.gpu_values(gb), o.cpu_values(), 1e-2);
    check_normwise("attention_forward lse", lse.gpu_values(gb), lse.cpu_values(), 1e-2);
    Pair dout(cb, gb, bf16_values(qn, rng), DType::bf16), dq(cb, gb, std::vector<float>(qn), DType::bf16);
    Pair dk(cb, gb, std::vector<float>(kn), DType::bf16), dv(cb, gb, std::vector<float>(kn), DType::bf16);
    cb.attention_backward(cs, q.c, k.c, v.c, o.c, lse.c, dout.c, dq.c, dk.c, dv.c);
    gb.attention_backward(gs, q.g, k.g, v.g, o.g, lse.g, dout.g, dq.g, dk.g, dv.g);
    check_normwise("attention_backward dq", dq.gpu_values(gb), dq.cpu_values(), 1e-2);
    check_normwise("attention_backward dk", dk.gpu_values(gb), dk.cpu_values(), 1e-2);
    check_normwise("attention_backward dv", dv.gpu_values(gb), dv.cpu_values(), 1e-2);
  }
  SECTION("cached attention (decoding): new rows over a KV cache, GQA") {
    const int heads = 4, kv_heads = 2, head_dim = 64;
    const std::int64_t keys = 73;  // 73 cache rows: 70 new ones after 3, 1 after 72, 3 after 70
    const std::int64_t kn = keys * kv_heads * head_dim;
    Pair k(cb, gb, bf16_values(kn, rng), DType::bf16), v(cb, gb, bf16_values(kn, rng), DType::bf16);
    for (const std::int64_t queries : {std::int64_t{70}, std::int64_t{1}, std::int64_t{3}}) {
      const std::int64_t past = keys - queries;
      const std::int64_t qn = queries * heads * head_dim;
      Pair q(cb, gb, bf16_values(qn, rng), DType::bf16), o(cb, gb, std::vector<float>(qn), DType::bf16);
      const backend::CachedAttentionShape shape{queries, past, heads, kv_heads, head_dim};
      cb.attention_cached(shape, q.c, k.c, v.c, o.c);
      gb.attention_cached(shape, q.g, k.g, v.g, o.g);
      check_normwise("attention_cached out", o.gpu_values(gb), o.cpu_values(), 1e-2);
    }
  }
  SECTION("embedding, row gather/scatter, cross-entropy with deferred loss sums") {
    const std::int64_t vocab = 300;
    std::vector<std::int32_t> ids(static_cast<std::size_t>(rows));
    for (std::int64_t t = 0; t < rows; ++t) ids[static_cast<std::size_t>(t)] = static_cast<std::int32_t>((t * 37) % vocab);
    backend::Buffer ic(cb.memory(), DType::i32), ig(gb.memory(), DType::i32);
    const ConstView idc = ids_on(cb, ids, ic), idg = ids_on(gb, ids, ig);
    Pair table(cb, gb, bf16_values(vocab * dim, rng), DType::bf16), x(cb, gb, std::vector<float>(rows * dim), DType::bf16);
    cb.embedding_forward(idc, table.c, x.c, rows, dim);
    gb.embedding_forward(idg, table.g, x.g, rows, dim);
    CHECK(x.gpu_values(gb) == x.cpu_values());  // a copy of bf16 rows: exact
    Pair dtable(cb, gb, std::vector<float>(vocab * dim), DType::f32);
    cb.embedding_backward(idc, x.c, dtable.c, rows, dim);
    gb.embedding_backward(idg, x.g, dtable.g, rows, dim);
    check_normwise("embedding_backward", dtable.gpu_values(gb), dtable.cpu_values(), 1e-6);  // fp32 sums of bf16 rows

    const std::vector<std::int32_t> pick = {3, 10, 11, 50, 76};
    backend::Buffer rc(cb.memory(), DType::i32), rg(gb.memory(), DType::i32);
    Pair gathered(cb, gb, std::vector<float>(pick.size() * dim), DType::bf16);
    cb.gather_rows(x.c, ids_on(cb, pick, rc), dim, gathered.c);
    gb.gather_rows(x.g, ids_on(gb, pick, rg), dim, gathered.g);
    CHECK(gathered.gpu_values(gb) == gathered.cpu_values());
    Pair scattered(cb, gb, std::vector<float>(rows * dim), DType::bf16);
    cb.scatter_rows(gathered.c, ids_on(cb, pick, rc), dim, scattered.c);
    gb.scatter_rows(gathered.g, ids_on(gb, pick, rg), dim, scattered.g);
    CHECK(scattered.gpu_values(gb) == scattered.cpu_values());

    std::vector<std::int32_t> targets(static_cast<std::size_t>(rows));
    std::vector<float> weights(static_cast<std::size_t>(rows));
    for (std::int64_t t = 0; t < rows; ++t) {
      targets[static_cast<std::size_t>(t)] = static_cast<std::int32_t>((t * 13) % vocab);
      weights[static_cast<std::size_t>(t)] = t % 4 == 0 ? 0.0f : 1.0f / 64.0f;
    }
    backend::Buffer tc(cb.memory(), DType::i32), tg(gb.memory(), DType::i32), wc(cb.memory(), DType::f32),
        wg(gb.memory(), DType::f32);
    Pair logits(cb, gb, bf16_values(rows * vocab, rng, 2.0f), DType::bf16), nll(cb, gb, std::vector<float>(rows), DType::f32);
    backend::LossSums cpu_sums, gpu_sums;
    // Two chunks, as the head runs them: the GPU sums stay pending until resolve_loss.
    for (std::int64_t r0 : {std::int64_t{0}, std::int64_t{40}}) {
      const std::int64_t r = r0 == 0 ? 40 : rows - 40;
      const auto sub_t = std::vector<std::int32_t>(targets.begin() + r0, targets.begin() + r0 + r);
      const auto sub_w = std::vector<float>(weights.begin() + r0, weights.begin() + r0 + r);
      cb.cross_entropy(logits.c.at(r0 * vocab, r * vocab), ids_on(cb, sub_t, tc), cb.upload(std::span<const float>(sub_w), wc),
                       r, vocab, logits.c.at(r0 * vocab, r * vocab), nll.c.at(r0, r), cpu_sums);
      gb.cross_entropy(logits.g.at(r0 * vocab, r * vocab), ids_on(gb, sub_t, tg), gb.upload(std::span<const float>(sub_w), wg),
                       r, vocab, logits.g.at(r0 * vocab, r * vocab), nll.g.at(r0, r), gpu_sums);
    }
    CHECK(gpu_sums.weighted == 0.0);  // deferred
    gb.resolve_loss(gpu_sums);
    CHECK(gpu_sums.weighted == Approx(cpu_sums.weighted).epsilon(1e-2));
    CHECK(gpu_sums.nll == Approx(cpu_sums.nll).epsilon(1e-2));
    backend::LossSums again;
    gb.resolve_loss(again);  // resolved sums are cleared
    CHECK(again.weighted == 0.0);
    check_normwise("cross_entropy nll", nll.gpu_values(gb), nll.cpu_values(), 1e-2);
    check_normwise("cross_entropy dlogits", logits.gpu_values(gb), logits.cpu_values(), 1e-2);
  }
  SECTION("weights(): one bf16 copy per unit until release; sum_of_squares; adamw_step") {
    Pair unit(cb, gb, bf16_values(1000, rng), DType::f32);
    const float* key = static_cast<const float*>(unit.g.data);
    const ConstView first = gb.weights(key, 1000);
    CHECK(first.dtype == DType::bf16);
    CHECK(gb.weights(key, 1000).data == first.data);  // the same live copy
    std::vector<float> back(1000);
    gb.download(first, back);
    CHECK(back == unit.cpu_values());  // bf16 values: the cast is exact
    gb.release_weights(key);
    gb.release_weights(key);  // unknown now: a no-op
    double reference = 0.0;
    for (float v : unit.cpu_values()) reference += double(v) * v;
    const double sos = gb.sum_of_squares(unit.g);
    CHECK(std::abs(sos - reference) <= 1e-12 * reference);
    CHECK(gb.sum_of_squares(unit.g) == sos);  // fixed order: bit for bit

    Pair g(cb, gb, bf16_values(1000, rng, 0.1f), DType::f32), m(cb, gb, std::vector<float>(1000), DType::f32);
    Pair v(cb, gb, std::vector<float>(1000), DType::f32);
    kernels::AdamWParams p;
    p.lr = 1e-2;
    p.weight_decay = 0.1;
    p.grad_scale = 0.7;
    for (std::int64_t step = 1; step <= 3; ++step) {
      p.step = step;
      const std::vector<backend::AdamWSegment> cs = {{unit.c.at(0, 600), g.c.at(0, 600), m.c.at(0, 600), v.c.at(0, 600), true},
                                                    {unit.c.at(600, 400), g.c.at(600, 400), m.c.at(600, 400), v.c.at(600, 400), false}};
      const std::vector<backend::AdamWSegment> gs = {{unit.g.at(0, 600), g.g.at(0, 600), m.g.at(0, 600), v.g.at(0, 600), true},
                                                    {unit.g.at(600, 400), g.g.at(600, 400), m.g.at(600, 400), v.g.at(600, 400), false}};
      cb.adamw_step(cs, p);
      gb.adamw_step(gs, p);
    }
    // fp32 on both sides; only the order of a few fp32 operations (and sqrt/div rounding) differs.
    check_normwise("adamw_step params", unit.gpu_values(gb), unit.cpu_values(), 1e-6);
    check_normwise("adamw_step exp_avg_sq", v.gpu_values(gb), v.cpu_values(), 1e-6);
  }
}

using test::cuda::gpu_tiny_model;
using test::cuda::gpu_tiny_qwen3_model;
using test::cuda::tiny_batch;

TEST_CASE("a CUDA model microbatch agrees with the CPU model (loss 1e-2, gradients 5e-2 per unit)", "[cuda][backend]") {
  const bool qwen3 = GENERATE(false, true);  // Qwen3: the q/k norms on tokens x heads rows
  INFO("qwen3 " << qwen3);
  const auto config = qwen3 ? gpu_tiny_qwen3_model() : gpu_tiny_model();
  const auto batch = tiny_batch(config);
  model::LlamaModel cpu(config, std::make_unique<backend::CpuBackend>(1));
  model::LlamaModel gpu(config, std::make_unique<backend::CudaBackend>(0));
  const distributed::ShardLayout layout(cpu.units(), 1, 0);
  distributed::ShardStore cpu_store(layout, cpu.units(), config, 3);
  distributed::ShardStore gpu_store(layout, gpu.units(), config, 3, {}, &gpu.backend());
  distributed::LocalComm cpu_comm(cpu_store), gpu_comm(gpu_store);
  cpu_comm.begin_minibatch();
  gpu_comm.begin_minibatch();
  const auto rc = cpu.train_microbatch(batch, cpu_comm, cpu_comm);
  const auto rg = gpu.train_microbatch(batch, gpu_comm, gpu_comm);
  std::printf("[cuda-backend] model%s loss cpu %.6f gpu %.6f\n", qwen3 ? " (qwen3)" : "", rc.weighted_loss,
              rg.weighted_loss);
  CHECK(rg.target_tokens == rc.target_tokens);
  CHECK(rg.weighted_loss == Approx(rc.weighted_loss).epsilon(1e-2));
  std::vector<float> grads(static_cast<std::size_t>(layout.owned_elements()));
  gpu.backend().download(gpu_store.grads_view(), grads);
  for (int u = 0; u < layout.num_units(); ++u) {
    const auto at = static_cast<std::size_t>(gpu_store.offset(u)), n = static_cast<std::size_t>(gpu_store.shard_size(u));
    const std::vector<float> g(grads.begin() + static_cast<std::ptrdiff_t>(at), grads.begin() + static_cast<std::ptrdiff_t>(at + n));
    const std::vector<float> c(cpu_store.grad(u), cpu_store.grad(u) + n);
    check_normwise(cpu.units()[static_cast<std::size_t>(u)].name.c_str(), g, c, 5e-2);
  }
}

TEST_CASE("three GPU training steps repeat bit for bit", "[cuda][train]") {
  const auto dir = std::filesystem::temp_directory_path() / ("odc_cuda_repeat_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream data(dir / "data.jsonl");
    for (int s = 0; s < 16; ++s) {
      data << "{\"input_ids\": [";
      for (int i = 0; i < 20 + 9 * s; ++i) data << (i ? ", " : "") << (i * 17 + s * 5) % 256;
      data << "]}\n";
    }
  }
  auto run = [&] {
    Config config(train::trainer_tunables());
    config.apply_assignment("data.train=" + (dir / "data.jsonl").string());
    config.apply_assignment("model.config={vocab_size: 256, hidden_size: 128, intermediate_size: 256, "
                            "num_hidden_layers: 2, num_attention_heads: 2, num_key_value_heads: 1}");
    config.apply_assignment("model.device=cuda");
    config.apply_assignment("model.dtype=bfloat16");
    config.apply_assignment("data.minibatch_size=4");
    config.apply_assignment("data.max_tokens_per_microbatch=256");
    config.apply_assignment("train.steps=3");
    config.apply_assignment("train.lr=0.01");
    config.apply_assignment("train.peak_flops=1e12");
    config.validate();
    train::Trainer trainer(config);
    auto results = trainer.run(true);
    trainer.store().pull_to_host();
    const auto masters = trainer.store().host_masters();
    return std::make_pair(results, std::vector<float>(masters.begin(), masters.end()));
  };
  const auto [first, masters_a] = run();
  const auto [second, masters_b] = run();
  REQUIRE(first.size() == 3);
  REQUIRE(second.size() == 3);
  for (std::size_t s = 0; s < 3; ++s) {
    std::printf("[cuda-backend] step %zu loss %.9f grad_norm %.9f\n", s, first[s].loss, first[s].grad_norm);
    CHECK(std::isfinite(first[s].loss));
    CHECK(first[s].loss == second[s].loss);
    CHECK(first[s].grad_norm == second[s].grad_norm);
  }
  CHECK(masters_a == masters_b);
  std::filesystem::remove_all(dir);
}
