// End-to-end: lazy tensors -> schedule -> lowered C -> CPU kernels, checked against plain loops.
#include <cmath>

#include "devices/device.h"
#include "frontend/tensor.h"
#include "helpers.h"

using namespace kiln;

TEST_CASE("elementwise add and multiply run as one fused kernel", "[tensor]") {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::from_vector<float>({10, 20, 30, 40, 50, 60}, {2, 3});
  Tensor c = Tensor::from_vector<float>({-1, 1, -1, 1, -1, 1}, {2, 3});
  Tensor out = (a * b + c).relu();
  CHECK(Tensor::schedule({out}).items.size() == 1);
  std::vector<float> got = out.to_vector<float>();
  std::vector<float> want = {9, 41, 89, 161, 249, 361};
  CHECK(got == want);
}

TEST_CASE("sum over an axis", "[tensor]") {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(a.sum({1}).to_vector<float>() == std::vector<float>{6, 15});
  CHECK(a.sum({0}).to_vector<float>() == std::vector<float>{5, 7, 9});
  CHECK(a.sum().to_vector<float>() == std::vector<float>{21});
  CHECK(a.max({1}).to_vector<float>() == std::vector<float>{3, 6});
}

TEST_CASE("views: permute, pad, shrink, flip, expand", "[tensor]") {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(a.permute({1, 0}).contiguous().to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});
  CHECK(a.pad({{1, 0}, {0, 1}}).to_vector<float>() == std::vector<float>{0, 0, 0, 0, 1, 2, 3, 0, 4, 5, 6, 0});
  CHECK(a.shrink({{1, 2}, {1, 3}}).to_vector<float>() == std::vector<float>{5, 6});
  CHECK(a.flip({1}).to_vector<float>() == std::vector<float>{3, 2, 1, 6, 5, 4});
  CHECK(a.reshape({3, 2}).to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(a.sum({1}, true).expand({2, 3}).to_vector<float>() == std::vector<float>{6, 6, 6, 15, 15, 15});
  CHECK(Tensor::arange(5).to_vector<int32_t>() == std::vector<int32_t>{0, 1, 2, 3, 4});
}

TEST_CASE("softmax and matmul", "[tensor]") {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  std::vector<float> s = a.softmax(1).to_vector<float>();
  for (int r = 0; r < 2; ++r) {
    double denom = 0;
    for (int c = 0; c < 3; ++c) denom += std::exp(r * 3 + c + 1 - (r * 3 + 3));
    for (int c = 0; c < 3; ++c) CHECK(s[r * 3 + c] == Approx(std::exp(r * 3 + c + 1 - (r * 3 + 3)) / denom).epsilon(1e-6));
  }
  Tensor b = Tensor::from_vector<float>({1, 0, 0, 1, 1, 1}, {3, 2});
  CHECK(a.matmul(b).to_vector<float>() == std::vector<float>{4, 5, 10, 11});
}

TEST_CASE("an output's memory returns to the device cache when its last tensor is gone", "[tensor]") {
  Tensor probe = Tensor::ones({1});
  Device& device = get_device(probe.device());
  size_t before = device.cached_bytes();
  {
    Tensor big = (Tensor::ones({1 << 20}) * 2.0).realize();
    CHECK(big.to_vector<float>()[12345] == 2.0f);
  }
  CHECK(device.cached_bytes() >= before + (size_t{4} << 20));
}

