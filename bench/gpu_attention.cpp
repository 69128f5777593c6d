// GPU attention throughput: forward and forward + backward on packed causal batches of 4096
// tokens (one sequence, 8 x 512, 16 ragged sequences) with 16/16 and 32/8 heads, head_dim 128, of
// the native kernels (cuda::attention_forward, "impl":"odc") and of cuDNN's fused attention
// (cuda::CudnnAttention, "impl":"cudnn", with "vs_odc_fwd" / "vs_odc_fwdbwd": its TFLOP/s over
// the native kernels'). Prints one JSON line per shape and implementation
// (bench/gpu_attention_torch.py prints the same fields for PyTorch's SDPA); where cuDNN cannot
// run (or refuses a shape for its workspace bound), its line carries "error" with the reason. Exits
// 77 when no CUDA device is visible, 2 on a usage error.
//
//   gpu_attention [ITERS] [--impl native,cudnn]
//       ITERS: timed iterations after 3 warm-ups (default 20; the median is reported)
//       --impl: the implementations, comma-separated (default native,cudnn)
//   gpu_attention --runtime-info
//       one JSON line of what cuDNN's attention would run on, and nothing timed: the libcudart the
//       cuDNN frontend is pinned to (CUDNN_FRONTEND_CUDART_LIB_NAME) and why, the CUDA runtime,
//       the cuDNN library loaded (or why none), whether the build has the frontend
//
// FLOPs are causal: forward 4 * sum_i s_i (s_i + 1) / 2 * head_dim * n_heads; the backward is
// counted as 2.5x the forward (the convention of FlashAttention's benchmarks), so fwdbwd = 3.5x.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "gpu_main.h"
#include "odc/core/dtype.h"
#include "odc/core/error.h"
#include "odc/kernels/attention_choice.h"
#include "odc/kernels/cuda_attention.h"
#include "odc/kernels/cuda_cudnn_attention.h"
#include "odc/kernels/cuda_cast.h"
#include "odc/kernels/cuda_device.h"

namespace cu = odc::kernels::cuda;

namespace {

struct BenchShape {
  std::string name;
  std::vector<std::int32_t> seqlens;
  int n_heads;
  int n_kv_heads;
  int head_dim;
};

// Deterministic pseudo-random bf16 values in about [-2, 2).
std::vector<std::uint16_t> random_bits(std::size_t n, std::uint64_t seed) {
  std::vector<std::uint16_t> out(n);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& b : out) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const float u = static_cast<float>(x >> 40) / static_cast<float>(1ull << 24);  // [0, 1)
    b = odc::f32_to_bf16(4.0f * u - 2.0f);
  }
  return out;
}

cu::DeviceBuffer upload_random(cu::DeviceAllocator& alloc, std::size_t n, std::uint64_t seed) {
  cu::DeviceBuffer buf(alloc, n * sizeof(std::uint16_t));
  cu::upload(buf.get(), random_bits(n, seed));
  return buf;
}

template <typename F>
double median_ms(int warmup, int iters, cu::Stream& stream, F&& body) {
  for (int i = 0; i < warmup; ++i) body();
  stream.synchronize();
  std::vector<float> times;
  cu::Event start(true), stop(true);
  for (int i = 0; i < iters; ++i) {
    start.record(stream);
    body();
    stop.record(stream);
    stop.synchronize();
    times.push_back(start.elapsed_ms(stop));
  }
  std::sort(times.begin(), times.end());
  return times.size() % 2 ? times[times.size() / 2]
                          : 0.5 * (times[times.size() / 2 - 1] + times[times.size() / 2]);
}

// Why cuDNN cannot run these heads on device 0 (empty: it can).
std::string cudnn_blocker(int n_heads, int n_kv_heads, int head_dim) {
  return odc::kernels::cudnn_attention_blocker(cu::device_attention_facts(0, n_heads, n_kv_heads, head_dim))
      .value_or("");
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += (c == '\n' || c == '\t') ? ' ' : c;
  }
  return out;
}

// The fields that name a shape (the keys bench/gpu_attention_torch.py prints too).
std::string fmt_head(const BenchShape& b, const cu::CudaAttentionShape& shape, int max_seqlen) {
  char text[256];
  std::snprintf(text, sizeof(text),
                "\"shape\":\"%s\",\"tokens\":%lld,\"num_seqs\":%d,\"max_seqlen\":%d,\"n_heads\":%d,"
                "\"n_kv_heads\":%d,\"head_dim\":%d",
                b.name.c_str(), static_cast<long long>(shape.tokens), shape.num_seqs, max_seqlen, b.n_heads,
                b.n_kv_heads, b.head_dim);
  return text;
}

struct Options {
  int iters = 20;
  bool run_native = true;
  bool run_cudnn = true;
  bool runtime_info = false;
};

