// The LLVM IR renderer: a linear program -> an LLVM IR module (text, LLVM 14's typed pointers), for
// the CPU device's in-process compiler (devices/llvm_compiler.cpp), which parses, optimizes (the O2
// pipeline, as clang -O2) and compiles it with libLLVM in the process: no compiler process, no file.
//
//   std::string ir = render_llvm_ir("E_16", program, /*num_buffers=*/3, vars);
//
// The function has the CPU kernel ABI of devices/cpu.h, as the C renderer's does:
//
//   define void @NAME(i8** %bufs, i64* %vars, i64 %gid_begin, i64 %gid_end)
//
// and means what the C renderer's source means, op for op, with what clang's flags give the C:
// - every float multiply and add carries `contract` (-ffp-contract=fast: a multiply feeding an add is one
//   FMA), and the one accumulator update of a single-accumulator reduction `reassoc` too (C: the
//   KILN_REASSOC pragma), so the loop vectorizer may reorder that sum and nothing else;
// - integers have no nsw/nuw (-fwrapv); float->int casts saturate with NaN giving 0 (llvm.fpto*i.sat,
//   the C renderer's compare chain); exp2 and log2 are the library's (the CPU device lowers them to ALU
//   ops first: lower/transcendental.h);
// - loops are `for (r = 0; r < end; r++)` in blocks with a phi; an accumulator is an alloca that the O2
//   pipeline promotes to registers, read where its value is used (as a C variable is);
// - vectors are LLVM vectors (a bool vector is <N x i1>); loads and stores of them assume only the
//   element's alignment, as the C renderer's memcpy does; bool is one byte in memory;
// - float16 and bfloat16 are their 16 bits (i16) and convert through float32 on CAST, rounding to
//   nearest even, as in the C family.
#pragma once
#include <string>
#include <vector>

#include "uop/uop.h"

namespace kiln {

std::string render_llvm_ir(const std::string& name, const std::vector<UOpPtr>& linear, size_t num_buffers,
                           const std::vector<UOpPtr>& vars);

}  // namespace kiln
