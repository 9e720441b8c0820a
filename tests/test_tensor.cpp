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
