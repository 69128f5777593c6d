// The gradient sums that used to be atomic (rmsnorm dweight, embedding dtable, the bias column
// sums) are bitwise reproducible: the same inputs give the same bits whether the kernel runs alone,
// again, or on a second stream while another stream keeps the GPU busy (which changes which
// blocks run when, and so the order of any atomic updates). Each result also satisfies the
// classic error bound of its fixed summation order against a float64 reference
// (check_sum_bound: |err| <= terms * 2^-24 * sum |x|), so the order is the documented one.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "odc/kernels/cuda_cast.h"
#include "odc/kernels/cuda_device.h"
#include "odc/kernels/cuda_gemm.h"
#include "odc/kernels/cuda_ops.h"
#include "odc/kernels/embedding.h"

#include "cuda_test_support.h"

using namespace odc::test::cuda;
namespace cu = odc::kernels::cuda;
namespace cpu = odc::kernels::cpu;

namespace {

constexpr std::int64_t kChunkRows = 64;  // the documented chunk of the two-pass column sums

// Runs `launch(stream)` on an accumulator that starts as `init`, three ways: alone on stream 1,
// again alone on stream 1, and on stream 2 while stream 1 fills 256 MiB four times (started
// first, so the two overlap). Returns the three results.
std::vector<std::vector<float>> three_runs(cu::DeviceAllocator& alloc, const std::vector<float>& init,
                                           const std::function<void(float*, void*)>& launch) {
  cu::Stream first, second;
  const std::int64_t busy_n = std::int64_t(1) << 26;
  cu::DeviceBuffer busy(alloc, busy_n * sizeof(float), first);
  std::vector<std::vector<float>> results;
  for (int run = 0; run < 3; ++run) {
    auto acc = to_device(alloc, init);  // legacy stream, synchronous upload
    cu::device_synchronize();
    if (run < 2) {
      launch(acc.as<float>(), first.handle());
      first.synchronize();
    } else {
      for (int rep = 0; rep < 4; ++rep) cu::fill_f32(busy.as<float>(), 1.0f, busy_n, first.handle());
      launch(acc.as<float>(), second.handle());
      second.synchronize();
      first.synchronize();
    }
    results.push_back(from_device<float>(acc, init.size()));
  }
  return results;
}

void check_identical(const char* what, const std::vector<std::vector<float>>& runs) {
  INFO(what);
  CHECK(runs[1] == runs[0]);
  CHECK(runs[2] == runs[0]);
}

}  // namespace

TEST_CASE("rmsnorm dweight: bitwise reproducible, within its summation bound",
          "[cuda][rmsnorm][determinism]") {
  std::mt19937 rng(31);
  cu::DeviceAllocator alloc;
  const std::int64_t rows = 8192 + 17, dim = 1100;  // 129 chunks, a partial column block
  auto x = random_bf16(rows * dim, rng), w = random_bf16(dim, rng, 0.1f, 1.0f);
  auto dy = random_bf16(rows * dim, rng);
  const auto dw0 = random_f32(dim, rng);
  auto d_x = to_device(alloc, x.bits), d_w = to_device(alloc, w.bits), d_dy = to_device(alloc, dy.bits);
  cu::DeviceBuffer d_y(alloc, rows * dim * 2), d_rstd(alloc, rows * 4), d_dx(alloc, rows * dim * 2);
  cu::rmsnorm_forward(d_x.as<std::uint16_t>(), d_w.as<std::uint16_t>(), d_y.as<std::uint16_t>(),
                      d_rstd.as<float>(), rows, dim, 1e-5, nullptr);
  const auto rstd = from_device<float>(d_rstd, rows);

  const auto runs = three_runs(alloc, dw0, [&](float* dw, void* stream) {
    cu::rmsnorm_backward(d_dy.as<std::uint16_t>(), d_x.as<std::uint16_t>(), d_w.as<std::uint16_t>(),
                         d_rstd.as<float>(), d_dx.as<std::uint16_t>(), dw, rows, dim, false, alloc,
                         stream);
  });
  check_identical("rmsnorm dweight", runs);

  // The caller-workspace overload is the same computation.
  cu::DeviceBuffer scratch(alloc, cu::rmsnorm_backward_workspace_bytes(rows, dim));
  CHECK(scratch.bytes() == std::size_t((rows + kChunkRows - 1) / kChunkRows * dim * 4));
  auto d_dw = to_device(alloc, dw0);
  cu::rmsnorm_backward(d_dy.as<std::uint16_t>(), d_x.as<std::uint16_t>(), d_w.as<std::uint16_t>(),
                       d_rstd.as<float>(), d_dx.as<std::uint16_t>(), d_dw.as<float>(), rows, dim,
                       false, scratch.as<float>(), nullptr);
  CHECK(from_device<float>(d_dw, dim) == runs[0]);

  // float64 reference on the GPU's own rstd. Per element: two product roundings per term, 63
  // additions inside a chunk, chunks - 1 between chunks, one into dweight.
  std::vector<double> ref(dim), abs_sum(dim);
  for (std::int64_t c = 0; c < dim; ++c) {
    ref[c] = dw0[c];
    abs_sum[c] = std::fabs(double(dw0[c]));
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < dim; ++c) {
      const double t = double(dy.f[r * dim + c]) * double(x.f[r * dim + c]) * double(rstd[r]);
      ref[c] += t;
      abs_sum[c] += std::fabs(t);
    }
  }
  const double chunks = double((rows + kChunkRows - 1) / kChunkRows);
  check_sum_bound("rmsnorm dweight vs float64", runs[0], ref, abs_sum, kChunkRows + chunks + 3);
}

