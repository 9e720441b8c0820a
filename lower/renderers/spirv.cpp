#include "lower/renderers/spirv.h"

#include "uop/error.h"

namespace kiln {

std::string render_spirv(const std::string& name, const std::vector<UOpPtr>&, size_t, const std::vector<UOpPtr>&) {
  throw Error(cat("render_spirv(", name, "): the SPIR-V renderer is not implemented yet"));
}

}  // namespace kiln
