// Which libcudart the cuDNN frontend is pinned to (kernels/cudnn_runtime.h): the user's setting
// kept, else the runtime the process has loaded, else the runtime of the CUDA version built
// against; and, in a CUDA build, the pin itself in this process (which links the CUDA runtime):
// CUDNN_FRONTEND_CUDART_LIB_NAME names a library already loaded, so the frontend's dlopen of it
// adds no second runtime.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "odc/kernels/cudnn_runtime.h"

#if defined(ODC_HAVE_CUDA)
#include <dlfcn.h>

#include "odc/kernels/cuda_cudnn_attention.h"
#endif

using odc::kernels::choose_frontend_cudart;
using odc::kernels::CudartChoice;

TEST_CASE("cuDNN frontend's CUDA runtime: the user's CUDNN_FRONTEND_CUDART_LIB_NAME is kept", "[cudnn_runtime]") {
  const CudartChoice c = choose_frontend_cudart("libcudart.so.12", {"/usr/local/cuda/lib64/libcudart.so.13"}, 13000);
  CHECK(c.name == "libcudart.so.12");
  CHECK(c.from_environment);
  CHECK_THAT(c.why, Catch::Contains("set in the environment"));
}

TEST_CASE("cuDNN frontend's CUDA runtime: the libcudart the process loaded", "[cudnn_runtime]") {
  // Unset, or empty (the frontend reads an empty value as unset): the loaded runtime, by its path.
  for (const char* user : {static_cast<const char*>(nullptr), ""}) {
    const CudartChoice c = choose_frontend_cudart(user, {"/usr/local/cuda/lib64/libcudart.so.13"}, 13000);
    CHECK(c.name == "/usr/local/cuda/lib64/libcudart.so.13");
    CHECK_FALSE(c.from_environment);
    CHECK(c.why == "the libcudart this process has loaded");
  }
  // Two already (a library of ours pulled another): the first loaded, and the log says both.
  const CudartChoice two = choose_frontend_cudart(nullptr, {"/a/libcudart.so.13", "/b/libcudart.so.12"}, 13000);
  CHECK(two.name == "/a/libcudart.so.13");
  CHECK_THAT(two.why, Catch::Contains("the first of 2 loaded: /a/libcudart.so.13 /b/libcudart.so.12"));
}

TEST_CASE("cuDNN frontend's CUDA runtime: none loaded, the major version built against", "[cudnn_runtime]") {
  const CudartChoice c = choose_frontend_cudart(nullptr, {}, 13000);
  CHECK(c.name == "libcudart.so.13");
  CHECK_THAT(c.why, Catch::Contains("CUDA 13 built against"));
  CHECK(choose_frontend_cudart(nullptr, {}, 12080).name == "libcudart.so.12");
  CHECK(choose_frontend_cudart(nullptr, {}, 0).name == "libcudart.so");
}

#if defined(ODC_HAVE_CUDA)
TEST_CASE("cuDNN frontend's CUDA runtime: pinned in this process to a libcudart already loaded", "[cudnn_runtime]") {
  const char* before = std::getenv("CUDNN_FRONTEND_CUDART_LIB_NAME");
  const bool user_set = before != nullptr && *before != '\0';
  const std::string user_value = user_set ? before : "";
  const CudartChoice& c = odc::kernels::cuda::pin_frontend_cudart();
  const char* after = std::getenv("CUDNN_FRONTEND_CUDART_LIB_NAME");
  REQUIRE(after != nullptr);
  CHECK(c.name == after);
  CHECK(&odc::kernels::cuda::pin_frontend_cudart() == &c);  // settled once per process
  if (user_set) {
    CHECK(c.from_environment);
    CHECK(c.name == user_value);
  } else {
    // This test binary links the CUDA runtime: the pin is its path, and dlopen of it (the frontend's
    // call) finds that library loaded (RTLD_NOLOAD: nothing new is mapped).
    INFO("pinned: " << c.name << " (" << c.why << ")");
    CHECK(c.why.rfind("the libcudart this process has loaded", 0) == 0);
    void* same = dlopen(c.name.c_str(), RTLD_NOW | RTLD_NOLOAD);
    CHECK(same != nullptr);
    if (same != nullptr) dlclose(same);
  }
}
#endif
