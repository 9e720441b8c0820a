// The SPIR-V renderer: a linear program -> a SPIR-V module, emitted directly as binary words (no
// GLSL, no external compiler), for the VULKAN device.
//
//   std::string module = render_spirv("E_16", program, /*num_buffers=*/3, vars);  // bytes of the words
#pragma once
#include <string>
#include <vector>

#include "uop/uop.h"

namespace kiln {

std::string render_spirv(const std::string& name, const std::vector<UOpPtr>& linear, size_t num_buffers,
                         const std::vector<UOpPtr>& vars);

}  // namespace kiln
