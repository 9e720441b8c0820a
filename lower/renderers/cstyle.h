// Renderers for the C family (C for the CPU device now; OpenCL C and CUDA C share this base and
// differ only by the tables of spellings in CStyleLanguage).
//
//   std::string src = render_cstyle(c_language(), "E_16", program, /*num_buffers=*/3, vars);
//
// Every value-producing node becomes one typed local variable, constants and index arithmetic
// are inlined, and loops are plain for loops, so the device compiler sees simple code it can
// vectorize.
#pragma once
#include <string>
#include <vector>

#include "uop/uop.h"

namespace kiln {

struct CStyleLanguage {
  std::string name;               // "C"
  std::string preamble;           // includes and helpers at the top of the file
  std::string kernel_open;        // the function header up to '{'; {name} is the kernel name
  std::string kernel_close;       // closes what kernel_open opened, after the body
  std::string buffer_decl;        // declares data<slot>: {type} and {slot} are filled in
  std::string var_decl;           // declares var<slot> from the launch's vars: {slot} is filled in
  std::string float_suffix = "f"; // float32 literals
  bool fmath_suffix = true;       // sqrtf/exp2f... for float32
  // Put at the start of a block holding a float accumulator update, to let the compiler reassociate
  // that one addition (and so vectorize the reduction); empty where there is no such thing.
  std::string reassociate;
};

const CStyleLanguage& c_language();  // the CPU device's ABI (devices/cpu.h)

std::string render_cstyle(const CStyleLanguage& lang, const std::string& name, const std::vector<UOpPtr>& linear,
                          size_t num_buffers, const std::vector<UOpPtr>& vars);

std::string c_type(DType dtype);

}  // namespace kiln
