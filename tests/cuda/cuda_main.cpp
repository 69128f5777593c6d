// Runner of the CUDA tests: they need a GPU, so main() exits 77 (ctest SKIP_RETURN_CODE) when no
// CUDA device is visible and CI without a GPU reports them as skipped.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "odc/kernels/cuda_cast.h"
#include "odc/kernels/cuda_device.h"

namespace cu = odc::kernels::cuda;

int main(int argc, char** argv) {
  std::string why;
  const int devices = cu::device_count(&why);
  if (devices == 0) {
    std::printf("SKIP: no CUDA device visible (%s)\n", why.empty() ? "none" : why.c_str());
    return 77;
  }
  std::printf("[cuda] %d device(s) visible\n", devices);
  return Catch::Session().run(argc, argv);
}
