// The SPIR-V renderer: a linear program -> a SPIR-V module, emitted directly as binary words (no
// GLSL, no external compiler), for the VULKAN device.
//
//   std::string module = render_spirv("E_16", program, /*num_buffers=*/3, vars);  // bytes of the words
#pragma once
#include <string>
#include <vector>

#include "uop/uop.h"

namespace kiln {

// Each module carries an OpModuleProcessed "kiln.loop_iterations <n>": an upper bound of the loop
// iterations one invocation runs (from the loop bounds' value ranges), for drivers that cap them.
inline constexpr const char* kLoopIterationsNote = "kiln.loop_iterations ";

std::string render_spirv(const std::string& name, const std::vector<UOpPtr>& linear, size_t num_buffers,
                         const std::vector<UOpPtr>& vars);

}  // namespace kiln
