#pragma once
// Which CUDA runtime the cuDNN frontend loads (kernels/cuda_cudnn_attention.h), decided as a plain
// function so that it is tested without a GPU.
//
// In its dynamic-loading mode the frontend dlopens a libcudart of its own for the few runtime calls
// it makes: "libcudart.so.12" first, then "libcudart.so.13", unless CUDNN_FRONTEND_CUDART_LIB_NAME
// names one (cudnn_frontend_shim.h). Our programs link a CUDA 13 runtime; where a CUDA 12 runtime
// is on the library path too (PyTorch's wheels bring one), the frontend would load it beside ours:
// two runtimes in one process, each with its own view of streams and memory. So the program pins
// the variable to the runtime it has loaded before the frontend can load any.
#include <string>
#include <vector>

namespace odc::kernels {

struct CudartChoice {
  std::string name;               // what CUDNN_FRONTEND_CUDART_LIB_NAME holds (set by us, or the user's)
  std::string why;                // one line for the logs
  bool from_environment = false;  // the user's setting, kept as it was
};

// `user_value`: CUDNN_FRONTEND_CUDART_LIB_NAME as the environment has it (nullptr or empty: unset,
// as the frontend reads it); `loaded`: the paths of the libcudart objects this process has loaded,
// in load order; `cudart_version`: the CUDART_VERSION the program was built against (13000 for
// 13.0; 0 when unknown). In order: the user's value is kept; else the first loaded libcudart (its
// path: dlopen of a loaded path returns that very library); else "libcudart.so.<major>" of the
// version built against ("libcudart.so" when unknown).
CudartChoice choose_frontend_cudart(const char* user_value, const std::vector<std::string>& loaded,
                                    int cudart_version);

}  // namespace odc::kernels
