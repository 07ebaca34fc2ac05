// LaunchKernel: a kernel launch on `stream` that carries the programmatic-dependent-launch
// attribute when this thread asks for it (launch.h). Only for kernels that call PdlBegin()
// before their first access to memory an earlier kernel wrote or may still read
// (device_utils.cuh). Included only by .cu files, outside the host emulation build.
#ifndef WEFT_KERNELS_CUDA_LAUNCH_CUH_
#define WEFT_KERNELS_CUDA_LAUNCH_CUH_

#include <cuda_runtime.h>

#include "kernels/cuda/launch.h"

namespace weft::kernels::cuda {

template <typename... Params, typename... Args>
cudaError_t LaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                         cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = ProgrammaticLaunch() ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

}  // namespace weft::kernels::cuda

#endif  // WEFT_KERNELS_CUDA_LAUNCH_CUH_
