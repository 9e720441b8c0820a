// The CUDA device: not written yet. Opening it reports that, so it is listed as unavailable.
#include <memory>

#include "devices/device.h"

namespace kiln {

std::unique_ptr<Device> make_cuda_device() {
  throw Error("the CUDA device is not implemented yet in this build of kiln");
}

}  // namespace kiln
