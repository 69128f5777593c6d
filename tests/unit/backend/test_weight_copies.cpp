// WeightCopies (backend/weight_copies.h), the compute copies a backend keeps of fp32 units: kept
// copies are reused until the units change, and forget() (Backend::forget_weight_copies) keeps
// copies keyed by a freed weight snapshot's pointers from piling up beside the masters' — the
// online RL loop's pattern: masters, a snapshot sampled from, the masters again, every iteration.
#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>

#include "odc/backend/cpu_backend.h"
#include "odc/backend/weight_copies.h"
#include "odc/core/dtype.h"

using namespace odc;

namespace {

struct Storage {
  int id = 0;
};

// A WeightCopies whose storages are counted as they are made.
struct Counted {
  backend::WeightCopies<Storage> copies;
  int made = 0;
  // Acquires and releases each unit once, as a forward pass does; returns how many needed filling.
  int pass(const std::vector<const float*>& units) {
    int filled = 0;
    for (const float* u : units) {
      auto [storage, fill] = copies.acquire(u, [&] { return Storage{++made}; });
      (void)storage;
      filled += fill ? 1 : 0;
      copies.release(u);
    }
    return filled;
  }
};

std::vector<const float*> pointers(const std::vector<float>& block) {
  std::vector<const float*> out;
  for (const float& x : block) out.push_back(&x);
  return out;
}

}  // namespace

TEST_CASE("weight copies: kept copies are reused until the units change", "[backend][weight_copies]") {
  const std::vector<float> masters(5);
  Counted c;
  c.copies.set_keep(true);
  CHECK(c.pass(pointers(masters)) == 5);
  CHECK(c.pass(pointers(masters)) == 0);  // kept, not redone
  c.copies.invalidate();                  // an optimizer step
  CHECK(c.pass(pointers(masters)) == 5);  // redone, in the same storages
  CHECK(c.made == 5);
  CHECK(c.copies.kept() == 5);
}

TEST_CASE("weight copies: a snapshot's copies reuse the masters' storage when forgotten around it",
          "[backend][weight_copies]") {
  const std::vector<float> masters(5);
  // Each iteration's snapshot at new addresses (an allocator need not reuse a freed snapshot's).
  const std::vector<std::vector<float>> snapshots(4, std::vector<float>(5));
  Counted c;
  c.copies.set_keep(true);
  c.pass(pointers(masters));
  for (const auto& snapshot : snapshots) {
    c.copies.forget();
    CHECK(c.pass(pointers(snapshot)) == 5);
    CHECK(c.pass(pointers(snapshot)) == 0);  // sampling reuses the snapshot's copies
    c.copies.forget();
    CHECK(c.pass(pointers(masters)) == 5);  // the masters' copies are redone after the snapshot
  }
  // One model's storages in all, however many snapshots came and went.
  CHECK(c.made == 5);
  CHECK(c.copies.kept() + c.copies.spares() == 5);
}

TEST_CASE("weight copies: invalidation alone would keep every snapshot's copies", "[backend][weight_copies]") {
  // What forget() prevents: marking copies stale keeps them, keyed by pointers nobody uses again.
  const std::vector<float> masters(5);
  const std::vector<std::vector<float>> snapshots(3, std::vector<float>(5));
  Counted c;
  c.copies.set_keep(true);
  c.pass(pointers(masters));
  for (const auto& snapshot : snapshots) {
    c.pass(pointers(snapshot));
    c.copies.invalidate();
  }
  CHECK(c.made == 20);
  CHECK(c.copies.kept() == 20);
}

TEST_CASE("weight copies: live copies stay the caller's through forget", "[backend][weight_copies]") {
  const std::vector<float> units(2);
  Counted c;
  c.copies.set_keep(true);
  auto first = c.copies.acquire(&units[0], [&] { return Storage{++c.made}; });
  CHECK(first.second);
  c.copies.forget();
  auto again = c.copies.acquire(&units[0], [&] { return Storage{++c.made}; });
  CHECK_FALSE(again.second);  // still live: the same copy, not refilled
  CHECK(again.first.id == first.first.id);
  c.copies.release(&units[0]);
  CHECK(c.copies.live() == 0);
  CHECK(c.copies.kept() == 1);
}

TEST_CASE("weight copies: the CPU bf16 backend computes on a snapshot's values after forget",
          "[backend][weight_copies]") {
  // A pointer reused for other weights after forget_weight_copies() must not serve the old copy.
  backend::CpuBackend b(1, DType::bf16);
  b.keep_weight_copies(true);
  std::vector<float> unit = {1.0f, 2.0f, 3.0f};
  std::vector<float> read(3);
  const auto copy_of = [&] {
    b.download(b.weights(unit.data(), 3), read);
    b.release_weights(unit.data());
    return read;
  };
  CHECK(copy_of() == std::vector<float>{1.0f, 2.0f, 3.0f});
  unit = {4.0f, 5.0f, 6.0f};  // the same address now holds a snapshot's weights
  b.forget_weight_copies();
  CHECK(copy_of() == std::vector<float>{4.0f, 5.0f, 6.0f});
  CHECK(b.live_weight_copies() == 0);
}
