#pragma once
// UnitBufferPool: the full-size unit buffers of a sharded comm and the ParamSource/GradSink
// protocol over them, shared by the collective baseline and ODC. A comm supplies only its
// transport (UnitTransport): how a buffer is filled with a unit's weights from every owner's
// shard, and how a full gradient is handed to every owner. The pool decides which buffer serves
// which unit and when a transfer must have finished, times and traces every wait that blocks,
// and checks the protocol (acquire before use, a gradient pushed exactly once, nothing held
// across a minibatch boundary).
//
// Weight buffers: a unit is gathered on acquire (or earlier, on the model's prefetch hint, when a
// buffer is free) and dropped on release, as FSDP's reshard-after-forward does: weights may only
// be held while a unit computes, so the backward gathers again. Gradient buffers: zeroed when
// handed out, pushed once complete; a buffer is reused only after its push finished.
//
// Buffers: kWeightBuffers and kGradBuffers — the unit computing, the one prefetched (or being
// pushed) and, with tied embeddings, unit 0 kept across the microbatch. Each is sized by what it
// holds: a unit goes to the smallest free buffer that holds it, else the largest free one grows
// to it (only while idle). The embedding-sized units then share one buffer and the others stay
// at a decoder layer's size (planned_floats), instead of every buffer at the embedding's size.
// They live in host memory, or in a device backend's memory when the pool is given one (a GPU
// comm's transfers then move device memory and the model computes on the buffers in place).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "odc/backend/backend.h"
#include "odc/core/tensor.h"
#include "odc/core/trace.h"
#include "odc/distributed/comm/comm.h"
#include "odc/distributed/shard/shard_layout.h"

namespace odc::distributed {


// A sharded comm's transport, driven by the pool. `buffer` indexes the pool's weight or gradient
// buffers, so a transport keeps its per-transfer state (requests, completions) in arrays of the
// same size. Every started transfer is waited for exactly once.
class UnitTransport {
 public:
  virtual ~UnitTransport() = default;
  // Starts filling `full` (the padded unit) with every owner's shard of `unit`.
  virtual void start_gather(int unit, int buffer, float* full) = 0;
  virtual bool gather_done(int buffer) = 0;
  virtual void wait_gather(int unit, int buffer) = 0;
  // Starts handing every owner its slice of the full gradient `full` of `unit`.
  virtual void start_push(int unit, int buffer, const float* full) = 0;
  virtual bool push_done(int buffer) = 0;
  virtual void wait_push(int unit, int buffer) = 0;
  // After the wait: whatever completes a push on this rank (the collective adds its reduced slice
  // into the accumulator). Not counted as waiting.
  virtual void finish_push(int unit, int buffer) { (void)unit, (void)buffer; }
};

class UnitBufferPool {
 public:
  static constexpr int kWeightBuffers = 3;
  static constexpr int kGradBuffers = 3;

  // `device`: a device backend whose memory holds the buffers (null or a host backend: host memory).
  UnitBufferPool(const ShardLayout& layout, UnitTransport& transport, backend::Backend* device = nullptr);

  // The ParamSource / GradSink protocol (param_io.h).
  const float* acquire(int unit);
  void release(int unit);
  void prefetch(int unit);
  float* grad_buffer(int unit);
  void push_grad(int unit);

  // What the buffers will hold in a training step (the memory plan's figure: the largest unit plus
  // the next largest per remaining buffer, weights and gradients), and what they hold now.
  static std::int64_t planned_floats(const ShardLayout& layout);
  std::int64_t allocated_floats() const;

  // Minibatch start: nothing may be held or in flight (the optimizer just rewrote the masters).
  void check_idle() const;
  // Minibatch end: waits for every push and every gather still in flight (e.g. a prefetch of a
  // unit the model never acquired), attributing the waits to the barrier.
  void drain();

  const CommWaits& waits() const { return waits_; }
  CommWaits& waits() { return waits_; }
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }

 private:
  struct Buffer {
    Tensor host;                       // host memory, or
    std::optional<backend::Buffer> on_device;  // the device backend's
    float* data = nullptr;
    std::int64_t capacity = 0;  // floats it holds (0: not allocated yet)
    int unit = -1;           // the unit held, arriving or pushed; -1: none
    bool held = false;       // weights: acquired, not released; gradients: handed out, not pushed
    bool in_flight = false;  // a transfer is started and not waited for
  };
  // Grows `b` (idle) to hold `floats`.
  void fit(Buffer& b, std::int64_t floats);
  // Of `candidates` (indices into `buffers`): the smallest that holds `floats`, else the largest;
  // a unit that is not large keeps off large buffers while another candidate will do.
  int best_fit(const std::vector<Buffer>& buffers, const std::vector<int>& candidates, std::int64_t floats) const;
  // Embedding-sized: more than half the largest unit.
  static bool is_large(std::int64_t floats, std::int64_t largest) { return 2 * floats > largest; }
  void zero(float* data, std::int64_t floats);
  int find_weights(int unit) const;
  int free_weights(int unit) const;
  int start_gather(int unit);
  // Waits for a buffer's transfer; when it blocks, the time counts as a gather or push wait (the
  // barrier while draining) and is traced.
  void wait(bool gather, int unit, int buffer);

  const ShardLayout& layout_;
  UnitTransport& transport_;
  backend::Backend* device_ = nullptr;  // null: host buffers
  std::vector<Buffer> weights_;
  std::vector<Buffer> grads_;
  CommWaits waits_;
  Tracer* tracer_ = nullptr;
  bool draining_ = false;
};

// A sharded comm: the protocol is the pool's, the comm derives from this and implements only its
// transport (the UnitTransport hooks) and the minibatch boundaries.
class ShardedComm : public Comm, protected UnitTransport {
 public:
  const float* acquire(int unit) final { return pool_.acquire(unit); }
  void release(int unit) final { pool_.release(unit); }
  void prefetch(int unit) final { pool_.prefetch(unit); }
  float* grad_buffer(int unit) final { return pool_.grad_buffer(unit); }
  void push_grad(int unit) final { pool_.push_grad(unit); }
  CommWaits waits() const final { return pool_.waits(); }
  void set_tracer(Tracer* tracer) final { pool_.set_tracer(tracer); }

 protected:
  // The pool only keeps the transport's address here; it calls it once the comm is built.
  explicit ShardedComm(const ShardLayout& layout, backend::Backend* device = nullptr) : pool_(layout, *this, device) {}
  UnitBufferPool pool_;
};

}  // namespace odc::distributed
