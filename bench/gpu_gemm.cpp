// gpu_gemm: throughput of the cuBLASLt linear layer (cuda_gemm.h) and the fused LM head +
// cross-entropy (cuda_cross_entropy.h) on LLaMA-1B shapes, timed with CUDA events.
//
//   gpu_gemm [--tokens N] [--iters N] [--warmup N]
//
// One JSON line per (op, shape): {"bench":"gpu_gemm","op":...,"name":...,"tokens":...,"in":...,
// "out":...,"ms":...,"tflops":...}. FLOPs are the math's: linear forward 2*T*in*out, backward
// 4*T*in*out (dx and dW; no bias), fused LM head + CE 6*T*hidden*vocab (logits, dh, dW; the
// softmax is not counted). bf16 inputs, fp32 accumulation, fp32 dW. Exits 77 without a device, 2 on a usage error.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_main.h"
#include "gpu_timing.h"
#include "odc/core/dtype.h"
#include "odc/core/error.h"
#include "odc/kernels/cuda_cast.h"
#include "odc/kernels/cuda_cross_entropy.h"
#include "odc/kernels/cuda_device.h"
#include "odc/kernels/cuda_gemm.h"

namespace {

namespace cu = odc::kernels::cuda;

struct Options {
  std::int64_t tokens = 4096;
  int iters = 20;
  int warmup = 3;
};

constexpr const char* kUsage = "usage: gpu_gemm [--tokens N] [--iters N] [--warmup N]\n";

Options parse(int argc, char** argv) {
  using odc::Range;
  const odc::cli::Command command{"gpu_gemm", kUsage, {{"--tokens"}, {"--iters"}, {"--warmup"}}};
  const auto args = odc::cli::parse(command, argc, argv);
  Options o;
  o.tokens = args.integer("--tokens", o.tokens, Range::at_least(1).and_at_most(1 << 24));
  o.iters = static_cast<int>(args.integer("--iters", o.iters, Range::at_least(1).and_at_most(1 << 20)));
  o.warmup = static_cast<int>(args.integer("--warmup", o.warmup, Range::at_least(0).and_at_most(1 << 20)));
  return o;
}

// A device buffer of `count` random bf16 values (normal, std `scale`): a 1M-value host pattern
// tiled over the buffer (the GEMM speed does not depend on the values, only on them being
// non-trivial).
cu::DeviceBuffer random_bf16(cu::DeviceAllocator& alloc, std::int64_t count, float scale,
                             std::mt19937& rng) {
  const std::int64_t pattern_size = std::min<std::int64_t>(count, std::int64_t(1) << 20);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<std::uint16_t> pattern(static_cast<std::size_t>(pattern_size));
  for (auto& v : pattern) v = odc::f32_to_bf16(dist(rng));
  cu::DeviceBuffer buf(alloc, static_cast<std::size_t>(count) * 2);
  for (std::int64_t at = 0; at < count; at += pattern_size) {
    const std::int64_t n = std::min(pattern_size, count - at);
    cu::copy_to_device(buf.as<std::uint16_t>() + at, pattern.data(), static_cast<std::size_t>(n) * 2);
  }
  return buf;
}

cu::DeviceBuffer zeros_f32(cu::DeviceAllocator& alloc, std::int64_t count) {
  cu::DeviceBuffer buf(alloc, static_cast<std::size_t>(count) * 4);
  cu::memset_async(buf.get(), 0, static_cast<std::size_t>(count) * 4, nullptr);
  return buf;
}

template <typename Fn>
double time_ms(const Options& o, const cu::Stream& stream, Fn&& fn) {
  return odc::bench::gpu_time_ms(o.warmup, o.iters, stream, fn);
}

void emit(const char* op, const std::string& name, std::int64_t tokens, std::int64_t in,
          std::int64_t out, double ms, double flops, nlohmann::json extra = {}) {
  nlohmann::json line = {{"bench", "gpu_gemm"}, {"op", op},    {"name", name},
                         {"tokens", tokens},    {"in", in},    {"out", out},
                         {"ms", ms},            {"tflops", flops / (ms * 1e-3) / 1e12}};
  for (auto& [key, value] : extra.items()) line[key] = value;
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
}

void run(const Options& o) {
  cu::DeviceAllocator alloc;
  cu::Blas blas;
  cu::Stream stream;
  std::mt19937 rng(1);
  const std::int64_t T = o.tokens, hidden = 2048;
  struct Linear {
    const char* name;
    std::int64_t in, out;
  };
  // LLaMA-1B: hidden 2048; TinyLlama-1.1B (intermediate 5632, 4 KV heads x 64) and Llama-3.2-1B
  // (intermediate 8192, 8 KV heads x 64).
  const std::vector<Linear> linears = {
      {"attn_q_o", hidden, hidden},   {"attn_kv_256", hidden, 256}, {"attn_kv_512", hidden, 512},
      {"attn_qkv_3072", hidden, 3072}, {"mlp_up_5632", hidden, 5632}, {"mlp_down_5632", 5632, hidden},
      {"mlp_up_8192", hidden, 8192},  {"mlp_down_8192", 8192, hidden}};
  for (const Linear& l : linears) {
    auto x = random_bf16(alloc, T * l.in, 1.0f, rng);
    auto w = random_bf16(alloc, l.out * l.in, 0.02f, rng);
    auto dy = random_bf16(alloc, T * l.out, 1.0f, rng);
    cu::DeviceBuffer y(alloc, static_cast<std::size_t>(T * l.out) * 2);
    cu::DeviceBuffer dx(alloc, static_cast<std::size_t>(T * l.in) * 2);
    auto dw = zeros_f32(alloc, l.out * l.in);
    cu::device_synchronize();  // the setup ran on the legacy stream; the timing runs on `stream`
    const double mac = double(T) * double(l.in) * double(l.out);
    const double fwd = time_ms(o, stream, [&] {
      cu::linear_forward(blas, x.as<std::uint16_t>(), w.as<std::uint16_t>(), nullptr,
                         y.as<std::uint16_t>(), T, l.in, l.out, stream.handle());
    });
    emit("linear_forward", l.name, T, l.in, l.out, fwd, 2 * mac);
    const double bwd = time_ms(o, stream, [&] {
      cu::linear_backward(blas, dy.as<std::uint16_t>(), x.as<std::uint16_t>(),
                          w.as<std::uint16_t>(), dx.as<std::uint16_t>(), dw.as<float>(), nullptr,
                          T, l.in, l.out, false, alloc, stream.handle());
    });
    emit("linear_backward", l.name, T, l.in, l.out, bwd, 4 * mac);
    // The two backward GEMMs apart: dx (bf16 out) and dW (fp32 accumulate).
    const double bwd_dx = time_ms(o, stream, [&] {
      cu::linear_backward(blas, dy.as<std::uint16_t>(), x.as<std::uint16_t>(),
                          w.as<std::uint16_t>(), dx.as<std::uint16_t>(), nullptr, nullptr, T, l.in,
                          l.out, false, alloc, stream.handle());
    });
    emit("linear_backward_dx", l.name, T, l.in, l.out, bwd_dx, 2 * mac);
    const double bwd_dw = time_ms(o, stream, [&] {
      cu::linear_backward(blas, dy.as<std::uint16_t>(), x.as<std::uint16_t>(),
                          w.as<std::uint16_t>(), nullptr, dw.as<float>(), nullptr, T, l.in, l.out,
                          false, alloc, stream.handle());
    });
    emit("linear_backward_dw", l.name, T, l.in, l.out, bwd_dw, 2 * mac);
    stream.synchronize();
  }

  // Fused LM head + cross-entropy (mean loss over all tokens).
  for (std::int64_t vocab : {std::int64_t(32000), std::int64_t(128256)}) {
    auto h = random_bf16(alloc, T * hidden, 1.0f, rng);
    auto w = random_bf16(alloc, vocab * hidden, 0.02f, rng);
    auto dw = zeros_f32(alloc, vocab * hidden);
    cu::DeviceBuffer dh(alloc, static_cast<std::size_t>(T * hidden) * 2);
    std::vector<std::int32_t> targets(static_cast<std::size_t>(T));
    std::uniform_int_distribution<std::int32_t> pick(0, std::int32_t(vocab - 1));
    for (auto& t : targets) t = pick(rng);
    cu::DeviceBuffer d_targets(alloc, targets.size() * 4), d_weights(alloc, targets.size() * 4);
    cu::upload(d_targets.get(), targets);
    cu::fill_f32(d_weights.as<float>(), 1.0f / float(T), T, nullptr);
    cu::DeviceBuffer loss(alloc, 8);
    cu::device_synchronize();
    alloc.reset_peak();
    const cu::FusedCrossEntropyOptions options;
    const double ms = time_ms(o, stream, [&] {
      cu::lm_head_cross_entropy_async(blas, alloc, h.as<std::uint16_t>(), w.as<std::uint16_t>(),
                                      d_targets.as<std::int32_t>(), d_weights.as<float>(), T,
                                      hidden, vocab, dh.as<std::uint16_t>(), dw.as<float>(),
                                      loss.as<double>(), nullptr, options, stream.handle());
    });
    const double flops = 6.0 * double(T) * double(hidden) * double(vocab);
    const auto loss_value = cu::download<double>(loss.get(), 1)[0];
    emit("lm_head_cross_entropy", "lm_head_ce_" + std::to_string(vocab), T, hidden, vocab, ms,
         flops,
         {{"chunk_rows", cu::fused_cross_entropy_chunk_rows(T, vocab, options)},
          {"loss_mean", loss_value},
          {"peak_device_bytes", alloc.stats().peak_in_use}});
    stream.synchronize();
  }
}

}  // namespace

int main(int argc, char** argv) {
  return odc::bench::gpu_bench_main("gpu_gemm", [&] { return parse(argc, argv); }, [](const Options& o) { run(o); });
}
