// The CUDA backend's uploads (Backend::upload) over the emulated runtime: host data goes through
// the page-locked staging arenas (cuda_backend_impl.h, PinnedStaging), which fill in turn, grow
// for an upload larger than an arena, and must hand every upload its own bytes: each upload is
// read back and compared, after many more have refilled the arenas.
#include <catch2/catch.hpp>

#include <cstdint>
#include <span>
#include <vector>

#include "odc/backend/cuda_backend.h"
#include "odc/kernels/cuda_device.h"

using namespace odc;

TEST_CASE("emu CudaBackend: uploads through the pinned arenas keep their bytes, across refills and growth",
          "[emu][backend]") {
  backend::CudaBackend b(0);
  // Sizes from a few bytes to 6 MiB of ids (an arena starts at 4 MiB): 60 uploads refill both
  // arenas several times; one of them forces an arena to grow.
  std::vector<std::vector<std::int32_t>> ids;
  std::vector<std::vector<float>> weights;
  std::vector<backend::Buffer> id_targets, weight_targets;
  std::vector<backend::ConstView> id_views, weight_views;
  for (int i = 0; i < 60; ++i) {
    const std::size_t n = i == 17 ? (std::size_t{6} << 20) / 4 : static_cast<std::size_t>(1 + (i * 7919) % 200000);
    ids.emplace_back(n);
    for (std::size_t j = 0; j < n; ++j) ids.back()[j] = static_cast<std::int32_t>(i * 1000003 + j);
    weights.emplace_back(n % 5000 + 1);
    for (std::size_t j = 0; j < weights.back().size(); ++j) weights.back()[j] = 0.5f * static_cast<float>(i) + 1e-3f * j;
    id_targets.emplace_back(b.memory(), DType::i32);
    weight_targets.emplace_back(b.memory(), DType::f32);
  }
  for (int i = 0; i < 60; ++i) {
    id_views.push_back(b.upload(std::span<const std::int32_t>(ids[i]), id_targets[i]));
    weight_views.push_back(b.upload(std::span<const float>(weights[i]), weight_targets[i]));
  }
  // The host vectors may change once upload returns: the staged copy is what travels.
  for (auto& v : ids) v.assign(v.size(), -1);
  b.synchronize();
  for (int i = 0; i < 60; ++i) {
    CAPTURE(i);
    std::vector<float> back(weights[i].size());
    b.download(weight_views[i], back);
    CHECK(back == weights[i]);
    std::vector<std::int32_t> id_back(static_cast<std::size_t>(id_views[i].count));
    std::vector<std::int32_t> want(id_back.size());
    for (std::size_t j = 0; j < want.size(); ++j) want[j] = static_cast<std::int32_t>(i * 1000003 + j);
    kernels::cuda::copy_to_host(id_back.data(), id_views[i].data, id_back.size() * 4);
    CHECK(id_back == want);
  }
}