TEST_CASE("bias column sums: bitwise reproducible, within their summation bound",
          "[cuda][gemm][determinism]") {
  std::mt19937 rng(32);
  cu::DeviceAllocator alloc;
  const std::int64_t rows = 6000, cols = 700;
  auto dy = random_bf16(rows * cols, rng);
  const auto db0 = random_f32(cols, rng);
  auto d_dy = to_device(alloc, dy.bits);
  const auto runs = three_runs(alloc, db0, [&](float* db, void* stream) {
    cu::column_sums_accumulate(d_dy.as<std::uint16_t>(), db, rows, cols, alloc, stream);
  });
  check_identical("column sums", runs);

  cu::DeviceBuffer scratch(alloc, cu::column_sums_workspace_bytes(rows, cols));
  auto d_db = to_device(alloc, db0);
  cu::column_sums_accumulate(d_dy.as<std::uint16_t>(), d_db.as<float>(), rows, cols,
                             scratch.as<float>(), nullptr);
  CHECK(from_device<float>(d_db, cols) == runs[0]);

  std::vector<double> ref(cols), abs_sum(cols);
  for (std::int64_t c = 0; c < cols; ++c) {
    ref[c] = db0[c];
    abs_sum[c] = std::fabs(double(db0[c]));
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      ref[c] += dy.f[r * cols + c];
      abs_sum[c] += std::fabs(double(dy.f[r * cols + c]));
    }
  }
  const double chunks = double((rows + kChunkRows - 1) / kChunkRows);
  check_sum_bound("column sums vs float64", runs[0], ref, abs_sum, kChunkRows + chunks + 1);
}

TEST_CASE("embedding dtable: bitwise reproducible, equal to the CPU kernel, within its bound",
          "[cuda][embedding][determinism]") {
  std::mt19937 rng(33);
  cu::DeviceAllocator alloc;
  const std::int64_t vocab = 3000, dim = 700, tokens = 8192 + 5;
  // A hot id (30% of the tokens, like padding or a frequent word) among uniform ones.
  std::uniform_int_distribution<std::int32_t> pick(0, std::int32_t(vocab - 1));
  std::bernoulli_distribution hot(0.3);
  std::vector<std::int32_t> ids(tokens);
  for (auto& id : ids) id = hot(rng) ? 7 : pick(rng);
  ids.back() = std::int32_t(vocab - 1);
  auto dout = random_bf16(tokens * dim, rng);
  const auto dtable0 = random_f32(vocab * dim, rng);
  auto d_ids = to_device(alloc, ids), d_dout = to_device(alloc, dout.bits);
  const auto runs = three_runs(alloc, dtable0, [&](float* dtable, void* stream) {
    cu::embedding_backward(d_ids.as<std::int32_t>(), d_dout.as<std::uint16_t>(), dtable, tokens,
                           dim, stream);
  });
  check_identical("embedding dtable", runs);

  // Each element adds its tokens in token order, as the CPU kernel does: the same fp32 bits.
  std::vector<float> cpu_ref = dtable0;
  cpu::embedding_backward(ids.data(), dout.f.data(), cpu_ref.data(), tokens, dim);
  CHECK(runs[0] == cpu_ref);

  std::vector<double> ref(dtable0.begin(), dtable0.end()), abs_sum(vocab * dim);
  std::vector<std::int64_t> count(vocab, 0);
  for (std::size_t i = 0; i < abs_sum.size(); ++i) abs_sum[i] = std::fabs(ref[i]);
  for (std::int64_t t = 0; t < tokens; ++t) {
    ++count[ids[t]];
    for (std::int64_t d = 0; d < dim; ++d) {
      ref[ids[t] * dim + d] += dout.f[t * dim + d];
      abs_sum[ids[t] * dim + d] += std::fabs(double(dout.f[t * dim + d]));
    }
  }
  const double max_count = double(*std::max_element(count.begin(), count.end()));
  check_sum_bound("embedding dtable vs float64", runs[0], ref, abs_sum, max_count);
}
