// einsum over two operands: each operand's axes are named by letters; both are laid out over every
// letter (missing ones as size-1 axes), multiplied with broadcasting, and summed over the letters
// the output does not name. matmul is the same product and sum.
#include <algorithm>
#include <cctype>
#include <map>

#include "frontend/detail.h"

namespace kiln {

namespace {
void check_letters(const std::string& term, const std::string& equation) {
  for (char c : term)
    if (!std::isalpha(static_cast<unsigned char>(c)))
      throw Error(kiln::cat("einsum: \"", equation, "\": '", c, "' is not a letter (kiln's einsum takes two operands named by letters, no \"...\")"));
  for (size_t i = 0; i < term.size(); ++i)
    if (term.find(term[i], i + 1) != std::string::npos)
      throw Error(kiln::cat("einsum: \"", equation, "\": '", term[i], "' appears twice in \"", term,
                            "\" (a diagonal); kiln's einsum takes each letter once per operand"));
}

// The operand laid out over `all` letters: its axes permuted into that order, size 1 where it lacks one.
Tensor lay_out(const Tensor& t, const std::string& term, const std::string& all) {
  std::vector<int64_t> order;
  Shape shape;
  for (char c : all) {
    size_t at = term.find(c);
    if (at == std::string::npos) {
      shape.push_back(1);
    } else {
      order.push_back(static_cast<int64_t>(at));
      shape.push_back(t.shape()[at]);
    }
  }
  return t.permute(order).reshape(shape);
}
}  // namespace

Tensor einsum(const std::string& equation_in, const Tensor& a, const Tensor& b) {
  std::string equation;
  for (char c : equation_in)
    if (c != ' ') equation += c;
  size_t comma = equation.find(','), arrow = equation.find("->");
  if (comma == std::string::npos || equation.find(',', comma + 1) != std::string::npos || (arrow != std::string::npos && arrow < comma))
    throw Error(kiln::cat("einsum: \"", equation_in, "\" must name two operands, like \"ij,jk->ik\""));
  std::string ta = equation.substr(0, comma);
  std::string tb = equation.substr(comma + 1, arrow == std::string::npos ? std::string::npos : arrow - comma - 1);
  check_letters(ta, equation_in);
  check_letters(tb, equation_in);
  for (auto [term, t] : {std::pair<const std::string&, const Tensor&>{ta, a}, {tb, b}})
    if (static_cast<int64_t>(term.size()) != t.ndim())
      throw Error(kiln::cat("einsum: \"", equation_in, "\": \"", term, "\" names ", term.size(), " axes, but its operand has shape ", shape_str(t.shape())));
  std::map<char, int64_t> sizes;
  for (auto [term, t] : {std::pair<const std::string&, const Tensor&>{ta, a}, {tb, b}})
    for (size_t i = 0; i < term.size(); ++i) {
      auto [it, added] = sizes.emplace(term[i], t.shape()[i]);
      if (!added && it->second != t.shape()[i] && it->second != 1 && t.shape()[i] != 1)
        throw Error(kiln::cat("einsum: \"", equation_in, "\": '", term[i], "' has sizes ", it->second, " and ", t.shape()[i]));
      it->second = std::max(it->second, t.shape()[i]);
    }
  std::string out;
  if (arrow == std::string::npos) {  // implicit: the letters that appear once, in alphabetical order
    for (auto [c, size] : sizes)
      if (std::count(ta.begin(), ta.end(), c) + std::count(tb.begin(), tb.end(), c) == 1) out += c;
  } else {
    out = equation.substr(arrow + 2);
    check_letters(out, equation_in);
    for (char c : out)
      if (!sizes.count(c)) throw Error(kiln::cat("einsum: \"", equation_in, "\": output letter '", c, "' names no operand axis"));
  }
  std::string all = out;
  for (auto [c, size] : sizes)
    if (out.find(c) == std::string::npos) all += c;
  Shape full;
  for (char c : all) full.push_back(sizes[c]);
  Tensor product = lay_out(a, ta, all).expand(full) * lay_out(b, tb, all).expand(full);
  if (all.size() == out.size()) return product;
  std::vector<int64_t> summed;
  for (size_t i = out.size(); i < all.size(); ++i) summed.push_back(static_cast<int64_t>(i));
  DType d = product.dtype();
  return product.sum(summed).cast(d);  // integer sums run in int64; torch.einsum keeps the operand dtype
}

}  // namespace kiln
