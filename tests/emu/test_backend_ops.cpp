// backend_ops.cu executed by the emulator: row gathers and scatters, RoPE tables from device
// positions, and the fixed-order reductions (sum_of_squares, sum_f32).
//
// Bounds: the reductions add fp32 values (exact in double) or their squares (exact in double:
// 24-bit mantissas squared fit in 53 bits) in double, so against a float64 reference in another
// order the error is at most n * 2^-53 * sum|term|: relative 1e-12 for n ~ 1e5. The RoPE tables are
// the CPU kernel's double math (std::cos / std::sin here) rounded to fp32: bitwise equal.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "emu_block.h"
#include "emu_test_support.h"
#include "odc/kernels/cuda_backend_ops.h"
#include "odc/kernels/rope.h"

namespace kc = odc::kernels::cuda;
using odc_emu::Schedule;
using odc_emu::UseSchedule;

namespace {

std::vector<float> random_f32(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof(double)) == 0; }

}  // namespace

TEST_CASE("emu backend ops: gather and scatter rows of bf16 and fp32 widths", "[emu][backend_ops]") {
  // Row widths in bytes: 2 (one bf16), 6 (odd count of bf16), 1028 (257 fp32: more than a block).
  for (const std::int64_t row_bytes : {2, 6, 1028}) {
    const std::int64_t src_rows = 50, n_rows = 17;
    std::vector<std::uint8_t> source(static_cast<std::size_t>(src_rows * row_bytes));
    for (std::size_t i = 0; i < source.size(); ++i) source[i] = static_cast<std::uint8_t>(i * 131 + 7);
    std::vector<std::int32_t> rows(n_rows);
    for (std::int64_t i = 0; i < n_rows; ++i) rows[i] = static_cast<std::int32_t>((i * 13 + 5) % src_rows);  // distinct
    std::vector<std::uint8_t> gathered(static_cast<std::size_t>(n_rows * row_bytes), 0xee);
    kc::gather_rows(source.data(), rows.data(), n_rows, row_bytes, gathered.data(), nullptr);
    int bad = 0;
    for (std::int64_t i = 0; i < n_rows; ++i) {
      bad += std::memcmp(&gathered[i * row_bytes], &source[rows[i] * row_bytes], row_bytes) != 0;
    }
    CHECK(bad == 0);
    // Scatter back into a cleared target: exactly the listed rows are written, the rest untouched.
    std::vector<std::uint8_t> target(source.size(), 0xee);
    kc::scatter_rows(gathered.data(), rows.data(), n_rows, row_bytes, target.data(), nullptr);
    std::vector<bool> listed(src_rows, false);
    for (const std::int32_t r : rows) listed[r] = true;
    for (std::int64_t r = 0; r < src_rows; ++r) {
      const std::vector<std::uint8_t> untouched(static_cast<std::size_t>(row_bytes), 0xee);
      const void* want = listed[r] ? static_cast<const void*>(&source[r * row_bytes]) : untouched.data();
      bad += std::memcmp(&target[r * row_bytes], want, row_bytes) != 0;
    }
    INFO("row_bytes " << row_bytes);
    CHECK(bad == 0);
  }
}

TEST_CASE("emu backend ops: rope tables from device positions equal cpu::rope_tables", "[emu][backend_ops]") {
  const std::int64_t tokens = 300, half = 32;
  std::vector<std::int32_t> positions(tokens);
  for (std::int64_t t = 0; t < tokens; ++t) positions[t] = static_cast<std::int32_t>((t * 7) % 257);  // ragged restarts
  std::vector<double> inv_freq(half);
  for (std::int64_t i = 0; i < half; ++i) inv_freq[i] = std::pow(500000.0, -2.0 * i / (2 * half));
  std::vector<float> cos_cpu(tokens * half), sin_cpu(tokens * half), cos_gpu(tokens * half, NAN), sin_gpu(tokens * half, NAN);
  odc::kernels::cpu::rope_tables<float>(positions.data(), tokens, inv_freq, cos_cpu.data(), sin_cpu.data());
  kc::rope_tables(positions.data(), tokens, inv_freq.data(), half, cos_gpu.data(), sin_gpu.data(), nullptr);
  CHECK(std::memcmp(cos_gpu.data(), cos_cpu.data(), cos_cpu.size() * 4) == 0);
  CHECK(std::memcmp(sin_gpu.data(), sin_cpu.data(), sin_cpu.size() * 4) == 0);
}

TEST_CASE("emu backend ops: sum_of_squares and sum_f32 against double, bitwise run to run", "[emu][backend_ops]") {
  const std::int64_t n = 200003;  // more than the fixed grid's 512 x 256 threads: strided, ragged end
  const std::vector<float> x = random_f32(static_cast<std::size_t>(n), 101, 3.0f);
  double ref_sq = 0.0, ref_sum = 0.0, mag = 0.0;
  for (const float v : x) {
    ref_sq += double(v) * v;
    ref_sum += v;
    mag += std::fabs(v);
  }
  std::vector<double> scratch(static_cast<std::size_t>(kc::sum_of_squares_scratch()), NAN);
  std::vector<double> squares, sums;
  const Schedule schedules[] = {Schedule::round_robin, Schedule::warps_forward, Schedule::warps_backward,
                                Schedule::warps_forward};
  for (const Schedule s : schedules) {
    const UseSchedule use(s);
    double sq = NAN, sum = 0.25;
    kc::sum_of_squares(x.data(), n, scratch.data(), &sq, nullptr);
    kc::sum_f32(x.data(), n, &sum, true, nullptr);  // accumulates onto 0.25
    squares.push_back(sq);
    sums.push_back(sum - 0.25);
  }
  for (std::size_t i = 1; i < squares.size(); ++i) {
    CHECK(same_bits(squares[i], squares[0]));
    CHECK(same_bits(sums[i], sums[0]));
  }
  CHECK(std::fabs(squares[0] - ref_sq) <= 1e-12 * ref_sq);
  CHECK(std::fabs(sums[0] - ref_sum) <= 1e-12 * mag);
  // Overwrite mode, an empty input, and a single element.
  double out = 7.0;
  kc::sum_f32(x.data(), 0, &out, false, nullptr);
  CHECK(out == 0.0);
  kc::sum_f32(x.data(), 1, &out, false, nullptr);
  CHECK(out == double(x[0]));
  kc::sum_of_squares(x.data(), 1, scratch.data(), &out, nullptr);
  CHECK(out == double(x[0]) * x[0]);
}

TEST_CASE("emu backend ops: scale_bf16 rounds float(x) * alpha to nearest even, in place", "[emu][backend_ops]") {
  // The policy head's logits / temperature: every element is the bf16 rounding of the exact fp32
  // product (bitwise), across more elements than one block and a tail.
  const std::int64_t n = 70001;
  const auto data = odc_emu_test::random_bf16(static_cast<std::size_t>(n), 6.0f, 41);
  for (const float alpha : {1.0f / 0.7f, 0.5f, 1.0f}) {
    std::vector<std::uint16_t> x = data.bits;
    kc::scale_bf16(x.data(), n, alpha, nullptr);
    std::int64_t bad = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::uint16_t want = odc_emu_test::to_bf16(odc_emu_test::from_bf16(data.bits[i]) * alpha);
      bad += x[i] != want;
    }
    INFO("alpha " << alpha);
    CHECK(bad == 0);
  }
}
