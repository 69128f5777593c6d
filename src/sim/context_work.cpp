// The work a plan gives every device (sim/schedule.h: work_from_plan), context parallelism
// included: a dynamic group's share on each member (leading its work, in group order), a static
// degree's shares of every microbatch, and the exchanges' seconds per layer (ExchangeModel).
#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "odc/core/error.h"
#include "odc/data/context_groups.h"
#include "odc/sim/schedule.h"

namespace odc::sim {

namespace {

// The bandwidth one member receives at: the switch link when the group sits in one node, else its
// share of the node's network link (every device of the node may be exchanging at once).
double exchange_bandwidth(const LinkModel& link, const std::vector<int>& ranks) {
  const int per_node = std::max(1, link.devices_per_node);
  const auto [lo, hi] = std::minmax_element(ranks.begin(), ranks.end());
  if (*lo / per_node == *hi / per_node) return link.intra_bandwidth;
  return std::min(link.intra_bandwidth, link.inter_bandwidth / per_node);
}

double exchange_time(const LinkModel& link, double bytes, const std::vector<int>& ranks) {
  if (ranks.size() < 2 || bytes <= 0.0) return 0.0;
  const double bandwidth = exchange_bandwidth(link, ranks);
  if (!(bandwidth > 0.0)) return link.latency;  // free links
  return link.latency + bytes / bandwidth;
}

}  // namespace

double ExchangeModel::bytes_of(std::int64_t length, int k) const {
  if (k < 2) return 0.0;
  return static_cast<double>(length) * static_cast<double>(k - 1) / static_cast<double>(k) * kv_bytes_per_token;
}

double ExchangeModel::forward_s(double bytes, const std::vector<int>& ranks) const {
  return exchange_time(link, bytes, ranks);
}

double ExchangeModel::backward_s(double bytes, const std::vector<int>& ranks) const {
  // As the model runs it (decoder_layer.cpp): the keys and values gathered again (the forward's are
  // not kept), their gradients returned, and under recomputation the recomputed forward's gather.
  const double once = exchange_time(link, bytes, ranks);
  return recompute ? 3.0 * once : 2.0 * once;
}

std::vector<DeviceWork> work_from_plan(const data::Plan& plan, const std::vector<std::int64_t>& lengths,
                                       const ExchangeModel& exchange) {
  auto length_of = [&](std::int64_t index) {
    if (index < 0 || static_cast<std::size_t>(index) >= lengths.size()) {
      fail("plan refers to sequence {} of a minibatch of {}", index, lengths.size());
    }
    return lengths[static_cast<std::size_t>(index)];
  };
  const int degree = plan.context_degree;
  std::vector<DeviceWork> out;
  out.reserve(plan.ranks.size());
  for (std::size_t r = 0; r < plan.ranks.size(); ++r) {
    const auto& rank = plan.ranks[r];
    DeviceWork device;
    for (const int g : rank.groups) {
      const data::ContextGroup& group = plan.groups.at(static_cast<std::size_t>(g));
      const auto k = static_cast<int>(group.ranks.size());
      const auto at = std::find(group.ranks.begin(), group.ranks.end(), static_cast<int>(r));
      if (at == group.ranks.end()) fail("plan: rank {} lists context group {} but is not a member", r, g);
      const int member = static_cast<int>(at - group.ranks.begin());
      const auto length = length_of(group.sequence);
      MicrobatchWork work;
      work.tokens = data::context_rows(length, k, member);
      work.pairs = data::context_share_pairs(length, k, member);
      work.sequences = 1;
      work.group = g;
      const double bytes = exchange.bytes_of(length, k);
      work.exchange_forward_s = exchange.forward_s(bytes, group.ranks);
      work.exchange_backward_s = exchange.backward_s(bytes, group.ranks);
      device.push_back(work);
    }
    // A static degree: this rank is member r % degree of the consecutive ranks from r - r % degree.
    std::vector<int> statics;
    const int member = static_cast<int>(r) % degree;
    for (int m = 0; m < degree; ++m) statics.push_back(static_cast<int>(r) - member + m);
    for (const auto& microbatch : rank.microbatches) {
      MicrobatchWork work;
      double bytes = 0.0;
      for (const auto index : microbatch) {
        const auto length = length_of(index);
        if (degree > 1) {
          work.tokens += data::context_rows(length, degree, member);
          work.pairs += data::context_share_pairs(length, degree, member);
          bytes += exchange.bytes_of(length, degree);
        } else {
          work.tokens += length;
          work.pairs += causal_pairs(length);
        }
        ++work.sequences;
      }
      if (degree > 1) {
        work.exchange_forward_s = exchange.forward_s(bytes, statics);
        work.exchange_backward_s = exchange.backward_s(bytes, statics);
      }
      device.push_back(work);
    }
    out.push_back(std::move(device));
  }
  return out;
}

}  // namespace odc::sim
