#include "lower/opts.h"

#include "uop/error.h"

namespace kiln {

const char* opt_op_name(OptOp op) {
  switch (op) {
    case OptOp::UPCAST: return "UPCAST";
    case OptOp::UNROLL: return "UNROLL";
    case OptOp::LOCAL: return "LOCAL";
    case OptOp::GROUP: return "GROUP";
    case OptOp::GROUPTOP: return "GROUPTOP";
    case OptOp::THREAD: return "THREAD";
    case OptOp::PADTO: return "PADTO";
    case OptOp::SWAP: return "SWAP";
  }
  return "?";
}

std::string to_string(const Opt& opt) { return cat(opt_op_name(opt.op), "(", opt.axis, ",", opt.amount, ")"); }

std::string to_string(std::span<const Opt> opts) {
  std::string out;
  for (const Opt& o : opts) out += (out.empty() ? "" : " ") + to_string(o);
  return out;
}

std::optional<Opt> parse_opt(std::string_view text) {
  size_t open = text.find('('), comma = text.find(','), close = text.find(')');
  if (open == std::string_view::npos || comma == std::string_view::npos || close != text.size() - 1 || comma < open)
    return std::nullopt;
  std::string_view name = text.substr(0, open);
  std::optional<OptOp> op;
  for (OptOp o : {OptOp::UPCAST, OptOp::UNROLL, OptOp::LOCAL, OptOp::GROUP, OptOp::GROUPTOP, OptOp::THREAD, OptOp::PADTO,
                  OptOp::SWAP})
    if (name == opt_op_name(o)) op = o;
  if (!op) return std::nullopt;
  try {
    size_t used = 0;
    std::string axis(text.substr(open + 1, comma - open - 1)), amount(text.substr(comma + 1, close - comma - 1));
    int a = std::stoi(axis, &used);
    if (used != axis.size()) return std::nullopt;
    int64_t n = std::stoll(amount, &used);
    if (used != amount.size()) return std::nullopt;
    return Opt{*op, a, n};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace kiln

namespace kiln {

// Being written: explicit opts are rejected until the opt engine lands; the heuristics still apply.
Lowering lower_with_opts(const UOpPtr& ast, const DeviceSpec& spec, std::span<const Opt> opts) {
  if (!opts.empty()) return {std::nullopt, "explicit opts are not implemented yet"};
  return {lower_kernel(ast, spec), ""};
}
std::vector<Opt> heuristic_opts(const UOpPtr&, const DeviceSpec&) { return {}; }
std::vector<Opt> action_space(const UOpPtr&, const DeviceSpec&, std::span<const Opt>) { return {}; }

}  // namespace kiln
