#include "odc/optim/sharded_adamw.h"

#include <vector>

#include "odc/kernels/adamw.h"

namespace odc::optim {

double clip_coefficient(double grad_norm, double max_norm) {
  if (max_norm <= 0.0) return 1.0;
  const double coef = max_norm / (grad_norm + 1e-6);
  return coef < 1.0 ? coef : 1.0;
}

void ShardedAdamW::step(distributed::ShardStore& store, double lr, double grad_scale) {
  ++step_;
  const auto& layout = store.layout();
  if (backend::Backend* device = store.device(); device != nullptr) {
    // The state is in device memory: one multi-segment AdamW there, the same segments and decay rule.
    std::vector<backend::AdamWSegment> segments;
    const backend::View param = store.masters_view(), grad = store.grads_view();
    const backend::View m = store.exp_avg_view(), v = store.exp_avg_sq_view();
    for (int u = 0; u < layout.num_units(); ++u) {
      for (const auto& seg : layout.decay_segments(u)) {
        if (seg.count == 0) continue;
        const std::int64_t at = store.offset(u) + seg.begin;
        segments.push_back({param.at(at, seg.count), grad.at(at, seg.count), m.at(at, seg.count),
                            v.at(at, seg.count), seg.weight_decay});
      }
    }
    kernels::AdamWParams p;
    p.lr = lr;
    p.beta1 = config_.beta1;
    p.beta2 = config_.beta2;
    p.eps = config_.eps;
    p.weight_decay = config_.weight_decay;
    p.step = step_;
    p.grad_scale = grad_scale;
    device->adamw_step(segments, p);
    return;
  }
  for (int u = 0; u < layout.num_units(); ++u) {
    for (const auto& seg : layout.decay_segments(u)) {
      kernels::cpu::AdamWParams p;
      p.lr = lr;
      p.beta1 = config_.beta1;
      p.beta2 = config_.beta2;
      p.eps = config_.eps;
      p.weight_decay = seg.weight_decay ? config_.weight_decay : 0.0;
      p.step = step_;
      p.grad_scale = grad_scale;
      kernels::cpu::adamw_step(store.master(u) + seg.begin, store.grad(u) + seg.begin,
                               store.exp_avg(u) + seg.begin, store.exp_avg_sq(u) + seg.begin, seg.count, p);
    }
  }
}

}  // namespace odc::optim
