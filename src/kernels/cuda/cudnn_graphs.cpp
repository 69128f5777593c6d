// The cuDNN attention's ragged batch tables and SDPA graphs (cudnn_graphs.h); compiled only with
// the cuDNN frontend header (ODC_HAVE_CUDNN_FRONTEND), in its dynamic-loading mode.
#if defined(ODC_HAVE_CUDNN_FRONTEND)
#ifndef NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#endif
#ifndef CUDNN_FRONTEND_SKIP_JSON_LIB
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#endif
#include <cstring>  // the frontend's dynamic-loading shim uses std::strlen without including it

#include <cudnn_frontend.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <string>
#include <unordered_map>

#include "cudnn_graphs.h"
#include "odc/core/error.h"
#include "odc/kernels/cudnn_ragged.h"

// The dynamic-loading mode's library handle (declared by the frontend, defined by its user; set by
// cudnn_attention.cu's loader). Here, not beside the loader: this host-compiled object can be
// pulled into a link for a weak template instantiation it also defines (the CPU emulator's tests
// link the emulated cudnn_attention instead), and must then bring nothing that clashes with it.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}

namespace odc::kernels::cuda::cudnn_graphs {
namespace {

namespace fe = cudnn_frontend;
using Tensor = std::shared_ptr<fe::graph::Tensor_attributes>;

// Tensor uids of the variant pack.
enum Uid : std::int64_t {
  kQ = 1, kK, kV, kO, kStats, kDout, kDq, kDk, kDv,
  kSeqQ = 20, kSeqKv,
  kOffQ = 30, kOffK, kOffV, kOffO, kOffStats, kOffDout, kOffDq, kOffDk, kOffDv,
};

constexpr std::int64_t kTableAlign = 16;  // int32 elements: 64 bytes

std::string_view direction(const GraphKey& k) { return k.backward ? "backward" : "forward"; }

// Builds the graph of one shape class; on failure returns nullptr and says why.
std::shared_ptr<fe::graph::Graph> build_graph(const GraphKey& k, cudnnHandle_t handle, std::string& why) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const std::int64_t b = k.b, s = k.s, d = k.d;
  auto index = [&](const char* name, std::int64_t uid, std::int64_t n) {
    return g->tensor(fe::graph::Tensor_attributes()
                         .set_name(name)
                         .set_uid(uid)
                         .set_dim({n, 1, 1, 1})
                         .set_stride({1, 1, 1, 1})
                         .set_data_type(fe::DataType_t::INT32));
  };
  // A packed [tokens, heads * d] tensor viewed as [B, heads, S, d] with per-sequence offsets.
  auto thd_attributes = [&](fe::graph::Tensor_attributes& t, const char* name, std::int64_t uid, std::int64_t heads,
                            const Tensor& offsets) -> fe::graph::Tensor_attributes& {
    return t.set_name(name)
        .set_uid(uid)
        .set_dim({b, heads, s, d})
        .set_stride({s * heads * d, d, heads * d, 1})
        .set_ragged_offset(offsets);
  };
  auto thd = [&](const char* name, std::int64_t uid, std::int64_t heads, std::int64_t offset_uid) {
    fe::graph::Tensor_attributes t;
    thd_attributes(t, name, uid, heads, index((std::string(name) + "_offsets").c_str(), offset_uid, b + 1));
    return g->tensor(t);
  };
  auto stats_attributes = [&](fe::graph::Tensor_attributes& t) -> fe::graph::Tensor_attributes& {
    return t.set_name("stats")
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({b, k.h_q, s, 1})
        .set_stride({s * k.h_q, 1, k.h_q, 1})
        .set_ragged_offset(index("stats_offsets", kOffStats, b + 1));
  };
  const Tensor seq_q = index("seq_len_q", kSeqQ, b);
  const Tensor seq_kv = index("seq_len_kv", kSeqKv, b);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));

  const Tensor q = thd("q", kQ, k.h_q, kOffQ);
  const Tensor kk = thd("k", kK, k.h_kv, kOffK);
  const Tensor v = thd("v", kV, k.h_kv, kOffV);
  if (!k.backward) {
    auto options = fe::graph::SDPA_attributes()
                       .set_name("odc_attention_forward")
                       .set_generate_stats(true)
                       .set_attn_scale(scale)
                       .set_padding_mask(true)
                       .set_seq_len_q(seq_q)
                       .set_seq_len_kv(seq_kv)
                       .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                       .set_diagonal_band_right_bound(0);
    auto [o, stats] = g->sdpa(q, kk, v, options);
    thd_attributes(o->set_output(true), "o", kO, k.h_q, index("o_offsets", kOffO, b + 1));
    stats_attributes(stats->set_output(true));
  } else {
    const Tensor o = thd("o", kO, k.h_q, kOffO);
    const Tensor dout = thd("dout", kDout, k.h_q, kOffDout);
    fe::graph::Tensor_attributes stats_in;
    const Tensor stats = g->tensor(stats_attributes(stats_in));
    auto options = fe::graph::SDPA_backward_attributes()
                       .set_name("odc_attention_backward")
                       .set_attn_scale(scale)
                       .set_padding_mask(true)
                       .set_seq_len_q(seq_q)
                       .set_seq_len_kv(seq_kv)
                       .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                       .set_diagonal_band_right_bound(0)
                       .set_deterministic_algorithm(k.deterministic)
                       // The per-token workspace (softmax sums, dQ accumulator, GQA's full-head
                       // dK/dV) sized by the token bucket, not by the padded B x S view.
                       .set_max_total_seq_len_q(k.t)
                       .set_max_total_seq_len_kv(k.t);
    auto [dq, dk, dv] = g->sdpa_backward(q, kk, v, o, dout, stats, options);
    thd_attributes(dq->set_output(true), "dq", kDq, k.h_q, index("dq_offsets", kOffDq, b + 1));
    thd_attributes(dk->set_output(true), "dk", kDk, k.h_kv, index("dk_offsets", kOffDk, b + 1));
    thd_attributes(dv->set_output(true), "dv", kDv, k.h_kv, index("dv_offsets", kOffDv, b + 1));
  }
  try {
    fe::error_t status = g->build(handle, {fe::HeurMode_t::A});
    if (status.is_bad()) {
      why = status.get_message();
      return nullptr;
    }
  } catch (const std::exception& e) {  // the dynamic loader and the frontend's own checks throw
    why = e.what();
    return nullptr;
  }
  return g;
}

}  // namespace

