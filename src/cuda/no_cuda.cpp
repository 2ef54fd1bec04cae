// Built when QSP_CUDA is OFF: the CUDA backend reports that it is absent.
#include "common/error.h"
#include "engine/backend.h"

namespace qsp {

std::unique_ptr<Backend> make_cuda_backend(const ModelConfig&, const Partition&, const std::vector<int32_t>&) {
  throw Error(QSP_ERR_NO_DEVICE, "qsp was built without CUDA support (QSP_CUDA=OFF)");
}

int cuda_device_count() { return 0; }

bool cuda_built() { return false; }

}  // namespace qsp
