#pragma once
// Context parallelism in the planner: what one member's share of a sequence split over a group of
// k ranks holds and costs, written once for the planner (dynamic groups, the static degree) and
// the simulator (odc-sim's split microbatches).
//
// The cut is the model's (odc/model/context_split.h, ContextCut; the data layer sits above the
// model layer and uses it as is): 2k near-equal chunks, the first L % 2k one token longer; member
// i holds chunks i and 2k-1-i, so every member's causal attention work is about L^2 / (2k);
// member 0 holds the most rows.
#include <cstdint>

#include "odc/data/cost_model.h"

namespace odc::data {

// The most rows a member of a group of k holds of a sequence of `length` (member 0's).
std::int64_t context_max_rows(std::int64_t length, int k);
std::int64_t context_rows(std::int64_t length, int k, int member);
// The causal (query, key <= query) pairs of member's chunks against their prefixes: a chunk
// [b, e) of r = e - b rows has r*b + r*(r+1)/2. Over the members they sum to L*(L+1)/2.
double context_share_pairs(std::int64_t length, int k, int member);
// The planned cost of member's share: its attention pairs and rows priced as the cost model prices
// a whole sequence, plus the exchange (CostModel::exchange_per_token * L * (k-1)/k).
//   quadratic, flops, linear (a*s^2 + b*s = 2a * s(s+1)/2 + (b - a) * s): 2a * pairs + (b - a) * rows;
//   measured: cost(L) * ((1 - f) * rows / L + f * pairs / (L(L+1)/2)), f = the attention share of
//     the per-token cost at L, 1 - per_token(shortest measured) / per_token(L) (clamped to [0, 1]).
// Without the exchange the members' shares sum to cost(L) (to rounding; k = 1 is cost(L)).
double context_share_cost(const CostModel& cost, std::int64_t length, int k, int member);
// The group's cost per member: the largest member's share (the members move in step at every
// layer, so each is busy as long as the slowest).
double context_group_cost(const CostModel& cost, std::int64_t length, int k);
// The smallest k >= 1 whose max rows fit `cap` (may exceed any world; k = length always fits a
// cap >= 1, see ContextCut).
int smallest_context_degree(std::int64_t length, std::int64_t cap);

}  // namespace odc::data
