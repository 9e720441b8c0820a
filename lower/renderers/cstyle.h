// Renderers for the C family: C for the CPU device, OpenCL C and CUDA C for the GPU devices. One
// renderer; the languages differ only by the tables of spellings in CStyleLanguage.
//
//   std::string src = render_cstyle(c_language(), "E_16", program, /*num_buffers=*/3, vars);
//   std::string cl = render_cstyle(opencl_language(), "E_16", program, 3, vars);
//
// Every value-producing node becomes one typed local variable, constants and index arithmetic
// are inlined, and loops are plain for loops, so the device compiler sees simple code it can
// vectorize. Vector dtypes (lower/upcast.h) become the compiler's vector types: element-wise
// operators, lanes as v[i], loads and stores as unaligned copies (C only: the GPU languages have
// no vector_typedef, and their devices say so with DeviceSpec::vector_bytes = 0).
//
// float16 and bfloat16 are stored as their 16 bits and computed in float32 in every language: CAST
// converts through helpers (kiln_h2f, kiln_f2h, kiln_bf2f, kiln_f2bf) rendered into the preamble from
// one template with each language's spellings of the float/uint bit moves, rounding to nearest even.
//
// The GPU languages render the launch indices of lower/lower.h: SPECIAL "gidx<d>" as the workgroup id
// and "lidx<d>" as the id inside the workgroup, DEFINE_LOCAL as a workgroup-shared array declared at the
// top of the kernel, BARRIER as a workgroup barrier. Buffers and vars are kernel parameters there:
// buffer i is parameter i, var j is parameter num_buffers + j (an int64 value).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "uop/uop.h"

namespace kiln {

struct CStyleLanguage {
  std::string name;               // "C"
  std::string preamble;           // includes and helpers at the top of the file
  // The function header up to '{': {name} is the kernel name, {params} the parameters (below).
  std::string kernel_open;
  std::string kernel_close;       // closes what kernel_open opened, after the body
  // Kernel parameters, joined with ", " into {params}: buffer <slot> ({type} is its element type),
  // then var <slot>. Empty where the kernel reads them from its arguments some other way (C: bufs[]).
  std::string buffer_param;
  std::string var_param;
  std::string buffer_decl;        // declares data<slot> in the body: {type} and {slot} are filled in
  std::string var_decl;           // declares var<slot> in the body: {slot} is filled in
  // CPU-style launch: the loop over the device's chunk of gidx0 (SPECIAL "gidx0" is its variable).
  // Empty: GPU-style, where each SPECIAL is an id read from the launch (group_id, local_id).
  std::string gid_loop_open;
  // The workgroup id and the work-item id in dimension {dim} (0..2) or {xyz} ("x", "y", "z").
  std::string group_id;
  std::string local_id;
  // A workgroup-shared array {name} of {count} {type}s, declared at the top of the kernel body.
  std::string local_decl;
  std::string barrier;            // every work-item of the workgroup waits; shared writes become visible
  // Declares the vector type {name} of {count} {scalar}s, {bytes} in all, before the kernel; empty:
  // the language has no vector types here.
  std::string vector_typedef;
  // Moves {bytes} bytes from {src} to {dst} with no alignment assumed: vector loads and stores
  // (a view or an offset is not aligned to the vector's size).
  std::string unaligned_copy;
  // A statement declaring {v} of type {type} with the bits of {x} (of type {in_type}, same size).
  std::string bitcast;
  // Names of the scalar types, indexed by ScalarType (empty: c_type's name). Float16 and BFloat16
  // name their 16-bit storage. bool_storage: the element type of a bool buffer ("": the bool name).
  std::vector<std::string> type_names;
  std::string bool_storage;
  std::string int64_suffix = "ll", uint64_suffix = "ull";  // 64-bit integer literals
  std::string float_suffix = "f"; // float32 literals
  bool fmath_suffix = true;       // sqrtf/exp2f... for float32: {fm} below
  // How each ALU op is spelled: {0}, {1}, {2} are its operands' names; {f} is float_suffix for a float32
  // result ("" otherwise), {fm} "f" for a float32 math function where fmath_suffix. float_alu overrides
  // alu for float operands: MAX and MIN propagate NaN (uop/ops.h), a NaN on either side wins. Vector MAX,
  // MIN and WHERE are selects the renderer builds; CAST is code (narrow floats, saturating float->int).
  std::vector<std::pair<Op, std::string>> alu = {
      {Op::NEG, "(-{0})"},         {Op::RECIP, "(1.0{f}/{0})"},     {Op::SQRT, "sqrt{fm}({0})"},
      {Op::EXP2, "exp2{fm}({0})"}, {Op::LOG2, "log2{fm}({0})"},      {Op::SIN, "sin{fm}({0})"},
      {Op::TRUNC, "trunc{fm}({0})"}, {Op::POW, "pow{fm}({0}, {1})"}, {Op::ADD, "({0}+{1})"},
      {Op::SUB, "({0}-{1})"},      {Op::MUL, "({0}*{1})"},          {Op::FDIV, "({0}/{1})"},
      {Op::IDIV, "({0}/{1})"},     {Op::MOD, "({0}%{1})"},          {Op::MAX, "(({0}>{1})?{0}:{1})"},
      {Op::MIN, "(({0}<{1})?{0}:{1})"}, {Op::CMPLT, "({0}<{1})"},   {Op::CMPNE, "({0}!={1})"},
      {Op::CMPEQ, "({0}=={1})"},   {Op::AND, "({0}&{1})"},          {Op::OR, "({0}|{1})"},
      {Op::XOR, "({0}^{1})"},      {Op::SHL, "({0}<<{1})"},         {Op::SHR, "({0}>>{1})"},
      {Op::WHERE, "({0}?{1}:{2})"}, {Op::MULACC, "(({0}*{1})+{2})"}};
  std::vector<std::pair<Op, std::string>> float_alu = {{Op::MAX, "(({0}!={0}||{0}>{1})?{0}:{1})"},
                                                       {Op::MIN, "(({0}!={0}||{0}<{1})?{0}:{1})"}};
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
