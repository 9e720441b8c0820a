// A SPIR-V module under construction, as binary words: result ids, the module's sections in the
// order the specification requires, types and constants made once each, global variables (listed
// in the entry point's interface, as SPIR-V 1.4+ wants), and functions built one instruction at a time.
//
//   SpirvModule m;
//   Id f32 = m.type_float(32);
//   Id sum = m.op(spv::Op::OpFAdd, f32, {a, b});          // appended to the current block
//   std::vector<uint32_t> words = m.finish("E_16", {1, 1, 1});
//
// It knows SPIR-V's encoding and layout rules, nothing about kiln's ops (spirv.cpp maps those).
#pragma once
#include <spirv/unified1/GLSL.std.450.h>
#include <spirv/unified1/spirv.hpp11>

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace kiln {

class SpirvModule {
 public:
  using Id = uint32_t;
  using Words = std::vector<uint32_t>;

  // The version every module declares: 1.5 (Vulkan 1.2), where 8- and 16-bit storage are core.
  static constexpr uint32_t kVersion = 0x00010500;

  SpirvModule();

  Id fresh() { return next_id_++; }
  void capability(spv::Capability c) { capabilities_.insert(static_cast<uint32_t>(c)); }
  bool has_capability(spv::Capability c) const { return capabilities_.count(static_cast<uint32_t>(c)) > 0; }
  // An OpExecutionMode of the entry point besides LocalSize (which finish() writes).
  void execution_mode(spv::ExecutionMode mode, const Words& literals) { modes_.push_back({static_cast<uint32_t>(mode), literals}); }

  // Types, each declared once. Integer and float types add the capabilities their width needs.
  Id type_void();
  Id type_bool();
  Id type_int(int width, bool is_signed);
  Id type_float(int width);
  Id type_vector(Id element, int count);
  Id type_array(Id element, Id length_constant);   // no layout: Workgroup and Function storage
  Id type_runtime_array(Id element, int stride);   // decorated ArrayStride, for storage buffers
  Id type_block(const std::vector<Id>& members, const std::vector<int>& offsets);  // a Block struct
  Id type_struct(const std::vector<Id>& members);  // a plain struct, e.g. the result of OpUMulExtended
  Id type_pointer(spv::StorageClass storage, Id pointee);
  Id type_function(Id result, const std::vector<Id>& params);

  // Constants, each declared once. `bits` holds the value's bits (sign-extended for small signed ints).
  Id constant(Id type, uint64_t bits);
  Id constant_bool(bool value);
  Id constant_composite(Id type, const std::vector<Id>& elements);  // e.g. an array of constants
  // The bit width and signedness of an integer or float type made here (for constants and conversions).
  int width_of(Id type) const;

  // A global variable, optionally with an initializer (a constant); it joins the entry point's interface.
  Id global_variable(Id pointer_type, spv::StorageClass storage, Id initializer = 0);
  // A Function-storage variable of the entry function (declared at the top of its first block).
  Id local_variable(Id pointer_type);

  void decorate(Id target, spv::Decoration d, const Words& operands = {});
  void member_decorate(Id type, uint32_t member, spv::Decoration d, const Words& operands = {});
  void name(Id target, const std::string& text);
  void module_processed(const std::string& text);  // OpModuleProcessed: a note on how the module was made

  // Instructions, appended to the function being built.
  // With a result: returns its id (`result`, when the id was taken earlier with fresh(), e.g. for a phi).
  Id op(spv::Op opcode, Id result_type, const Words& operands, Id result = 0);
  void op_void(spv::Op opcode, const Words& operands);           // without one
  Id glsl(GLSLstd450 fn, Id result_type, const Words& args);     // GLSL.std.450 extended instruction
  void label(Id block);                                           // starts a block
  Id current_block() const { return current_block_; }

  // Functions: the entry function first (begin_function(0, ...) with a void result), helpers at any
  // time, also while another function is being built (the builder keeps a stack).
  Id begin_function(Id result_type, const std::vector<Id>& params, std::vector<Id>* param_ids = nullptr);
  void end_function();

  // The finished module: header, sections, the entry function and the helpers.
  Words finish(const std::string& entry_name, Id entry, std::array<uint32_t, 3> local_size);

 private:
  struct Function {
    Words head;     // OpFunction, parameters, the first OpLabel
    Words locals;   // OpVariable Function (entry function only)
    Words body;
    Id block = 0;
  };
  static void emit(Words& out, spv::Op opcode, const Words& operands);
  static Words string_words(const std::string& text);
  Id declare_type(spv::Op opcode, const Words& operands);

  Id next_id_ = 1;
  std::set<uint32_t> capabilities_;
  Id glsl_import_ = 0;
  Words debug_, processed_, annotations_, globals_;  // globals_: types, constants and global variables in order
  std::vector<Id> interface_;
  std::vector<std::pair<uint32_t, Words>> modes_;
  std::map<Words, Id> types_, constants_, composites_;
  std::map<Id, std::pair<int, bool>> scalar_types_;  // width, is_float
  std::vector<Function> stack_;                       // functions being built, innermost last
  std::vector<Words> finished_;                       // finished functions, entry first
  Id current_block_ = 0;
};

}  // namespace kiln
