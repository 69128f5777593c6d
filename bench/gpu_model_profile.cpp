#include "gpu_model_profile.h"

#include <chrono>
#include <utility>

#include "odc/kernels/adamw.h"
#include "odc/model/recompute.h"

namespace odc::bench {

backend::GemmClassifier gemm_classifier(const model::LlamaConfig& c) {
  return backend::llama_gemm_classifier({c.hidden_size, c.q_dim(), c.kv_dim(), c.intermediate_size, c.vocab_size});
}

backend::ProfileDocument profile_step(model::LlamaModel& model, model::ResidentWeights& weights,
                                      backend::ProfilingBackend& profiler, const model::PackedBatch& batch,
                                      const std::string& shape, const std::string& attention, int adamw_step) {
  backend::Backend& b = model.backend();
  const model::LlamaConfig& c = model.config();
  const auto step = [&](int number) {
    weights.zero_gradients();
    b.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    profiler.start();
    model.train_microbatch(batch, weights, weights);
    // The norm's value is not the point here: its reduction's time is.
    for (int u = 0; u < weights.num_units(); ++u) {
      b.sum_of_squares(b.gradients(weights.grad_buffer(u), model.units()[static_cast<std::size_t>(u)].numel));
    }
    kernels::AdamWParams p;
    p.lr = 1e-4;
    p.step = number;
    weights.adamw_step(p);
    b.synchronize();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return std::make_pair(profiler.stop(), seconds);
  };
  // Twice, keeping the second: the first fills the timeline's pool of events (creating an event
  // is host work, which mid-step would open gaps the device idles in).
  step(adamw_step);
  auto [profile, seconds] = step(adamw_step + 1);
  backend::ProfileDocument d;
  d.profile = std::move(profile);
  d.shape = shape;
  d.tokens = batch.num_tokens();
  d.sequences = batch.num_seqs();
  d.layers = c.num_hidden_layers;
  d.hidden = c.hidden_size;
  d.q_dim = c.q_dim();
  d.kv_dim = c.kv_dim();
  d.intermediate = c.intermediate_size;
  d.vocab = c.vocab_size;
  d.recompute = std::string(model::recompute_name(model.recompute()));
  d.attention = attention;
  d.device = b.device().kind == DeviceKind::cuda ? "cuda" : "cpu";
  d.device_description = b.describe().text;
  d.step_seconds = seconds;
  return d;
}

}  // namespace odc::bench
