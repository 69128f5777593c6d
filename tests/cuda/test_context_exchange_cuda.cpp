// The context exchange on the GPU (GPU only: the runner skips without a device): 2 and 3 ranks as
// threads of this process, each with its own CudaBackend on GPU 0, rows in device memory, the
// exchange over CUDA IPC peer memory (peers of one process share pointers; across processes the
// same code opens CUDA IPC handles). The unit tests' byte checks run through an adapter that puts
// each member's rows on the device and reads what arrived back.
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "odc/backend/cuda_backend.h"
#include "odc/distributed/transport/context/context_exchange.h"
#include "unit/distributed/transport/context/context_exchange_checks.h"
#include "unit/rank_threads.h"

using namespace odc;

namespace {

// Host rows in, host rows out, the exchange itself between device buffers.
class OnDevice final : public model::ContextExchange {
 public:
  OnDevice(backend::Backend& gpu, model::ContextExchange& inner)
      : gpu_(gpu), inner_(inner), mine_(gpu.memory(), DType::f32), into_(gpu.memory(), DType::f32),
        before_(gpu.memory(), DType::f32) {}
  void exchange(const model::ContextSplit& split, std::span<const model::ExchangePiece> pieces, const void* mine,
                std::int64_t mine_bytes, void* into, std::int64_t into_bytes, std::string_view what) override {
    REQUIRE(mine_bytes % 4 == 0);
    REQUIRE(into_bytes % 4 == 0);
    std::vector<float> host(static_cast<std::size_t>(mine_bytes / 4));
    if (mine_bytes > 0) std::memcpy(host.data(), mine, static_cast<std::size_t>(mine_bytes));
    const backend::ConstView m = gpu_.upload(host, mine_);
    std::vector<float> out(static_cast<std::size_t>(into_bytes / 4));
    if (into_bytes > 0) std::memcpy(out.data(), into, static_cast<std::size_t>(into_bytes));
    const backend::View target = into_.get(into_bytes / 4);
    gpu_.copy(gpu_.upload(out, before_), target);  // bytes no piece writes keep their values
    inner_.exchange(split, pieces, m.data, mine_bytes, target.data, into_bytes, what);
    gpu_.download(target, out);  // on the compute stream: after the exchange's copies
    if (into_bytes > 0) std::memcpy(into, out.data(), static_cast<std::size_t>(into_bytes));
  }

 private:
  backend::Backend& gpu_;
  model::ContextExchange& inner_;
  backend::Buffer mine_, into_, before_;
};

}  // namespace

TEST_CASE("context exchange on the GPU over CUDA IPC: every byte", "[cuda][context]") {
  for (const int world : {2, 3}) {
    std::vector<std::string> mismatches(static_cast<std::size_t>(world));
    std::vector<std::string> kinds(static_cast<std::size_t>(world));
    const auto errors = test::on_every_rank(world, [&](distributed::HostGroup& group) {
      const int r = group.rank();
      backend::CudaBackend gpu(0);
      distributed::ContextExchangeOptions options;
      options.timeout_s = 60.0;
      options.max_exposed_bytes = 1 << 20;
      auto exchange = distributed::make_context_exchange(group, &gpu, options);
      kinds[static_cast<std::size_t>(r)] = std::string(exchange->name());
      OnDevice device(gpu, *exchange);
      std::vector<int> all;
      for (int q = world - 1; q >= 0; --q) all.push_back(q);
      for (int round = 0; round < 10 && mismatches[static_cast<std::size_t>(r)].empty(); ++round) {
        mismatches[static_cast<std::size_t>(r)] = test::check_context_exchange(
            device, test::split_of(all, r, {1, 5, 100 + round, 3}, 10 + round), 4 * (1 + round % 4), 20 + round);
      }
      group.barrier("the GPU context exchanges done");  // threads read each other's memory
    });
    for (int r = 0; r < world; ++r) {
      const auto i = static_cast<std::size_t>(r);
      INFO("rank " << r << " of " << world << ": " << errors[i] << mismatches[i]);
      CHECK(errors[i].empty());
      CHECK(kinds[i] == "peer memory");
      CHECK(mismatches[i].empty());
    }
  }
}
