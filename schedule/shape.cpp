#include "schedule/shape.h"

#include <algorithm>

namespace kiln {

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + (shape.size() == 1 ? ",)" : ")");
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

Shape infer_shape(Op op, const Arg& arg, std::span<const Shape> src) {
  auto vec = [&]() -> const std::vector<int64_t>& { return std::get<std::vector<int64_t>>(arg); };
  auto pairs = [&]() -> const Pairs& { return std::get<Pairs>(arg); };
  switch (op) {
    case Op::BUFFER: return {std::get<BufferArg>(arg).size};
    case Op::CONST: return {};
    case Op::IOTA: return {std::get<int64_t>(arg)};
    case Op::RESHAPE:
    case Op::EXPAND: return vec();
    case Op::PERMUTE: {
      Shape out;
      for (int64_t axis : vec()) out.push_back(src[0].at(static_cast<size_t>(axis)));
      return out;
    }
    case Op::PAD: {
      Shape out = src[0];
      for (size_t i = 0; i < out.size(); ++i) out[i] += pairs()[i].first + pairs()[i].second;
      return out;
    }
    case Op::SHRINK: {
      Shape out = src[0];
      for (size_t i = 0; i < out.size(); ++i) out[i] = pairs()[i].second - pairs()[i].first;
      return out;
    }
    case Op::FLIP: return src[0];
    case Op::REDUCE_AXIS: {
      Shape out = src[0];
      for (int64_t axis : std::get<ReduceArg>(arg).axes) out.at(static_cast<size_t>(axis)) = 1;
      return out;
    }
    case Op::WHERE: return src[1];
    case Op::GATHER: return src[1];  // the index's shape
    case Op::SCATTER_ADD: {  // the values' shape with n on the axis
      const auto& axis_n = std::get<std::vector<int64_t>>(arg);
      Shape out = src[0];
      out.at(static_cast<size_t>(axis_n.at(0))) = axis_n.at(1);
      return out;
    }
    case Op::CONTIGUOUS: case Op::COPY: case Op::ASSIGN: case Op::DETACH: case Op::CAST: case Op::BITCAST:
    case Op::NEG: case Op::RECIP: case Op::SQRT: case Op::EXP2: case Op::LOG2: case Op::SIN: case Op::TRUNC:
    case Op::ADD: case Op::SUB: case Op::MUL: case Op::FDIV: case Op::IDIV: case Op::MOD: case Op::MAX:
    case Op::MIN: case Op::POW: case Op::CMPLT: case Op::CMPNE: case Op::CMPEQ: case Op::AND: case Op::OR:
    case Op::XOR: case Op::SHL: case Op::SHR: case Op::MULACC:
      return src[0];
    case Op::SINK: case Op::NOOP: case Op::DEFINE_VAR: case Op::DEVICE: case Op::DEFINE_GLOBAL:
    case Op::DEFINE_LOCAL: case Op::DEFINE_REG: case Op::INDEX: case Op::LOAD: case Op::STORE: case Op::RANGE:
    case Op::END: case Op::REDUCE: case Op::SPECIAL: case Op::BARRIER: case Op::IF: case Op::ENDIF:
    case Op::VECTORIZE: case Op::GEP:
      break;
  }
  throw_internal("tensor-level graphs hold only tensor ops", cat(op_name(op), " has no tensor shape"), __FILE__, __LINE__);
}

const Shape& ShapeCache::operator()(const UOpPtr& u) {
  if (auto it = memo_.find(u.get()); it != memo_.end()) return it->second.second;
  auto add = [&](const UOpPtr& node) -> const Shape& {
    std::vector<Shape> src;
    if (node->op != Op::BUFFER && node->op != Op::CONST && node->op != Op::IOTA)
      for (const UOpPtr& s : node->src)
        if (s->op != Op::DEVICE) src.push_back(memo_.at(s.get()).second);
    return memo_.emplace(node.get(), std::pair{node, infer_shape(node->op, node->arg, src)}).first->second.second;
  };
  // Most nodes asked about are one op over nodes already known (autograd asks for each gradient node
  // it makes, a third of a backward pass's time when each went through the walk below): no walk.
  bool sources_known = std::all_of(u->src.begin(), u->src.end(), [&](const UOpPtr& s) { return s->op == Op::DEVICE || memo_.count(s.get()); });
  if (u->op != Op::DEVICE && sources_known) return add(u);
  // Iterative: tensor graphs (an optimizer step, a long elementwise chain) can be deep.
  for (const UOpPtr& node : toposort(u, [this](const UOp* n) { return memo_.count(n) > 0; })) {  // analysis: a shape per new node
    if (node->op == Op::DEVICE) continue;
    add(node);
  }
  return memo_.at(u.get()).second;
}

}  // namespace kiln
