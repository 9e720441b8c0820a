#include "lower/renderers/spirv_module.h"

#include "uop/error.h"

namespace kiln {

using SOp = spv::Op;  // SPIR-V opcodes (SOp::OpFAdd); kiln's ops stay kiln::Op

SpirvModule::SpirvModule() {
  capability(spv::Capability::Shader);
  glsl_import_ = fresh();
}

void SpirvModule::emit(Words& out, spv::Op opcode, const Words& operands) {
  out.push_back(static_cast<uint32_t>(operands.size() + 1) << 16 | static_cast<uint32_t>(opcode));
  out.insert(out.end(), operands.begin(), operands.end());
}

// A literal string: UTF-8 bytes, nul-terminated, padded to whole words, little-endian in each word.
SpirvModule::Words SpirvModule::string_words(const std::string& text) {
  Words words((text.size() + 4) / 4, 0);
  for (size_t i = 0; i < text.size(); ++i) words[i / 4] |= uint32_t{static_cast<unsigned char>(text[i])} << (8 * (i % 4));
  return words;
}

SpirvModule::Id SpirvModule::declare_type(spv::Op opcode, const Words& operands) {
  Words key{static_cast<uint32_t>(opcode)};
  key.insert(key.end(), operands.begin(), operands.end());
  auto [it, added] = types_.emplace(key, 0);
  if (!added) return it->second;
  it->second = fresh();
  Words with_result{it->second};
  with_result.insert(with_result.end(), operands.begin(), operands.end());
  emit(globals_, opcode, with_result);
  return it->second;
}

SpirvModule::Id SpirvModule::type_void() { return declare_type(SOp::OpTypeVoid, {}); }
SpirvModule::Id SpirvModule::type_bool() { return declare_type(SOp::OpTypeBool, {}); }

SpirvModule::Id SpirvModule::type_int(int width, bool is_signed) {
  if (width == 8) capability(spv::Capability::Int8);
  if (width == 16) capability(spv::Capability::Int16);
  if (width == 64) capability(spv::Capability::Int64);
  Id t = declare_type(SOp::OpTypeInt, {static_cast<uint32_t>(width), is_signed ? 1u : 0u});
  scalar_types_[t] = {width, false};
  return t;
}

SpirvModule::Id SpirvModule::type_float(int width) {
  KILN_ASSERT(width == 32 || width == 64, "float registers are 32 or 64 bits (narrow floats are held as bits)");
  if (width == 64) capability(spv::Capability::Float64);
  Id t = declare_type(SOp::OpTypeFloat, {static_cast<uint32_t>(width)});
  scalar_types_[t] = {width, true};
  return t;
}

SpirvModule::Id SpirvModule::type_vector(Id element, int count) {
  return declare_type(SOp::OpTypeVector, {element, static_cast<uint32_t>(count)});
}

SpirvModule::Id SpirvModule::type_array(Id element, Id length_constant) {
  return declare_type(SOp::OpTypeArray, {element, length_constant});
}

SpirvModule::Id SpirvModule::type_runtime_array(Id element, int stride) {
  size_t before = types_.size();
  Id t = declare_type(SOp::OpTypeRuntimeArray, {element});
  if (types_.size() != before) decorate(t, spv::Decoration::ArrayStride, {static_cast<uint32_t>(stride)});
  return t;
}

SpirvModule::Id SpirvModule::type_block(const std::vector<Id>& members, const std::vector<int>& offsets) {
  // The layout is part of the type: the key holds the members, then each offset with the top bit set.
  Words key{static_cast<uint32_t>(SOp::OpTypeStruct)};
  key.insert(key.end(), members.begin(), members.end());
  for (int offset : offsets) key.push_back(0x80000000u | static_cast<uint32_t>(offset));
  auto [it, added] = types_.emplace(key, 0);
  if (!added) return it->second;
  Id t = it->second = fresh();
  Words operands{t};
  operands.insert(operands.end(), members.begin(), members.end());
  emit(globals_, SOp::OpTypeStruct, operands);
  decorate(t, spv::Decoration::Block);
  for (size_t i = 0; i < members.size(); ++i)
    member_decorate(t, static_cast<uint32_t>(i), spv::Decoration::Offset, {static_cast<uint32_t>(offsets[i])});
  return t;
}

SpirvModule::Id SpirvModule::type_struct(const std::vector<Id>& members) {
  return declare_type(SOp::OpTypeStruct, members);  // no Offset decorations, so never the key of a Block
}

SpirvModule::Id SpirvModule::type_pointer(spv::StorageClass storage, Id pointee) {
  return declare_type(SOp::OpTypePointer, {static_cast<uint32_t>(storage), pointee});
}

SpirvModule::Id SpirvModule::type_function(Id result, const std::vector<Id>& params) {
  Words operands{result};
  operands.insert(operands.end(), params.begin(), params.end());
  return declare_type(SOp::OpTypeFunction, operands);
}

int SpirvModule::width_of(Id type) const {
  auto it = scalar_types_.find(type);
  KILN_ASSERT(it != scalar_types_.end(), "width_of() is asked about scalar int and float types made by type_int/type_float");
  return it->second.first;
}

SpirvModule::Id SpirvModule::constant(Id type, uint64_t bits) {
  Words operands{type, static_cast<uint32_t>(bits)};
  if (width_of(type) == 64) operands.push_back(static_cast<uint32_t>(bits >> 32));  // low-order word first
  auto [it, added] = constants_.emplace(operands, 0);
  if (!added) return it->second;
  it->second = fresh();
  Words with_result{type, it->second};
  with_result.insert(with_result.end(), operands.begin() + 1, operands.end());
  emit(globals_, SOp::OpConstant, with_result);
  return it->second;
}

SpirvModule::Id SpirvModule::constant_bool(bool value) {
  Words key{type_bool(), value ? 1u : 0u};  // no OpConstant has the bool type, so keys do not collide
  auto [it, added] = constants_.emplace(key, 0);
  if (!added) return it->second;
  it->second = fresh();
  emit(globals_, value ? SOp::OpConstantTrue : SOp::OpConstantFalse, {type_bool(), it->second});
  return it->second;
}

SpirvModule::Id SpirvModule::constant_composite(Id type, const std::vector<Id>& elements) {
  Words key{type};
  key.insert(key.end(), elements.begin(), elements.end());
  auto [it, added] = composites_.emplace(key, 0);
  if (!added) return it->second;
  it->second = fresh();
  Words operands{type, it->second};
  operands.insert(operands.end(), elements.begin(), elements.end());
  emit(globals_, SOp::OpConstantComposite, operands);
  return it->second;
}

SpirvModule::Id SpirvModule::global_variable(Id pointer_type, spv::StorageClass storage, Id initializer) {
  Id v = fresh();
  Words operands{pointer_type, v, static_cast<uint32_t>(storage)};
  if (initializer != 0) operands.push_back(initializer);
  emit(globals_, SOp::OpVariable, operands);
  interface_.push_back(v);
  return v;
}

SpirvModule::Id SpirvModule::local_variable(Id pointer_type) {
  KILN_ASSERT(!stack_.empty(), "local variables live in a function");
  Id v = fresh();
  emit(stack_.front().locals, SOp::OpVariable, {pointer_type, v, static_cast<uint32_t>(spv::StorageClass::Function)});
  return v;
}

void SpirvModule::decorate(Id target, spv::Decoration d, const Words& operands) {
  Words all{target, static_cast<uint32_t>(d)};
  all.insert(all.end(), operands.begin(), operands.end());
  emit(annotations_, SOp::OpDecorate, all);
}

void SpirvModule::member_decorate(Id type, uint32_t member, spv::Decoration d, const Words& operands) {
  Words all{type, member, static_cast<uint32_t>(d)};
  all.insert(all.end(), operands.begin(), operands.end());
  emit(annotations_, SOp::OpMemberDecorate, all);
}

void SpirvModule::name(Id target, const std::string& text) {
  Words operands{target};
  Words s = string_words(text);
  operands.insert(operands.end(), s.begin(), s.end());
  emit(debug_, SOp::OpName, operands);
}

void SpirvModule::module_processed(const std::string& text) { emit(processed_, SOp::OpModuleProcessed, string_words(text)); }

SpirvModule::Id SpirvModule::op(spv::Op opcode, Id result_type, const Words& operands, Id result) {
  KILN_ASSERT(!stack_.empty(), "instructions are emitted inside a function");
  Id r = result != 0 ? result : fresh();
  Words all{result_type, r};
  all.insert(all.end(), operands.begin(), operands.end());
  emit(stack_.back().body, opcode, all);
  return r;
}

void SpirvModule::op_void(spv::Op opcode, const Words& operands) {
  KILN_ASSERT(!stack_.empty(), "instructions are emitted inside a function");
  emit(stack_.back().body, opcode, operands);
}

SpirvModule::Id SpirvModule::glsl(GLSLstd450 fn, Id result_type, const Words& args) {
  Words operands{glsl_import_, static_cast<uint32_t>(fn)};
  operands.insert(operands.end(), args.begin(), args.end());
  return op(SOp::OpExtInst, result_type, operands);
}

void SpirvModule::label(Id block) {
  emit(stack_.back().body, SOp::OpLabel, {block});
  stack_.back().block = current_block_ = block;
}

SpirvModule::Id SpirvModule::begin_function(Id result_type, const std::vector<Id>& params, std::vector<Id>* param_ids) {
  Function f;
  Id fn = fresh();
  emit(f.head, SOp::OpFunction, {result_type, fn, static_cast<uint32_t>(spv::FunctionControlMask::MaskNone),
                                type_function(result_type, params)});
  for (Id p : params) {
    Id pid = fresh();
    emit(f.head, SOp::OpFunctionParameter, {p, pid});
    if (param_ids) param_ids->push_back(pid);
  }
  f.block = fresh();
  emit(f.head, SOp::OpLabel, {f.block});
  stack_.push_back(std::move(f));
  current_block_ = stack_.back().block;
  return fn;
}

void SpirvModule::end_function() {
  KILN_ASSERT(!stack_.empty(), "end_function() closes a begun function");
  Function& f = stack_.back();
  Words all = f.head;
  all.insert(all.end(), f.locals.begin(), f.locals.end());
  all.insert(all.end(), f.body.begin(), f.body.end());
  emit(all, SOp::OpFunctionEnd, {});
  finished_.push_back(std::move(all));
  stack_.pop_back();
  current_block_ = stack_.empty() ? 0 : stack_.back().block;
}

SpirvModule::Words SpirvModule::finish(const std::string& entry_name, Id entry, std::array<uint32_t, 3> local_size) {
  KILN_ASSERT(stack_.empty(), "every function is ended before the module is finished");
  Words out{spv::MagicNumber, kVersion, 0, 0 /* bound, below */, 0};
  for (uint32_t c : capabilities_) emit(out, SOp::OpCapability, {c});
  Words import{glsl_import_};
  Words glsl_name = string_words("GLSL.std.450");
  import.insert(import.end(), glsl_name.begin(), glsl_name.end());
  emit(out, SOp::OpExtInstImport, import);
  emit(out, SOp::OpMemoryModel, {static_cast<uint32_t>(spv::AddressingModel::Logical),
                                static_cast<uint32_t>(spv::MemoryModel::GLSL450)});
  Words entry_point{static_cast<uint32_t>(spv::ExecutionModel::GLCompute), entry};
  Words name_words = string_words(entry_name);
  entry_point.insert(entry_point.end(), name_words.begin(), name_words.end());
  entry_point.insert(entry_point.end(), interface_.begin(), interface_.end());
  emit(out, SOp::OpEntryPoint, entry_point);
  emit(out, SOp::OpExecutionMode, {entry, static_cast<uint32_t>(spv::ExecutionMode::LocalSize), local_size[0],
                                  local_size[1], local_size[2]});
  for (const auto& [mode, literals] : modes_) {
    Words operands{entry, mode};
    operands.insert(operands.end(), literals.begin(), literals.end());
    emit(out, SOp::OpExecutionMode, operands);
  }
  for (const Words* section : {&debug_, &processed_, &annotations_, &globals_}) out.insert(out.end(), section->begin(), section->end());
  for (const Words& f : finished_) out.insert(out.end(), f.begin(), f.end());
  out[3] = next_id_;
  return out;
}

}  // namespace kiln
