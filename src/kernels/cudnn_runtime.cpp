#include "odc/kernels/cudnn_runtime.h"

#include <fmt/format.h>

namespace odc::kernels {

CudartChoice choose_frontend_cudart(const char* user_value, const std::vector<std::string>& loaded,
                                    int cudart_version) {
  CudartChoice c;
  if (user_value != nullptr && *user_value != '\0') {
    c.name = user_value;
    c.why = "CUDNN_FRONTEND_CUDART_LIB_NAME set in the environment, kept";
    c.from_environment = true;
    return c;
  }
  if (!loaded.empty()) {
    c.name = loaded.front();
    c.why = "the libcudart this process has loaded";
    if (loaded.size() > 1) {
      c.why += fmt::format(" (the first of {} loaded:", loaded.size());
      for (const std::string& path : loaded) c.why += " " + path;
      c.why += ")";
    }
    return c;
  }
  const int major = cudart_version / 1000;
  c.name = major > 0 ? fmt::format("libcudart.so.{}", major) : std::string("libcudart.so");
  c.why = major > 0 ? fmt::format("no libcudart loaded in this process: the runtime of CUDA {} built against", major)
                    : std::string("no libcudart loaded in this process and no CUDA version known");
  return c;
}

}  // namespace odc::kernels
