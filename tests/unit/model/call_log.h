#pragma once
// The model's ParamSource/GradSink calls in order (what a sharded comm turns into gathers and
// pushes), weights served from a ShardStore: A<unit> acquire, R release, G grad_buffer, P push,
// and F prefetch when asked for.
#include <string>
#include <vector>

#include "odc/distributed/shard/shard_store.h"
#include "odc/model/param_io.h"

namespace odc::test {

class CallLog final : public model::ParamSource, public model::GradSink {
 public:
  explicit CallLog(distributed::ShardStore& s, bool prefetches = false) : store(s), with_prefetches(prefetches) {}
  const float* acquire(int u) override { log.push_back("A" + std::to_string(u)); return store.master(u); }
  void release(int u) override { log.push_back("R" + std::to_string(u)); }
  void prefetch(int u) override {
    if (with_prefetches) log.push_back("F" + std::to_string(u));
  }
  float* grad_buffer(int u) override { log.push_back("G" + std::to_string(u)); return store.grad(u); }
  void push_grad(int u) override { log.push_back("P" + std::to_string(u)); }
  distributed::ShardStore& store;
  bool with_prefetches;
  std::vector<std::string> log;
};

}  // namespace odc::test
