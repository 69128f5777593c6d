#pragma once
// How the model obtains weights and hands off gradients, without knowing about sharding.
// The model calls acquire(u) before it uses unit u's weights and release(u) when done; it adds
// unit u's full gradient into grad_buffer(u) and calls push_grad(u) when the unit's backward is
// complete. A unit's gradient buffer is only valid between grad_buffer() and push_grad().
#include <cstdint>

namespace odc::model {

class ParamSource {
 public:
  virtual ~ParamSource() = default;
  // Full weights of unit `unit` (layout: units.h), valid until release(unit).
  virtual const float* acquire(int unit) = 0;
  virtual void release(int unit) = 0;
  // Hint: unit `unit` will be acquired next (start fetching it now).
  virtual void prefetch(int unit) { (void)unit; }
};

class GradSink {
 public:
  virtual ~GradSink() = default;
  // A buffer of the unit's full size that the model *adds* the unit's gradient into.
  virtual float* grad_buffer(int unit) = 0;
  // The unit's gradient for this microbatch is complete.
  virtual void push_grad(int unit) = 0;
};

}  // namespace odc::model
