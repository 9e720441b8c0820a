// Renderers for the C family (C for the CPU device now; OpenCL C and CUDA C share this base and
// differ only by the tables of spellings in CStyleLanguage).
//
//   std::string src = render_cstyle(c_language(), "E_16", program, /*num_buffers=*/3, vars);
//
// Every value-producing node becomes one typed local variable, constants and index arithmetic
// are inlined, and loops are plain for loops, so the device compiler sees simple code it can
// vectorize. Vector dtypes (lower/upcast.h) become the compiler's vector types: element-wise
// operators, lanes as v[i], loads and stores as unaligned copies.
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
  // Declares the vector type {name} of {count} {scalar}s, {bytes} in all, before the kernel.
  std::string vector_typedef;
  // Moves {bytes} bytes from {src} to {dst} with no alignment assumed: vector loads and stores
  // (a view or an offset is not aligned to the vector's size).
  std::string unaligned_copy;
  std::string float_suffix = "f"; // float32 literals
  bool fmath_suffix = true;       // sqrtf/exp2f... for float32
  // Put at the start of a block holding a float accumulator update, to let the compiler reassociate
  // that one addition (and so vectorize the reduction); empty where there is no such thing.
  std::string reassociate;
};

const CStyleLanguage& c_language();  // the CPU device's ABI (devices/cpu.h)
const CStyleLanguage& opencl_language();  // OpenCL C 1.2 (devices/opencl.cpp)
const CStyleLanguage& cuda_language();    // CUDA C for NVRTC (devices/cuda.cpp)

std::string render_cstyle(const CStyleLanguage& lang, const std::string& name, const std::vector<UOpPtr>& linear,
                          size_t num_buffers, const std::vector<UOpPtr>& vars);

// The C spelling of a scalar dtype ("float", "uint16_t" for the bits of float16), or the name a
// vector dtype is declared under ("float32x16").
std::string c_type(DType dtype);

}  // namespace kiln
