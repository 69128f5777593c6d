#pragma once
// The PTX instructions of the attention kernels (attention_tiles.cuh's wrappers), emulated per
// lane from the fragment layouts of the PTX ISA (re-derived, section names cited):
//   * cp.async (ISA "Data Movement and Conversion Instructions: cp.async", cp.async.commit_group,
//     cp.async.wait_group): copies are recorded at issue and performed only when a wait_group
//     retires their group; until then the destination holds all-ones bytes (NaN as bf16 / f32),
//     so a missing wait, or a missing barrier between one thread's wait and another thread's
//     read, yields NaN instead of the data.
//   * ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 (ISA "Warp-level matrix load instruction:
//     ldmatrix"): lanes 8i..8i+7 give the row addresses of matrix i; lane l receives, in register
//     i, the elements (row l/4, columns 2(l%4), 2(l%4)+1) of matrix i, or with .trans those of its
//     transpose, i.e. (rows 2(l%4), 2(l%4)+1, column l/4) of the stored matrix.
//   * mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (ISA "Matrix Fragments for
//     mma.m16n8k16 with floating point type"), with g = l/4, t = l%4:
//       A 16x16: a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
//       B 16x8:  b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
//       C, D 16x8: c0, c1 = C[g][2t], C[g][2t+1]; c2, c3 = C[g+8][2t], C[g+8][2t+1]
//     (the lower 16 bits of a register hold the element with the smaller index). Products of
//     bf16 are exact in f32; the sums run in f32 in k order.

#include <cstdint>
#include <cstring>
#include <source_location>

#include <fmt/format.h>

#include "bf16_emu.h"
#include "cuda_emu.h"

namespace odc_emu::ptx {

inline float bf16_bits_to_float(std::uint16_t bits) {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- cp.async ----

inline void cp_async(void* smem, const void* gmem, int bytes, bool valid) {
  Block& b = this_block();
  auto* dst = static_cast<unsigned char*>(smem);
  const auto addr = reinterpret_cast<std::uintptr_t>(smem);
  if (!b.in_shared(smem, static_cast<std::size_t>(bytes)) || addr % bytes != 0) {
    b.fail(fmt::format("cp.async of {} bytes to {} : not {}-byte aligned shared memory", bytes,
                       smem, bytes));
  }
  if (valid && reinterpret_cast<std::uintptr_t>(gmem) % bytes != 0) {
    b.fail(fmt::format("cp.async of {} bytes from {}: source not {}-byte aligned", bytes, gmem, bytes));
  }
  std::memset(dst, 0xff, static_cast<std::size_t>(bytes));
  this_thread().open_group.push_back({dst, static_cast<const unsigned char*>(gmem), bytes, valid});
}

inline void cp_async_commit() {
  EmuThread& t = this_thread();
  t.groups.push_back(std::move(t.open_group));
  t.open_group.clear();
}

inline void cp_async_wait(int pending, std::source_location where) {
  if (faults().skip_wait.matches(where)) return;
  EmuThread& t = this_thread();
  while (static_cast<int>(t.groups.size()) > pending) {
    for (const AsyncCopy& c : t.groups.front()) {
      if (c.valid) {
        std::memcpy(c.dst, c.src, static_cast<std::size_t>(c.bytes));
      } else {
        std::memset(c.dst, 0, static_cast<std::size_t>(c.bytes));
      }
    }
    t.groups.pop_front();
  }
}

// ---- ldmatrix ----

struct LdmatrixOut {
  std::uint32_t r[4];
};

template <bool Trans>
void combine_ldmatrix(WarpState& w) {
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    auto& out = *static_cast<LdmatrixOut*>(w.slots[lane].out);
    for (int i = 0; i < 4; ++i) {
      std::uint16_t e[2];
      for (int j = 0; j < 2; ++j) {
        // Non-transposed: row g, column 2t + j; transposed: row 2t + j, column g.
        const int row = Trans ? 2 * t + j : g;
        const int col = Trans ? g : 2 * t + j;
        const auto* base = *static_cast<const unsigned char* const*>(w.slots[8 * i + row].in);
        std::memcpy(&e[j], base + 2 * col, 2);
      }
      out.r[i] = static_cast<std::uint32_t>(e[0]) | (static_cast<std::uint32_t>(e[1]) << 16);
    }
  }
}

inline void ldmatrix_x4(std::uint32_t (&r)[4], const void* row_address, bool trans,
                        std::source_location where) {
  Block& b = this_block();
  if (!b.in_shared(row_address, 16) || reinterpret_cast<std::uintptr_t>(row_address) % 16 != 0) {
    b.fail(fmt::format("ldmatrix at {}:{}: row address {} is not 16-byte aligned shared memory",
                       where.file_name(), where.line(), row_address));
  }
  if (faults().swap_ldmatrix_trans) trans = !trans;
  const auto* in = static_cast<const unsigned char*>(row_address);
  LdmatrixOut out{};
  if (trans) {
    b.warp_collective(0xffffffffu, "ldmatrix.x4.trans", &combine_ldmatrix<true>, &in, &out, where);
  } else {
    b.warp_collective(0xffffffffu, "ldmatrix.x4", &combine_ldmatrix<false>, &in, &out, where);
  }
  std::memcpy(r, out.r, sizeof(out.r));
}

// ---- mma ----

struct MmaIn {
  std::uint32_t a[4];
  std::uint32_t b[2];
  float c[4];
};

inline void combine_mma_16816(WarpState& w) {
  float a[16][16], bm[16][8], c[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    const auto& in = *static_cast<const MmaIn*>(w.slots[lane].in);
    for (int j = 0; j < 2; ++j) {
      const auto lo_hi = [&](std::uint32_t reg) { return bf16_bits_to_float(static_cast<std::uint16_t>(reg >> (16 * j))); };
      a[g][2 * t + j] = lo_hi(in.a[0]);
      a[g + 8][2 * t + j] = lo_hi(in.a[1]);
      a[g][2 * t + 8 + j] = lo_hi(in.a[2]);
      a[g + 8][2 * t + 8 + j] = lo_hi(in.a[3]);
      bm[2 * t + j][g] = lo_hi(in.b[0]);
      bm[2 * t + 8 + j][g] = lo_hi(in.b[1]);
    }
    c[g][2 * t] = in.c[0];
    c[g][2 * t + 1] = in.c[1];
    c[g + 8][2 * t] = in.c[2];
    c[g + 8][2 * t + 1] = in.c[3];
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    auto* d = static_cast<float*>(w.slots[lane].out);
    const int rows[4] = {g, g, g + 8, g + 8};
    const int cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int i = 0; i < 4; ++i) {
      float acc = c[rows[i]][cols[i]];
      for (int k = 0; k < 16; ++k) acc += a[rows[i]][k] * bm[k][cols[i]];
      d[i] = acc;
    }
  }
}

inline void mma_m16n8k16_bf16(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                              std::uint32_t b1, std::source_location where) {
  MmaIn in{{a[0], a[1], a[2], a[3]}, {b0, b1}, {d[0], d[1], d[2], d[3]}};
  float out[4];
  this_block().warp_collective(0xffffffffu, "mma.m16n8k16", &combine_mma_16816, &in, out, where);
  std::memcpy(d, out, sizeof(out));
}

}  // namespace odc_emu::ptx