void RaggedBatch::prepare(const CudaAttentionShape& shape, DeviceAllocator& allocator, void* stream) {
  const int n = shape.num_seqs;
  if (shape.cu_seqlens == nullptr || n < 0) fail("cuDNN attention: the host cu_seqlens are missing ({} sequences)", n);
  const bool same = ready_ && h_q_ == shape.n_heads && h_kv_ == shape.n_kv_heads && d_ == shape.head_dim &&
                    static_cast<int>(cu_seqlens_.size()) == n + 1 &&
                    std::equal(cu_seqlens_.begin(), cu_seqlens_.end(), shape.cu_seqlens);
  if (same) return;
  if (shape.cu_seqlens[n] != shape.tokens) {
    fail("cuDNN attention: cu_seqlens must run from 0 to the {} tokens (got {} .. {})", shape.tokens,
         shape.cu_seqlens[0], shape.cu_seqlens[n]);
  }
  // The shape class and tables (kernels/cudnn_ragged.h, tested on the CPU), packed into one block.
  const CudnnRaggedTables t = cudnn_ragged_tables(shape.cu_seqlens, n, shape.n_heads, shape.n_kv_heads, shape.head_dim);
  cu_seqlens_.assign(shape.cu_seqlens, shape.cu_seqlens + n + 1);
  h_q_ = shape.n_heads;
  h_kv_ = shape.n_kv_heads;
  d_ = shape.head_dim;
  b_ = t.b;
  s_ = t.s;
  t_ = t.t;
  stride_ = (b_ + 1 + kTableAlign - 1) / kTableAlign * kTableAlign;
  host_.assign(static_cast<std::size_t>(4 * stride_), 0);
  std::copy(t.seq_len.begin(), t.seq_len.end(), host_.begin());
  std::copy(t.q_offsets.begin(), t.q_offsets.end(), host_.begin() + stride_);
  std::copy(t.kv_offsets.begin(), t.kv_offsets.end(), host_.begin() + 2 * stride_);
  std::copy(t.stats_offsets.begin(), t.stats_offsets.end(), host_.begin() + 3 * stride_);
  const std::size_t bytes = host_.size() * sizeof(std::int32_t);
  if (device_.bytes() < bytes) device_ = DeviceBuffer(allocator, bytes, stream);
  // Through page-locked memory, so the copy does not wait for the stream's queued work (a pageable
  // source would); the staging is rewritten only after the previous microbatch's copy has run.
  if (pending_) uploaded_.synchronize();
  if (pinned_.bytes() < bytes) pinned_ = PinnedBuffer(bytes);
  std::memcpy(pinned_.get(), host_.data(), bytes);
  copy_to_device_async(device_.get(), pinned_.get(), bytes, stream);
  uploaded_.record(stream);
  pending_ = true;
  ready_ = true;
}

