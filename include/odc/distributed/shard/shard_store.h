#pragma once
// ShardStore: what this rank owns, per unit: the fp32 master shard, the fp32 gradient
// accumulator and the AdamW moments. Nothing of a unit outside this rank's shard lives here.
// Each kind is one contiguous buffer with the units back to back, so a transport can register
// the masters as a single region (ODC serves one-sided reads from it).
//
// Where the state lives: host memory (the default), or the memory of a device backend (one GPU:
// masters, accumulators and moments stay on the device for the whole run; the comm hands the
// model device pointers). The host-side users (checkpoint save/load, Hugging Face load, export)
// go through the host views below: the state itself on a host store, a host staging copy on a
// device store, moved by pull_to_host() / push_to_device().
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "odc/backend/backend.h"
#include "odc/core/tensor.h"
#include "odc/distributed/shard/shard_layout.h"
#include "odc/model/llama_config.h"

namespace odc::distributed {

// What a store holds: everything (masters, gradient accumulators, AdamW moments), or the masters
// only (a copy of the weights that serves gathers and is never stepped: hpz's secondary shards).
enum class StoreContents { all, weights };

// Draws this rank's shard of every unit of `layout` from the random initialization of `seed`
// (model::init_unit_range: counter-based, the same weights at every world size) into `masters`
// (layout.owned_elements() floats, the units' shards back to back).
void draw_owned_masters(const ShardLayout& layout, const std::vector<model::UnitLayout>& units,
                        const model::LlamaConfig& config, std::uint64_t seed, std::span<float> masters);

class ShardStore {
 public:
  // With a `seed`, initializes the master shards deterministically (draw_owned_masters), so
  // every world size starts from the same model. Without one (std::nullopt) the masters are left
  // for a load to fill, every owned element, padding included (a checkpoint: native or Hugging
  // Face; the weights of a tool that only runs forwards): nothing is drawn or written that the
  // load would overwrite, and their pages become resident as the load writes them.
  // `master_region`, when given, is caller-owned memory of
  // layout.owned_elements() floats that holds the masters (e.g. transport-registered memory); it
  // must outlive the store. `device`, when given and not a host backend, holds the whole state in
  // its memory (a master_region is then device memory of that backend, e.g. exported to peers
  // with CUDA IPC); it must outlive the store. StoreContents::weights (host stores only) leaves
  // out gradients and moments: their pointers are null, zero_grads() does nothing, the gradient
  // norm is 0 and the moment views are empty.
  ShardStore(const ShardLayout& layout, const std::vector<model::UnitLayout>& units,
             const model::LlamaConfig& config, std::optional<std::uint64_t> seed, std::span<float> master_region = {},
             backend::Backend* device = nullptr, StoreContents contents = StoreContents::all);
  StoreContents contents() const { return contents_; }
  // Whether the masters were drawn from the random initialization (a seed was given); false: a
  // load fills them.
  bool masters_drawn() const { return masters_drawn_; }

  const ShardLayout& layout() const { return layout_; }
  // Unit u's shard of each kind, in the store's memory (device pointers on a device store).
  float* master(int u) { return masters_ + offset(u); }
  const float* master(int u) const { return masters_ + offset(u); }
  // (null on a weights-only store)
  float* grad(int u) { return grads_ != nullptr ? grads_ + offset(u) : nullptr; }
  float* exp_avg(int u) { return exp_avg_ != nullptr ? exp_avg_ + offset(u) : nullptr; }
  float* exp_avg_sq(int u) { return exp_avg_sq_ != nullptr ? exp_avg_sq_ + offset(u) : nullptr; }
  std::int64_t shard_size(int u) const { return layout_.unit(u).shard; }
  // Offset of unit u's shard inside the contiguous buffers (the same on every rank).
  std::int64_t offset(int u) const { return layout_.owned_offset(u); }
  float* master_base() { return masters_; }

  // The device backend holding the state; null for a host store.
  backend::Backend* device() const { return device_; }
  // Views of the whole state of one kind in the store's memory (for the backend's ops).
  backend::View masters_view() { return view(masters_); }
  backend::View grads_view() { return view(grads_); }
  backend::View exp_avg_view() { return view(exp_avg_); }
  backend::View exp_avg_sq_view() { return view(exp_avg_sq_); }

  // Host views of masters and moments (owned_elements() floats each; unit u at offset(u)). On a
  // device store they are a staging copy: pull_to_host() before reading them, push_to_device()
  // after writing them. On a host store both calls do nothing.
  std::span<float> host_masters();
  std::span<const float> host_masters() const;
  std::span<float> host_exp_avg();
  std::span<float> host_exp_avg_sq();
  // Refreshes the staging copy only (the state is unchanged): const, so an export of a const store
  // can read a device store's masters.
  void pull_to_host() const;
  void push_to_device();

  void zero_grads();
  // Sum of squares of the owned gradient shards (this rank only), in a fixed order.
  double grad_sum_of_squares();
  // Bytes of master + gradient + optimizer state held by this rank (weights only: the masters).
  std::int64_t bytes() const;

 private:
  backend::View view(float* data) const;

  ShardLayout layout_;
  StoreContents contents_ = StoreContents::all;
  bool masters_drawn_ = false;
  backend::Backend* device_ = nullptr;  // null: host store
  Tensor own_masters_;                  // host store without a master_region
  Tensor host_grads_, host_exp_avg_, host_exp_avg_sq_;
  mutable Tensor staging_masters_, staging_exp_avg_, staging_exp_avg_sq_;  // device store: the host copies
  std::vector<backend::Buffer> device_state_;                      // device store: the four kinds
  float* masters_ = nullptr;
  float* grads_ = nullptr;
  float* exp_avg_ = nullptr;
  float* exp_avg_sq_ = nullptr;
};

}  // namespace odc::distributed
