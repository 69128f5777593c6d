#pragma once
// KvCache: the keys and values one sequence has produced so far in every decoder layer, kept in
// the model's backend memory so that generation runs each new token once (LlamaModel::
// forward_cached) instead of recomputing the whole sequence per token. Keys are stored after
// RoPE, at the position they were computed for, in the backend's activation dtype.
//
// The cache is sized once (capacity positions, at most the model's max_position_embeddings) and
// allocates nothing afterwards; clear() starts a new sequence in the same memory. Its memory is
// the backend's: a cache must not outlive the backend (the model) it was made for.
#include <cstdint>
#include <memory>
#include <vector>

#include "odc/backend/backend.h"
#include "odc/model/llama_config.h"

namespace odc::model {

namespace detail {
struct DecodeBuffers;
}

// The keys and values a KvCache of `capacity` positions holds, every layer's, in `act` (the
// backend's activation dtype): what the constructor allocates, known without a backend (the
// memory plan's rollout caches). The decoding scratch is not counted.
std::int64_t kv_cache_bytes(const LlamaConfig& config, std::int64_t capacity, DType act);

class KvCache {
 public:
  // odc::Error when capacity is < 1 or beyond config.max_position_embeddings.
  KvCache(backend::Backend& backend, const LlamaConfig& config, std::int64_t capacity);
  ~KvCache();
  KvCache(KvCache&&) noexcept;
  KvCache& operator=(KvCache&&) noexcept;

  std::int64_t capacity() const { return capacity_; }
  // Positions cached so far: the next token runs at position length().
  std::int64_t length() const { return length_; }
  void clear() { length_ = 0; }
  // Bytes of the cached keys and values (all layers) plus the decoding scratch.
  std::int64_t bytes() const;

  // ---- for LlamaModel::forward_cached ----
  const backend::Backend* backend() const { return backend_; }
  int num_layers() const { return static_cast<int>(keys_.size()); }
  std::int64_t kv_dim() const { return kv_dim_; }
  // Layer l's cache: capacity rows of kv_dim elements.
  backend::View keys(int layer);
  backend::View values(int layer);
  detail::DecodeBuffers& buffers() { return *buffers_; }
  // Marks `n` more positions as cached (after their keys and values were written).
  void advance(std::int64_t n);

 private:
  backend::Backend* backend_;
  std::int64_t capacity_ = 0;
  std::int64_t kv_dim_ = 0;
  std::int64_t length_ = 0;
  std::vector<backend::Buffer> keys_, values_;
  std::unique_ptr<detail::DecodeBuffers> buffers_;
};

}  // namespace odc::model