GraphKey RaggedBatch::key(bool backward) const {
  GraphKey k;
  k.backward = backward;
  k.h_q = h_q_;
  k.h_kv = h_kv_;
  k.d = d_;
  k.b = b_;
  k.s = s_;
  k.t = backward ? t_ : 0;  // the forward has no per-token workspace: one graph for every total
  return k;
}

const void* RaggedBatch::at(int table) const {
  return static_cast<const std::int32_t*>(device_.get()) + table * stride_;
}

const CachedGraph& GraphCache::get(GraphKey key, cudnnHandle_t handle) {
  key.deterministic = deterministic_;
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    if (it->key == key) {
      lru_.splice(lru_.begin(), lru_, it);
      return lru_.front();
    }
  }
  std::string why;
  auto graph = build_graph(key, handle, why);
  if (graph == nullptr) {
    fail("cuDNN attention: no {} plan for {} heads over {} kv heads, head_dim {}, padded batch {} x {}, token bucket "
         "{} ({}); set model.attention: native",
         direction(key), key.h_q, key.h_kv, key.d, key.b, key.s, key.t, why);
  }
  std::int64_t workspace = 0;
  if (fe::error_t status = graph->get_workspace_size(workspace); status.is_bad()) {
    fail("cuDNN attention: the {} graph's workspace size is unknown ({})", direction(key), status.get_message());
  }
  ++stats_.graph_builds;
  lru_.push_front({key, std::move(graph), workspace});
  while (lru_.size() > capacity_) {
    lru_.pop_back();
    ++stats_.evictions;
  }
  return lru_.front();
}

bool GraphCache::admit(const CachedGraph& graph) {
  const GraphKey& k = graph.key;
  if (graph.workspace <= workspace_limit_) {
    stats_.largest_workspace = std::max(stats_.largest_workspace, graph.workspace);
    return true;
  }
  ++stats_.fallbacks;
  refusal_ = fmt::format(
      "cuDNN attention: the {} graph of a padded batch {} x {} ({} heads over {} kv heads, head_dim {}, token bucket "
      "{}) needs {:.1f} MiB of workspace, over the bound of {:.1f} MiB (model.cudnn_workspace_mib): the native "
      "attention kernels run such calls",
      direction(k), k.b, k.s, k.h_q, k.h_kv, k.d, k.t, static_cast<double>(graph.workspace) / 1048576.0,
      static_cast<double>(workspace_limit_) / 1048576.0);
  return false;
}

void GraphCache::execute(const CachedGraph& graph, const RaggedBatch& batch, const Pointers& p, cudnnHandle_t handle,
                         DeviceAllocator& allocator, void* stream) const {
  auto in = [](const void* ptr) { return const_cast<void*>(ptr); };  // cuDNN's variant pack is void*
  std::unordered_map<std::int64_t, void*> pack = {
      {kQ, in(p.q)},
      {kK, in(p.k)},
      {kV, in(p.v)},
      {kO, in(p.o)},
      {kStats, p.stats},
      {kSeqQ, in(batch.seq_len())},
      {kSeqKv, in(batch.seq_len())},
      {kOffQ, in(batch.q_offsets())},
      {kOffK, in(batch.kv_offsets())},
      {kOffV, in(batch.kv_offsets())},
      {kOffO, in(batch.q_offsets())},
      {kOffStats, in(batch.stats_offsets())},
  };
  if (graph.key.backward) {
    pack.insert({{kDout, in(p.dout)},
                 {kDq, p.dq},
                 {kDk, p.dk},
                 {kDv, p.dv},
                 {kOffDout, in(batch.q_offsets())},
                 {kOffDq, in(batch.q_offsets())},
                 {kOffDk, in(batch.kv_offsets())},
                 {kOffDv, in(batch.kv_offsets())}});
  }
  DeviceBuffer workspace;
  if (graph.workspace > 0) workspace = DeviceBuffer(allocator, static_cast<std::size_t>(graph.workspace), stream);
  std::string why;
  try {
    if (fe::error_t status = graph.graph->execute(handle, pack, workspace.get()); status.is_bad()) {
      why = status.get_message();
    }
  } catch (const std::exception& e) {
    why = e.what();
  }
  if (!why.empty()) fail("cuDNN attention: the {} graph failed to run ({})", direction(graph.key), why);
}

}  // namespace odc::kernels::cuda::cudnn_graphs

#endif  // ODC_HAVE_CUDNN_FRONTEND