constexpr const char* kUsage =
    "usage: gpu_attention [ITERS] [--impl native,cudnn]\n"
    "       gpu_attention --runtime-info\n"
    "  ITERS: timed iterations after 3 warm-ups (default 20; the median is reported)\n"
    "  --impl: the implementations, comma-separated (default native,cudnn)\n"
    "  --runtime-info: one JSON line: the libcudart the cuDNN frontend is pinned to and why, the CUDA\n"
    "                  runtime, the cuDNN loaded; nothing is timed\n";

Options parse(int argc, char** argv) {
  const odc::cli::Command command{
      "gpu_attention", kUsage, {{"--impl"}, {"--runtime-info", odc::cli::Takes::nothing}}, "iteration count", 1};
  const auto args = odc::cli::parse(command, argc, argv);
  Options o;
  o.runtime_info = args.flag("--runtime-info");
  o.iters = static_cast<int>(args.positional_integer(0, o.iters, odc::Range::at_least(1).and_at_most(1 << 20)));
  const auto impls = args.list("--impl", {"native", "cudnn"});
  for (const auto& impl : impls) {
    if (impl != "native" && impl != "odc" && impl != "cudnn") {
      throw args.usage_error("--impl expects a comma-separated list of native, cudnn, got '" + impl + "'");
    }
  }
  auto named = [&](const char* impl) { return std::find(impls.begin(), impls.end(), impl) != impls.end(); };
  o.run_native = named("native") || named("odc");
  o.run_cudnn = named("cudnn");
  return o;
}

// What cuDNN's attention runs on in this process, for the GPU check's log (--runtime-info).
void print_runtime_info() {
  const odc::kernels::CudartChoice& cudart = cu::pin_frontend_cudart();
  std::string cudnn_error;
  const int cudnn = cu::cudnn_runtime_version(&cudnn_error);
  std::printf("{\"runtime_info\":\"gpu_attention\",\"cudnn_frontend_cudart\":\"%s\",\"cudnn_frontend_cudart_why\":\"%s\","
              "\"cudnn_frontend_cudart_from_environment\":%s,\"cuda_runtime_version\":%d,\"cudnn_frontend_built\":%s,"
              "\"cudnn_version\":\"%s\",\"cudnn_load_error\":\"%s\"}\n",
              json_escape(cudart.name).c_str(), json_escape(cudart.why).c_str(),
              cudart.from_environment ? "true" : "false", cu::cuda_runtime_version(), cu::cudnn_frontend_built() ? "true" : "false",
              odc::kernels::cudnn_version_text(cudnn).c_str(), json_escape(cudnn_error).c_str());
}

