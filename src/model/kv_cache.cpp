// Incremental decoding: the KV cache and LlamaModel::forward_cached, which runs only the new
// tokens of a sequence through every layer, attending to the cached keys and values.
#include "odc/model/kv_cache.h"

#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "decoder_layer.h"
#include "odc/core/error.h"
#include "odc/model/llama_model.h"

namespace odc::model {

using backend::ConstView;
using backend::View;

KvCache::KvCache(backend::Backend& backend, const LlamaConfig& config, std::int64_t capacity)
    : backend_(&backend), capacity_(capacity), kv_dim_(config.kv_dim()),
      buffers_(std::make_unique<detail::DecodeBuffers>(backend)) {
  if (capacity < 1 || capacity > config.max_position_embeddings) {
    fail("a KV cache needs 1 to {} positions (the model's max_position_embeddings), asked for {}",
         config.max_position_embeddings, capacity);
  }
  for (int l = 0; l < config.num_hidden_layers; ++l) {
    keys_.emplace_back(backend.memory(), backend.activation_dtype());
    values_.emplace_back(backend.memory(), backend.activation_dtype());
    keys_.back().get(capacity * kv_dim_);  // allocated once, here
    values_.back().get(capacity * kv_dim_);
  }
}

std::int64_t kv_cache_bytes(const LlamaConfig& config, std::int64_t capacity, DType act) {
  return config.num_hidden_layers * 2 * capacity * config.kv_dim() * static_cast<std::int64_t>(dtype_size(act));
}

KvCache::~KvCache() = default;
KvCache::KvCache(KvCache&&) noexcept = default;
KvCache& KvCache::operator=(KvCache&&) noexcept = default;

std::int64_t KvCache::bytes() const {
  std::int64_t n = buffers_->bytes();
  for (const auto& b : keys_) n += b.capacity_bytes();
  for (const auto& b : values_) n += b.capacity_bytes();
  return n;
}

View KvCache::keys(int layer) { return keys_.at(static_cast<std::size_t>(layer)).get(capacity_ * kv_dim_); }
View KvCache::values(int layer) { return values_.at(static_cast<std::size_t>(layer)).get(capacity_ * kv_dim_); }

void KvCache::advance(std::int64_t n) {
  ODC_CHECK(n >= 0 && length_ + n <= capacity_, "KV cache advanced by {} at {} of {}", n, length_, capacity_);
  length_ += n;
}

void LlamaModel::forward_cached(std::span<const std::int32_t> tokens, KvCache& cache, ParamSource& params,
                                std::vector<float>& logits) {
  KvCache* one[] = {&cache};
  decode(tokens, one, static_cast<std::int64_t>(tokens.size()), params, logits);
}

void LlamaModel::forward_cached_batch(std::span<const std::int32_t> tokens, std::span<KvCache* const> caches,
                                      ParamSource& params, std::vector<float>& logits) {
  if (tokens.size() != caches.size()) {
    fail("forward_cached_batch: {} tokens for {} sequences (one new token each)", tokens.size(), caches.size());
  }
  decode(tokens, caches, 1, params, logits);
}

void LlamaModel::decode(std::span<const std::int32_t> tokens, std::span<KvCache* const> caches, std::int64_t rows,
                        ParamSource& params, std::vector<float>& logits) {
  const auto n = static_cast<std::int64_t>(tokens.size());
  const auto count = static_cast<std::int64_t>(caches.size());
  if (n == 0 || rows == 0) fail("forward_cached needs at least one new token");
  ODC_CHECK(count > 0 && n == rows * count, "decode: {} tokens, {} sequences of {} rows", n, count, rows);
  std::vector<detail::DecodeSequence> sequences;
  for (std::int64_t i = 0; i < count; ++i) {
    KvCache& cache = *caches[static_cast<std::size_t>(i)];
    if (cache.backend() != backend_) fail("forward_cached: the KV cache was made for another backend");
    if (cache.num_layers() != config_.num_hidden_layers || cache.kv_dim() != config_.kv_dim()) {
      fail("forward_cached: the KV cache holds {} layers of width {}, the model has {} of width {}", cache.num_layers(),
           cache.kv_dim(), config_.num_hidden_layers, config_.kv_dim());
    }
    if (cache.length() + rows > cache.capacity()) {
      fail("the KV cache{} holds {} of its {} positions: {} more tokens do not fit",
           count > 1 ? fmt::format(" of sequence {}", i) : std::string(), cache.length(), cache.capacity(), rows);
    }
    for (std::int64_t j = 0; j < i; ++j) {
      if (caches[static_cast<std::size_t>(j)] == &cache) fail("forward_cached_batch: sequences {} and {} share a KV cache", j, i);
    }
    sequences.push_back({cache.length(), rows, {}, {}});
  }
  for (std::int64_t t = 0; t < n; ++t) {
    const std::int32_t id = tokens[static_cast<std::size_t>(t)];
    if (id < 0 || id >= config_.vocab_size) {
      fail("token id {} at new position {} is out of range [0, {})", id, sequences[static_cast<std::size_t>(t / rows)].past + t % rows,
           config_.vocab_size);
    }
  }
  backend::Backend& b = *backend_;
  detail::DecodeBuffers& s = caches[0]->buffers();
  const detail::Dims d = detail::dims_of(config_, n);
  const detail::LayerSlices slices = detail::layer_slices(units_[1], config_);

  // RoPE tables of the new positions, each sequence's from its own length.
  s.host_positions.clear();
  for (const auto& seq : sequences) {
    for (std::int64_t r = 0; r < rows; ++r) s.host_positions.push_back(static_cast<std::int32_t>(seq.past + r));
  }
  const View cos = s.cos.get(n * d.head_dim / 2);
  const View sin = s.sin.get(n * d.head_dim / 2);
  b.rope_tables(b.upload(std::span<const std::int32_t>(s.host_positions), s.positions), n, inv_freq_, cos, sin);

  const View x = s.x.get(n * d.c);
  params.prefetch(1);
  const float* embed = params.acquire(0);
  b.embedding_forward(b.upload(tokens, s.tokens), b.weights(embed, units_[0].numel), x, n, d.c);
  if (!config_.tie_word_embeddings) {
    b.release_weights(embed);
    params.release(0);
  }
  for (int l = 0; l < config_.num_hidden_layers; ++l) {
    const int unit = l + 1;
    params.prefetch(unit + 1);
    const float* w = params.acquire(unit);
    for (std::int64_t i = 0; i < count; ++i) {
      auto& seq = sequences[static_cast<std::size_t>(i)];
      seq.k_cache = caches[static_cast<std::size_t>(i)]->keys(l);
      seq.v_cache = caches[static_cast<std::size_t>(i)]->values(l);
    }
    detail::layer_decode(b, d, slices, b.weights(w, units_[static_cast<std::size_t>(unit)].numel), sequences, cos, sin,
                         x, s);
    b.release_weights(w);
    params.release(unit);
  }

  // Head: the final norm and the logits of each sequence's last new token only.
  const int head = head_unit();
  const auto& head_layout = units_[static_cast<std::size_t>(head)];
  const float* head_weights = params.acquire(head);
  const ConstView wh = b.weights(head_weights, head_layout.numel);
  const auto& norm = head_layout.find("model.norm.weight");
  const ConstView table = config_.tie_word_embeddings
                              ? b.weights(embed, units_[0].numel)
                              : detail::part(wh, {head_layout.find("lm_head.weight").offset,
                                                  head_layout.find("lm_head.weight").numel});
  const View xf = s.xf.get(count * d.c);
  if (rows == 1) {
    b.rmsnorm_forward(x, detail::part(wh, {norm.offset, norm.numel}), xf, s.rstd.get(count), count, d.c, d.eps);
  } else {  // one sequence (count 1): its last row
    b.rmsnorm_forward(x.at((n - 1) * d.c, d.c), detail::part(wh, {norm.offset, norm.numel}), xf, s.rstd.get(1), 1,
                      d.c, d.eps);
  }
  const View out = s.logits.get(count * d.v);
  b.linear_forward(xf, table, ConstView{}, out, count, d.c, d.v);
  logits.resize(static_cast<std::size_t>(count * d.v));
  b.download(out, logits);
  b.release_weights(head_weights);
  params.release(head);
  if (config_.tie_word_embeddings) {
    b.release_weights(embed);
    params.release(0);
  }
  for (auto* cache : caches) cache->advance(rows);
}

}  // namespace odc::model
