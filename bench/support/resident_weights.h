#pragma once
// ResidentWeights: the full fp32 weights of every unit, and their gradient buffers, held for as
// long as the object lives. It is the model's ParamSource and GradSink where nothing is sharded or
// fetched: benchmarks of the model alone (on the CPU and on a GPU), the parity dumps, the unit
// tests that run the model in one process. Not part of the model layer (no trainer holds every
// unit resident): bench/ and tests/ link it as the library odc_bench_support (bench/CMakeLists.txt).
//
// Where the buffers live:
//   host memory      the constructors without a backend; weights() and gradients() are spans
//                    the caller reads and writes directly.
//   a backend's      the constructors with one (a GPU's memory for the CUDA backend, host memory
//   memory           for the CPU backend); acquire() and grad_buffer() hand out pointers that
//                    backend's ops take. Read and write through download_*() and upload_weights(),
//                    which work in both places; the spans only where the memory is the host's.
// adamw_step() updates every unit in place (on the backend: its own kernel, the device's on a GPU).
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "odc/backend/backend.h"
#include "odc/kernels/adamw.h"
#include "odc/model/llama_config.h"
#include "odc/model/param_io.h"
#include "odc/model/units.h"

namespace odc::bench {


class ResidentWeights final : public model::ParamSource, public model::GradSink {
 public:
  // The weights a trainer of any world size starts from (init_unit_range with `seed`).
  ResidentWeights(const std::vector<model::UnitLayout>& units, const model::LlamaConfig& config,
                  std::uint64_t seed);
  // Given weights (a loaded checkpoint): one buffer per unit, each of its layout's size.
  ResidentWeights(const std::vector<model::UnitLayout>& units, std::vector<std::vector<float>> weights);
  // In `backend`'s memory (the backend outlives this object): the same, uploaded there, with
  // AdamW's moments allocated beside them.
  ResidentWeights(backend::Backend& backend, const std::vector<model::UnitLayout>& units, const model::LlamaConfig& config,
                  std::uint64_t seed);
  ResidentWeights(backend::Backend& backend, const std::vector<model::UnitLayout>& units,
                  const std::vector<std::vector<float>>& weights);
  ~ResidentWeights() override;
  ResidentWeights(const ResidentWeights&) = delete;
  ResidentWeights& operator=(const ResidentWeights&) = delete;

  const float* acquire(int unit) override;
  void release(int) override {}  // the weights stay resident
  // The model adds into the buffer, which starts at zero and is zeroed again only by
  // zero_gradients(): gradients sum over microbatches until the caller zeroes them.
  float* grad_buffer(int unit) override;
  void push_grad(int unit) override;

  int num_units() const { return static_cast<int>(units_.size()); }
  // Whether the buffers are in host memory, where the spans below may be used.
  bool on_host() const;
  std::span<float> weights(int unit);
  std::span<const float> weights(int unit) const;
  std::span<float> gradients(int unit);
  std::span<const float> gradients(int unit) const;
  // Copies to and from the host, wherever the buffers live.
  std::vector<float> download_weights(int unit) const;
  std::vector<float> download_gradients(int unit) const;
  void upload_weights(int unit, std::span<const float> host);
  void zero_gradients();
  // One AdamW step of every unit with weight decay on every element (params.weight_decay; the
  // model benchmarks train without it). The moments start at zero on the first call.
  void adamw_step(const kernels::AdamWParams& params);
  // push_grad(unit) calls since construction: how the parity dump checks that the model hands off
  // every unit's gradient once per microbatch.
  std::int64_t pushes(int unit) const;

 private:
  struct Unit;

  void place(const std::vector<model::UnitLayout>& units);
  void allocate_moments();
  std::size_t index(int unit) const;
  const Unit& at(int unit) const { return *units_[index(unit)]; }
  Unit& at(int unit) { return *units_[index(unit)]; }
  std::span<float> host_span(float* data, int unit, const char* what) const;

  backend::Backend* backend_ = nullptr;              // null: host memory of our own
  std::unique_ptr<backend::DeviceMemory> host_memory_;  // where the buffers live without a backend
  std::unique_ptr<backend::Buffer> staging_;         // the backend's upload staging
  std::vector<std::unique_ptr<Unit>> units_;
};

}  // namespace odc::bench
