// cpu_gemm: how the candidate fp32 GEMM paths of the CPU backend compare on the model's shapes,
// side by side in one run (this machine is noisy: compare the ratios, not the absolute rates).
//   project  odc::kernels::cpu::gemm (what the model runs: oneDNN's sgemm)
//   matmul   oneDNN's matmul primitive, built once per shape and cached (its best case: ragged
//            microbatches would need a primitive per row count)
// One JSON line per shape:
//   {"bench":"cpu_gemm","m":..,"n":..,"k":..,"trans_a":..,"trans_b":..,"project_gflops":..,
//    "matmul_gflops":..,"matmul_impl":"..","ratio":project/matmul,"threads":..}
// then the MLP's gate/up projections fused (one GEMM of 2 * intermediate outputs, forward and both
// gradients, as the model runs them) against two GEMMs of intermediate outputs:
//   {"bench":"cpu_gemm_fused_gate_up", "separate_seconds", "fused_seconds", "fused_vs_separate"}
// and a final {"bench":"cpu_gemm_summary", "gemm_library", "gemm_isa", "geomean_ratio"}.
//
//   cpu_gemm [--tokens N] [--hidden N] [--intermediate N] [--qkv N] [--threads N] [--iters N]
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command_line.h"
#include "cli/tool_main.h"
#include "odc/core/error.h"
#include "odc/kernels/matmul.h"

