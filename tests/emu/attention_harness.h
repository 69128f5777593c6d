#pragma once
// Runs the emulated CUDA attention (the real attention.cu: host wrapper, tile tables, kernels)
// forward and backward on random bf16 inputs and measures it against the float64 reference.
#include <cstdint>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "attention_reference.h"
#include "emu_test_support.h"
#include "odc/kernels/cuda_attention.h"
#include "odc/kernels/cuda_device.h"

namespace odc_emu_test {

struct AttentionErrors {
  double out = 0, lse = 0, dq = 0, dk = 0, dv = 0;  // normwise relative (lse: max absolute)
  std::string describe() const {
    std::ostringstream s;
    s << std::scientific << std::setprecision(2) << "out " << out << ", lse " << lse << ", dq "
      << dq << ", dk " << dk << ", dv " << dv;
    return s.str();
  }
};

inline AttentionErrors run_attention(const AttentionCase& c, std::uint32_t seed, bool backward = true) {
  namespace kc = odc::kernels::cuda;
  const std::int64_t T = c.tokens();
  const std::size_t nq = static_cast<std::size_t>(T * c.n_heads * c.head_dim);
  const std::size_t nkv = static_cast<std::size_t>(c.key_tokens() * c.n_kv_heads * c.head_dim);
  // Scores of a few units (|q.k| / sqrt(d) up to ~3): softmax rows neither flat nor one-hot.
  const Bf16Data q = random_bf16(nq, 1.0f, seed), k = random_bf16(nkv, 1.0f, seed + 1),
                 v = random_bf16(nkv, 1.0f, seed + 2), dout = random_bf16(nq, 1.0f, seed + 3);

  kc::CudaAttentionShape shape;
  shape.cu_seqlens = c.cu_seqlens.data();
  shape.num_seqs = static_cast<int>(c.cu_seqlens.size()) - 1;
  shape.tokens = T;
  shape.n_heads = c.n_heads;
  shape.n_kv_heads = c.n_kv_heads;
  shape.head_dim = c.head_dim;
  if (!c.cu_seqlens_k.empty()) {  // key segments: separate k/v rows, bottom-right diagonal
    shape.cu_seqlens_k = c.cu_seqlens_k.data();
    shape.key_tokens = c.key_tokens();
  }

  // The kernels' own temporaries (tile tables, D) come from the real DeviceAllocator; inputs and
  // outputs sit at the end of guarded pages (an access past the end faults) and outputs start as
  // NaN bits, so that an element the kernels never write shows up.
  kc::DeviceAllocator allocator;
  GuardedBuffer q_buf(nq * 2), k_buf(nkv * 2), v_buf(nkv * 2), o_buf(nq * 2), do_buf(nq * 2);
  GuardedBuffer dq_buf(nq * 2), dk_buf(nkv * 2), dv_buf(nkv * 2);
  GuardedBuffer lse_buf(static_cast<std::size_t>(T * c.n_heads) * 4);
  q_buf.write(q.bits);
  k_buf.write(k.bits);
  v_buf.write(v.bits);
  do_buf.write(dout.bits);

  kc::attention_forward(shape, q_buf.as<std::uint16_t>(), k_buf.as<std::uint16_t>(),
                        v_buf.as<std::uint16_t>(), o_buf.as<std::uint16_t>(), lse_buf.as<float>(),
                        allocator, nullptr);
  AttentionReference ref(c, q.values, k.values, v.values);
  std::vector<double> out_ref, lse_ref;
  ref.forward(out_ref, lse_ref);
  AttentionErrors e;
  e.out = normwise_error(widen(o_buf.read<std::uint16_t>(nq)), out_ref);
  e.lse = max_abs_error(lse_buf.read<float>(static_cast<std::size_t>(T * c.n_heads)), lse_ref);
  if (!backward) return e;

  kc::attention_backward(shape, q_buf.as<std::uint16_t>(), k_buf.as<std::uint16_t>(),
                         v_buf.as<std::uint16_t>(), o_buf.as<std::uint16_t>(), lse_buf.as<float>(),
                         do_buf.as<std::uint16_t>(), dq_buf.as<std::uint16_t>(),
                         dk_buf.as<std::uint16_t>(), dv_buf.as<std::uint16_t>(), allocator, nullptr);
  const AttentionGrads g = ref.backward(dout.values);
  e.dq = normwise_error(widen(dq_buf.read<std::uint16_t>(nq)), g.dq);
  e.dk = normwise_error(widen(dk_buf.read<std::uint16_t>(nkv)), g.dk);
  e.dv = normwise_error(widen(dv_buf.read<std::uint16_t>(nkv)), g.dv);
  return e;
}

}  // namespace odc_emu_test