// Size-0 tensors (PyTorch allows them anywhere): nothing with no elements is launched or stored, and
// ops that turn an empty tensor into a non-empty one give their closed forms (a sum over an empty axis
// is 0, a product 1, a matmul with an empty inner axis zeros, padding the pad value).
TEST_CASE("size-0 tensors launch nothing and reduce to their closed forms", "[tensor]") {
  std::vector<float> none;
  Tensor e04 = Tensor::from_vector<float>(none, {0, 4});
  SECTION("elementwise, broadcasting and views of an empty tensor are empty and launch nothing") {
    Tensor x = e04.exp();
    CHECK(x.shape() == Shape{0, 4});
    CHECK(Tensor::schedule({x}).items.empty());
    CHECK(x.to_vector<float>().empty());
    float dummy = 0;
    Tensor wide = Tensor::from_raw(&dummy, dtypes::float32, {0, 100000}) * 2;
    CHECK(Tensor::schedule({wide}).items.empty());
    CHECK(wide.to_vector<float>().empty());
    Tensor row = Tensor::from_vector<float>({1, 2, 3, 4, 5}, {1, 5});
    Tensor b = Tensor::from_vector<float>(none, {0, 5}) + row;
    CHECK(b.shape() == Shape{0, 5});
    CHECK(b.to_vector<float>().empty());
    CHECK((e04.reshape({4, 0}) + 1).to_vector<float>().empty());
    CHECK(e04.reshape({2, 0, 2}).shape() == Shape{2, 0, 2});
    CHECK_THROWS_WITH(e04.reshape({-1, 2, 0}), Catch::Contains("could be any size"));
    CHECK(e04.permute({1, 0}).contiguous().to_vector<float>().empty());
  }
  SECTION("an empty slice of a real tensor, and reductions over an empty axis") {
    Tensor a = Tensor::arange(0.0, 12.0).reshape({3, 4});
    Tensor s = a.slice(0, 2, 2);
    CHECK(s.shape() == Shape{0, 4});
    CHECK((s * 3).to_vector<float>().empty());
    CHECK(s.sum({0}).to_vector<float>() == std::vector<float>{0, 0, 0, 0});
    CHECK(s.prod({0}).to_vector<float>() == std::vector<float>{1, 1, 1, 1});
    CHECK(s.sum({1}).shape() == Shape{0});
    CHECK(s.sum({1}).to_vector<float>().empty());
    CHECK(s.sum().item<float>() == 0.0f);
    CHECK(std::isnan(s.mean().item<float>()));
    CHECK_THROWS_WITH(s.max({0}), Catch::Contains("max") && Catch::Contains("empty"));
    // The empty sum fused into a kernel that is not empty.
    CHECK((a + s.sum({0})).to_vector<float>() == a.to_vector<float>());
  }
  SECTION("matmul with an empty inner axis, padding, cat") {
    Tensor m = Tensor::from_vector<float>(none, {3, 0}).matmul(Tensor::from_vector<float>(none, {0, 2}));
    CHECK(m.shape() == Shape{3, 2});
    CHECK(m.to_vector<float>() == std::vector<float>(6, 0.0f));
    Tensor p = Tensor::from_vector<float>(none, {0, 2}).pad({{1, 1}, {0, 0}}, 7.0);
    CHECK(p.to_vector<float>() == std::vector<float>(4, 7.0f));
    Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor c = Tensor::cat({a, Tensor::from_vector<float>(none, {0, 3}), a}, 0);
    CHECK(c.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6});
  }
  SECTION("gradients through an empty piece of cat, and of an empty leaf") {
    Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor e = Tensor::from_vector<float>(none, {0, 3});
    x.requires_grad_();
    e.requires_grad_();
    (Tensor::cat({x, e}, 0) * Tensor::cat({x, e}, 0)).sum().backward();
    CHECK(x.grad()->to_vector<float>() == std::vector<float>{2, 4, 6, 8, 10, 12});
    CHECK(e.grad()->shape() == Shape{0, 3});
    CHECK(e.grad()->to_vector<float>().empty());
  }
}

// The scalar operators and relu build their nodes directly (no tensor for the scalar or the comparison);
// the graph must be the one the general path (a full tensor operand, le, where) builds, node for node.
TEST_CASE("scalar operators and relu build the general path's nodes", "[tensor]") {
  for (DType dtype : {dtypes::float32, dtypes::float64, dtypes::float16, dtypes::int32}) {
    CAPTURE(dtype.name());
    Tensor x = Tensor::arange(6).reshape({2, 3}).cast(dtype) - 2.0;
    auto full = [&](double v) { return x.full_like(v); };
    CHECK((x * 3.0).uop() == (x * full(3.0)).uop());
    CHECK((x + 2.0).uop() == (x + full(2.0)).uop());
    CHECK((x - 2.0).uop() == (x - full(2.0)).uop());
    if (is_float(dtype)) {
      CHECK((x / 4.0).uop() == (x / full(4.0)).uop());
      CHECK((x * 1.5).uop() == (x * full(1.5)).uop());
    }
    Tensor zero = x.zeros_like();
    CHECK(x.relu().uop() == x.le(zero).where(zero, x).uop());
    std::vector<double> got = x.relu().cast(dtypes::float64).to_vector<double>();
    CHECK(got == std::vector<double>{0, 0, 0, 1, 2, 3});
  }
}