void run(const Options& o) {
  if (o.runtime_info) {
    print_runtime_info();
    return;
  }
  const int iters = o.iters;
  const bool run_native = o.run_native, run_cudnn = o.run_cudnn;
  // 16 ragged sequences, 4096 tokens in all.
  const std::vector<std::int32_t> ragged = {1024, 700, 512, 400, 300, 256, 200, 180,
                                            150,  100, 90,  70,  50,  30,  20,  14};
  std::vector<BenchShape> shapes;
  for (auto [heads, kv] : {std::pair{16, 16}, std::pair{32, 8}}) {
    shapes.push_back({"1x4096", {4096}, heads, kv, 128});
    shapes.push_back({"8x512", std::vector<std::int32_t>(8, 512), heads, kv, 128});
    shapes.push_back({"ragged16", ragged, heads, kv, 128});
  }

  cu::DeviceAllocator alloc;
  cu::Stream stream;
  cu::CudnnAttention cudnn;
  // Every native shape first, then cuDNN's (whose first call per shape class builds its graphs):
  // a run cut short by a time limit keeps the native results.
  std::vector<std::pair<double, double>> native_ms(shapes.size(), {0.0, 0.0});  // fwd, fwd+bwd
  for (std::size_t index = 0; index < 2 * shapes.size(); ++index) {
    const bool native_pass = index < shapes.size();
    const std::size_t i = index % shapes.size();
    if (native_pass ? !run_native : !run_cudnn) continue;
    const BenchShape& b = shapes[i];
    std::vector<std::int32_t> cu_seqlens{0};
    for (std::int32_t len : b.seqlens) cu_seqlens.push_back(cu_seqlens.back() + len);
    cu::CudaAttentionShape shape;
    shape.cu_seqlens = cu_seqlens.data();
    shape.num_seqs = static_cast<int>(b.seqlens.size());
    shape.tokens = cu_seqlens.back();
    shape.n_heads = b.n_heads;
    shape.n_kv_heads = b.n_kv_heads;
    shape.head_dim = b.head_dim;
    const std::size_t nq = static_cast<std::size_t>(shape.tokens) * b.n_heads * b.head_dim;
    const std::size_t nkv = static_cast<std::size_t>(shape.tokens) * b.n_kv_heads * b.head_dim;

    auto q = upload_random(alloc, nq, 1);
    auto k = upload_random(alloc, nkv, 2);
    auto v = upload_random(alloc, nkv, 3);
    auto dout = upload_random(alloc, nq, 4);
    cu::DeviceBuffer out(alloc, nq * 2, stream), lse(alloc, shape.tokens * b.n_heads * 4, stream);
    cu::DeviceBuffer dq(alloc, nq * 2, stream), dk(alloc, nkv * 2, stream), dv(alloc, nkv * 2, stream);
    cu::device_synchronize();
    const auto* qp = q.as<std::uint16_t>();
    const auto* kp = k.as<std::uint16_t>();
    const auto* vp = v.as<std::uint16_t>();
    const double fwd_flops = cu::attention_forward_flops(shape);
    const double fwdbwd_flops = 3.5 * fwd_flops;
    int max_seqlen = 0;
    for (std::int32_t len : b.seqlens) max_seqlen = std::max(max_seqlen, static_cast<int>(len));
    const std::string head = fmt_head(b, shape, max_seqlen);
    auto report = [&](const char* impl, double fwd_ms, double fwdbwd_ms, const std::string& extra) {
      std::printf("{\"bench\":\"gpu_attention\",\"impl\":\"%s\",%s,\"fwd_ms\":%.4f,\"fwd_tflops\":%.2f,"
                  "\"fwdbwd_ms\":%.4f,\"fwdbwd_tflops\":%.2f%s}\n",
                  impl, head.c_str(), fwd_ms, fwd_flops / (fwd_ms * 1e-3) / 1e12, fwdbwd_ms,
                  fwdbwd_flops / (fwdbwd_ms * 1e-3) / 1e12, extra.c_str());
      std::fflush(stdout);
    };
    if (native_pass) {
      // The tile tables are built once per microbatch in training: one plan, outside the timing.
      const cu::AttentionPlan plan(shape, alloc, stream.handle());
      auto forward = [&] {
        cu::attention_forward(plan, qp, kp, vp, out.as<std::uint16_t>(), lse.as<float>(), stream.handle());
      };
      auto backward = [&] {
        cu::attention_backward(plan, qp, kp, vp, out.as<std::uint16_t>(), lse.as<float>(), dout.as<std::uint16_t>(),
                               dq.as<std::uint16_t>(), dk.as<std::uint16_t>(), dv.as<std::uint16_t>(), alloc,
                               stream.handle());
      };
      native_ms[i].first = median_ms(3, iters, stream, forward);
      native_ms[i].second = median_ms(3, iters, stream, [&] {
        forward();
        backward();
      });
      report("odc", native_ms[i].first, native_ms[i].second, "");
    } else {
      if (const std::string blocker = cudnn_blocker(b.n_heads, b.n_kv_heads, b.head_dim); !blocker.empty()) {
        std::printf("{\"bench\":\"gpu_attention\",\"impl\":\"cudnn\",%s,\"error\":\"%s\"}\n", head.c_str(),
                    json_escape(blocker).c_str());
        std::fflush(stdout);
        continue;
      }
      // Deterministic backward, as training runs it; the graphs are built in the warm-ups.
      // A shape over the workspace bound is not run by cuDNN: its line carries the refusal.
      auto forward = [&] {
        if (!cudnn.forward(shape, qp, kp, vp, out.as<std::uint16_t>(), lse.as<float>(), alloc, stream.handle())) {
          odc::fail("{}", cudnn.refusal());
        }
      };
      auto backward = [&] {
        if (!cudnn.backward(shape, qp, kp, vp, out.as<std::uint16_t>(), lse.as<float>(), dout.as<std::uint16_t>(),
                            dq.as<std::uint16_t>(), dk.as<std::uint16_t>(), dv.as<std::uint16_t>(), alloc,
                            stream.handle())) {
          odc::fail("{}", cudnn.refusal());
        }
      };
      try {
        const double fwd_ms = median_ms(3, iters, stream, forward);
        const double fwdbwd_ms = median_ms(3, iters, stream, [&] {
          forward();
          backward();
        });
        // Ratio of TFLOP/s (same FLOPs): > 1 means cuDNN is faster than the native kernels.
        const std::string ratio =
            run_native ? ",\"vs_odc_fwd\":" + std::to_string(native_ms[i].first / fwd_ms) + ",\"vs_odc_fwdbwd\":" +
                             std::to_string(native_ms[i].second / fwdbwd_ms)
                       : std::string();
        report("cudnn", fwd_ms, fwdbwd_ms, ratio);
      } catch (const std::exception& e) {
        std::printf("{\"bench\":\"gpu_attention\",\"impl\":\"cudnn\",%s,\"error\":\"%s\"}\n", head.c_str(),
                    json_escape(e.what()).c_str());
        std::fflush(stdout);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  return odc::bench::gpu_bench_main("gpu_attention", [&] { return parse(argc, argv); }, [](const Options& o) { run(o); });
}