namespace {

namespace k = odc::kernels::cpu;

struct Shape {
  std::int64_t m, n, k;
  bool trans_a, trans_b;
};

struct Options {
  std::int64_t tokens = 1792, hidden = 256, intermediate = 688, qkv = 512;
  int threads = 1, iters = 8;
};

constexpr const char* kUsage =
    "usage: cpu_gemm [--tokens N] [--hidden N] [--intermediate N] [--qkv N] [--threads N] [--iters N]\n"
    "Times the CPU backend's fp32 GEMM against oneDNN's matmul primitive on the model's shapes; one JSON\n"
    "line per shape, then the fused gate/up projections and a summary.\n";

Options parse(int argc, char** argv) {
  using odc::Range;
  const odc::cli::Command command{
      "cpu_gemm", kUsage, {{"--tokens"}, {"--hidden"}, {"--intermediate"}, {"--qkv"}, {"--threads"}, {"--iters"}}};
  const auto args = odc::cli::parse(command, argc, argv);
  const auto size = Range::at_least(1).and_at_most(1 << 20);
  Options o;
  o.tokens = args.integer("--tokens", o.tokens, size);
  o.hidden = args.integer("--hidden", o.hidden, size);
  o.intermediate = args.integer("--intermediate", o.intermediate, size);
  o.qkv = args.integer("--qkv", o.qkv, size);
  o.threads = static_cast<int>(args.integer("--threads", o.threads, Range::at_least(1).and_at_most(1024)));
  o.iters = static_cast<int>(args.integer("--iters", o.iters, size));
  return o;
}

// Best-of-iters seconds of one call, after one warm-up call.
template <typename F>
double best_seconds(int iters, F&& call) {
  call();
  double best = 1e30;
  for (int i = 0; i < iters; ++i) {
    const auto start = std::chrono::steady_clock::now();
    call();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

int run(int argc, char** argv) {
  const Options o = parse(argc, argv);
  k::set_num_threads(o.threads);
  const std::int64_t t = o.tokens, h = o.hidden, f = o.intermediate, q = o.qkv;
  // A linear layer's forward (x W^T), input gradient (dy W) and weight gradient (dy^T x), for the
  // MLP's up/gate and down projections and the fused QKV projection.
  const std::vector<Shape> shapes = {
      {t, f, h, false, true}, {t, h, f, false, false}, {f, h, t, true, false},
      {t, h, f, false, true}, {t, f, h, false, false}, {h, f, t, true, false},
      {t, q, h, false, true}, {t, h, q, false, false}, {q, h, t, true, false},
  };
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  double log_ratio = 0.0;
  for (const Shape& s : shapes) {
    std::vector<float> a(static_cast<std::size_t>(s.m * s.k), 0.01f), b(static_cast<std::size_t>(s.k * s.n), 0.02f);
    std::vector<float> c(static_cast<std::size_t>(s.m * s.n), 0.0f);
    const std::int64_t lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n;
    const double flops = 2.0 * static_cast<double>(s.m * s.n * s.k);
    const double ours = best_seconds(o.iters, [&] {
      k::gemm<float>(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 1.0f, c.data(), s.n);
    });
    using dims = dnnl::memory::dims;
    const auto f32 = dnnl::memory::data_type::f32;
    const dnnl::memory::desc a_md(dims{s.m, s.k}, f32, s.trans_a ? dims{1, s.m} : dims{s.k, 1});
    const dnnl::memory::desc b_md(dims{s.k, s.n}, f32, s.trans_b ? dims{1, s.k} : dims{s.n, 1});
    const dnnl::memory::desc c_md(dims{s.m, s.n}, f32, dims{s.n, 1});
    dnnl::post_ops sum;
    sum.append_sum(1.0f);
    dnnl::primitive_attr attr;
    attr.set_post_ops(sum);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, engine);
    const dnnl::matmul matmul(pd);
    dnnl::memory a_mem(a_md, engine, a.data()), b_mem(b_md, engine, b.data()), c_mem(c_md, engine, c.data());
    const double theirs = best_seconds(o.iters, [&] {
      matmul.execute(stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
      stream.wait();
    });
    log_ratio += std::log(theirs / ours);
    std::printf("%s\n", nlohmann::json{{"bench", "cpu_gemm"}, {"m", s.m}, {"n", s.n}, {"k", s.k},
                                       {"trans_a", s.trans_a}, {"trans_b", s.trans_b},
                                       {"project_gflops", flops / ours / 1e9}, {"matmul_gflops", flops / theirs / 1e9},
                                       {"matmul_impl", pd.impl_info_str()}, {"ratio", theirs / ours},
                                       {"threads", o.threads}}.dump().c_str());
  }
  // The MLP's gate and up projections as the model runs them (one GEMM of 2f outputs: forward,
  // input gradient, weight gradient) against the two GEMMs of f outputs it ran before, in turns.
  {
    std::vector<float> x(static_cast<std::size_t>(t * h), 0.01f), w(static_cast<std::size_t>(2 * f * h), 0.02f);
    std::vector<float> y(static_cast<std::size_t>(t * 2 * f), 0.01f), dx(static_cast<std::size_t>(t * h), 0.0f);
    std::vector<float> dw(static_cast<std::size_t>(2 * f * h), 0.0f);
    const auto fused = [&] {
      k::gemm<float>(false, true, t, 2 * f, h, 1.0f, x.data(), h, w.data(), h, 0.0f, y.data(), 2 * f);
      k::gemm<float>(false, false, t, h, 2 * f, 1.0f, y.data(), 2 * f, w.data(), h, 0.0f, dx.data(), h);
      k::gemm<float>(true, false, 2 * f, h, t, 1.0f, y.data(), 2 * f, x.data(), h, 1.0f, dw.data(), h);
    };
    const auto separate = [&] {
      for (int half = 0; half < 2; ++half) {
        float* yh = y.data() + half * t * f;  // [t, f] each, as the two buffers were
        const float* wh = w.data() + half * f * h;
        k::gemm<float>(false, true, t, f, h, 1.0f, x.data(), h, wh, h, 0.0f, yh, f);
      }
      for (int half = 0; half < 2; ++half) {
        const float* yh = y.data() + half * t * f;
        k::gemm<float>(false, false, t, h, f, 1.0f, yh, f, w.data() + half * f * h, h, half == 0 ? 0.0f : 1.0f,
                       dx.data(), h);
        k::gemm<float>(true, false, f, h, t, 1.0f, yh, f, x.data(), h, 1.0f, dw.data() + half * f * h, h);
      }
    };
    double fused_s = 1e30, separate_s = 1e30;
    fused();
    separate();
    for (int i = 0; i < o.iters; ++i) {
      fused_s = std::min(fused_s, best_seconds(1, fused));
      separate_s = std::min(separate_s, best_seconds(1, separate));
    }
    std::printf("%s\n", nlohmann::json{{"bench", "cpu_gemm_fused_gate_up"}, {"tokens", t}, {"hidden", h},
                                       {"intermediate", f}, {"threads", o.threads}, {"separate_seconds", separate_s},
                                       {"fused_seconds", fused_s}, {"fused_vs_separate", fused_s / separate_s}}
                            .dump()
                            .c_str());
  }
  const k::GemmInfo info = k::gemm_info();
  std::printf("%s\n", nlohmann::json{{"bench", "cpu_gemm_summary"}, {"gemm_library", info.library},
                                     {"gemm_isa", info.isa}, {"gemm_kernel", info.kernel}, {"threads", o.threads},
                                     {"geomean_ratio", std::exp(log_ratio / static_cast<double>(shapes.size()))}}
                          .dump()
                          .c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return odc::cli::run_tool("cpu_gemm", [&] { return run(argc, argv); });
}
