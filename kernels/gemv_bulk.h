// The bulk-copy GEMV (kernels/gemv_bulk.cu, sm_90a machine code only): the
// M <= 16 path of kern::gemm() with the weights streamed through a
// shared-memory ring. kernels/gemm.cu validates the arguments and picks it.
#pragma once

#include <cuda_runtime.h>

#include "kernels/gemm_internal.cuh"
#include "kernels/kernels.h"

namespace qsp {
namespace kern {
namespace gemv_bulk {

// Whether this build has it and device `dev` runs it.
bool available(int dev);
// Whether format f has the tiled layout it streams (not the row-major F16).
bool supports(WFormat f);
// Launches it (M <= 16); cudaErrorNotSupported for a row-major format or
// where the build has no sm_90a code.
cudaError_t run(const KArgs& a, WFormat f, Epilogue ep, cudaStream_t stream);

}  // namespace gemv_bulk
}  // namespace kern
}  // namespace qsp
