// check_op: an op's values and the gradients of sum(f(x) * w) for a random w, kiln against libtorch.
//
//   check_op(batch, src, "cumprod", {x}, [](auto& v) { return v[0].cumprod(1); },
//            [](auto& v) { return at::cumprod(v[0], 1); }, 16);
#pragma once
#include <torch/csrc/autograd/autograd.h>

#include "oracle.h"

namespace kiln::oracle {

using KFn = std::function<Tensor(const std::vector<Tensor>&)>;
using TFn = std::function<at::Tensor(const std::vector<at::Tensor>&)>;
inline const std::vector<at::ScalarType> kFloats = {at::kFloat, at::kDouble};

// n units of rounding (eps of dt), relative to each value and to the largest |expected|.
inline Tol normwise(const at::Tensor& expected, double n, at::ScalarType dt) {
  double e = n * eps(dt);
  double scale = expected.numel() ? expected.abs().max().item<double>() : 0.0;
  return {e, e * scale};
}

// f's values, then the gradients of sum(f(xs) * w) for every float input, against libtorch's.
// `n`: the tolerance in units of rounding (normwise); 0 means values exact.
inline void check_op(Batch& batch, Source& src, const std::string& what, const std::vector<at::Tensor>& xs, const KFn& k, const TFn& t, double n,
                     bool grad = true) {
  std::vector<at::Tensor> leaves;
  std::vector<Tensor> kleaves;
  for (const at::Tensor& x : xs) {
    bool differentiable = grad && at::isFloatingType(x.scalar_type());
    leaves.push_back(differentiable ? x.detach().clone().requires_grad_(true) : x);
    kleaves.push_back(to_kiln(x));
  }
  at::Tensor out = t(leaves);
  Tensor kout = k(kleaves);
  at::ScalarType dt = out.scalar_type();
  batch.check(what + " (values)", kout, out.detach(), n == 0 ? Tol{} : normwise(out.detach(), n, dt));
  if (!grad || !at::isFloatingType(dt)) return;
  at::Tensor w = src.values(out.sizes().vec(), dt, Values::Finite);
  std::vector<at::Tensor> wanted;
  std::vector<Tensor> kwanted;
  for (size_t i = 0; i < xs.size(); ++i)
    if (leaves[i].requires_grad()) {
      wanted.push_back(leaves[i]);
      kwanted.push_back(kleaves[i]);
    }
  std::vector<at::Tensor> expected = torch::autograd::grad({(out * w).sum()}, wanted, {}, false, false, true);
  std::vector<Tensor> actual = gradients((kout * to_kiln(w)).sum(), kwanted);
  for (size_t i = 0; i < wanted.size(); ++i) {
    at::Tensor e = expected[i].defined() ? expected[i] : at::zeros_like(wanted[i]);
    batch.check(cat(what, ": d/d input ", i), actual[i], e, normwise(e, std::max(n, 8.0), dt));
  }
}

inline at::Tensor from(std::vector<double> v, at::ScalarType dt, std::vector<int64_t> shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  return at::tensor(v, at::TensorOptions().dtype(at::kDouble)).reshape(shape).to(dt);
}

}  // namespace kiln::oracle
