// Kernel counts for known graphs: the fusion rules of schedule/schedule.cpp, held to their word.
#include <algorithm>
#include <cmath>
#include <set>

#include "frontend/nn.h"
#include "frontend/realize.h"
#include "frontend/tensor.h"
#include "helpers.h"
#include "uop/symbolic.h"

using namespace kiln;

namespace {
size_t kernels(const std::vector<Tensor>& outs) {
  size_t n = 0;
  for (const ScheduleItem& item : Tensor::schedule(outs).items) n += item.kind == ScheduleItem::Kind::Kernel;
  return n;
}
Tensor rand_like_shape(Shape s) {
  std::vector<float> v(static_cast<size_t>(numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7919) % 13) - 6.0f;
  return Tensor::from_vector(v, s);
}
}  // namespace

TEST_CASE("relu(a*b+c) is one kernel", "[schedule]") {
  Tensor a = rand_like_shape({64, 64}), b = rand_like_shape({64, 64}), c = rand_like_shape({64, 64});
  CHECK(kernels({(a * b + c).relu()}) == 1);
}

TEST_CASE("a reduce with elementwise input and output is one kernel", "[schedule]") {
  Tensor a = rand_like_shape({32, 16});
  CHECK(kernels({((a * 2.0).exp().sum({1}) + 1.0).sqrt()}) == 1);
}

TEST_CASE("a chain of 50 elementwise ops is one kernel", "[schedule]") {
  Tensor x = rand_like_shape({128});
  Tensor y = x;
  for (int i = 0; i < 50; ++i) y = (i % 2 == 0) ? y * 1.01 : y + 0.5;
  CHECK(kernels({y}) == 1);
}

TEST_CASE("a view of a view is no kernel at all", "[schedule]") {
  Tensor a = rand_like_shape({4, 6}).realize();
  Tensor v = a.permute({1, 0}).reshape({3, 8}).shrink({{0, 2}, {0, 8}}).flip({1});
  CHECK(Tensor::schedule({a.reshape({24})}).items.size() == 1);  // realizing a view copies it...
  Schedule s = Tensor::schedule({v + 1.0});                     // ...but reading through views costs nothing:
  CHECK(s.items.size() == 1);                                     // one kernel for the add, none for the views
}

TEST_CASE("a reduce broadcast back is stored: softmax is two reduce kernels and one elementwise", "[schedule]") {
  Tensor a = rand_like_shape({8, 32});
  CHECK(kernels({a.softmax(1)}) == 3);
}

TEST_CASE("matmul is one kernel", "[schedule]") {
  Tensor a = rand_like_shape({16, 8}), b = rand_like_shape({8, 4});
  CHECK(kernels({a.matmul(b)}) == 1);
}

TEST_CASE("a ReLU stays fused into the matmul that reads it, a ReLU of a bias add is stored first", "[schedule]") {
  // Fused into a matmul's broadcast operand, each value is recomputed once per block of output columns.
  Tensor h = (rand_like_shape({16, 8}) * 0.25).realize(), bias = (rand_like_shape({8}) * 0.5).realize();
  Tensor w = (rand_like_shape({8, 4}) * 0.5).realize();
  CHECK(kernels({h.relu().matmul(w)}) == 1);
  Tensor out = (h + bias).relu().matmul(w);
  CHECK(kernels({out}) == 2);
  std::vector<float> hv = h.to_vector<float>(), bv = bias.to_vector<float>(), wv = w.to_vector<float>(), got = out.to_vector<float>();
  for (size_t i = 0; i < 16; ++i)
    for (size_t j = 0; j < 4; ++j) {
      double want = 0;
      for (size_t k = 0; k < 8; ++k) want += std::max(0.0, double(hv[i * 8 + k]) + bv[k]) * wv[k * 4 + j];
      CHECK(got[i * 4 + j] == Approx(want).margin(1e-5));
    }
}

TEST_CASE("a matmul whose operands are contiguous only along the reduction copies one transposed first", "[schedule]") {
  // x @ W.T, as nn::Linear computes it: no output axis walks W contiguously, so W is repacked
  // (schedule/repack.h) and the matmul reads the copy; the result is unchanged.
  Tensor x = rand_like_shape({32, 48}), w = rand_like_shape({64, 48});
  Schedule s = Tensor::schedule({x.matmul(w.transpose(0, 1))});
  REQUIRE(s.items.size() == 2);
  CHECK(s.items[0].bufs.size() == 2);                   // the copy: W into its transposed layout
  const std::vector<UOpPtr>& reads = s.items[1].bufs;  // the matmul reads it, not W
  CHECK(std::count(reads.begin(), reads.end(), s.items[0].bufs[0]) == 1);
  CHECK(std::count(reads.begin(), reads.end(), s.items[0].bufs[1]) == 0);
  std::vector<float> got = x.matmul(w.transpose(0, 1)).to_vector<float>();
  std::vector<float> want = x.matmul(w.transpose(0, 1).contiguous()).to_vector<float>();
  CHECK(got == want);
  // Already vectorizable layouts, and a matrix-vector product (each element of W used once), copy nothing.
  CHECK(kernels({x.matmul(rand_like_shape({48, 64}))}) == 1);
  CHECK(kernels({w.matmul(rand_like_shape({48}))}) == 1);
}

TEST_CASE("A^T.B copies an operand only when its strided walk spans more than the caches hold", "[schedule]") {
  // Both operands walk the reduction a row apart. Small (128 x 128: a 64 KiB span) the kernel reads them
  // in place; with a span over kRepackMinSpanBytes (1024 rows of 320 floats: 1.3 MiB) one is copied with
  // the reduction innermost first. Either way the values equal a double-precision loop.
  auto check = [](int64_t m, int64_t n, int64_t k, size_t want_kernels) {
    Tensor a = rand_like_shape({k, m}).realize(), b = rand_like_shape({k, n}).realize();
    Tensor c = a.transpose(0, 1).matmul(b);
    CHECK(kernels({c}) == want_kernels);
    std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>(), got = c.to_vector<float>();
    for (int64_t i = 0; i < m; i += 7)
      for (int64_t j = 0; j < n; j += 5) {
        double want = 0;
        for (int64_t r = 0; r < k; ++r) want += double(av[static_cast<size_t>(r * m + i)]) * bv[static_cast<size_t>(r * n + j)];
        CHECK(got[static_cast<size_t>(i * n + j)] == Approx(want).epsilon(1e-4).margin(1e-4));
      }
  };
  check(128, 128, 128, 1);
  check(320, 64, 1024, 2);
}

TEST_CASE("a repacked operand keeps each of its axes, whatever their sizes and numbers", "[schedule]") {
  // out[a, n, c] = sum_k x[a, k] * w[n, k, c], with w stored as (c, n, k): strided along every output
  // axis, so it is repacked to (n, k, c). Its loops (n, k, c) are renumbered for the copy; with K == N
  // a new loop once equalled an old one and two axes merged (a transformer's loss went NaN).
  const int64_t A = 16, N = 8, K = 8, C = 8;
  Tensor x = rand_like_shape({A, K}).realize(), stored = (rand_like_shape({C, N, K}) * 0.25 + 0.5).realize();
  Tensor w = stored.permute({1, 2, 0});  // (N, K, C)
  Tensor out = (x.reshape({A, 1, K, 1}) * w.reshape({1, N, K, C})).sum({2});
  REQUIRE(kernels({out}) == 2);  // the copy, then the reduction
  std::vector<float> xv = x.to_vector<float>(), sv = stored.to_vector<float>(), got = out.to_vector<float>();
  for (int64_t a = 0; a < A; ++a)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) {
        double want = 0;
        for (int64_t k = 0; k < K; ++k) want += double(xv[static_cast<size_t>(a * K + k)]) * sv[static_cast<size_t>((c * N + n) * K + k)];
        CHECK(got[static_cast<size_t>((a * N + n) * C + c)] == Approx(want).epsilon(1e-5));
      }
}

TEST_CASE("a long reduction with few outputs sums chunks first", "[schedule]") {
  // Batch norm's per-channel sum over (N, H, W): 16 outputs cannot share out 100K values each across
  // the cores, 8 chunks can (schedule/split_reduce.h). The total equals a double-precision loop.
  Shape shape{128, 16, 28, 28};
  Tensor x = rand_like_shape(shape).realize();
  Tensor sums = x.sum({0, 2, 3});
  Schedule s = Tensor::schedule({sums});
  REQUIRE(kernels({sums}) == 2);
  CHECK(s.items[0].bufs[0]->arg_as<BufferArg>().size == 8 * 16);  // 8 partials per channel
  std::vector<float> v = x.to_vector<float>(), got = sums.to_vector<float>();
  for (int64_t c = 0; c < 16; ++c) {
    double want = 0;
    for (int64_t n = 0; n < 128; ++n)
      for (int64_t i = 0; i < 784; ++i) want += v[static_cast<size_t>((n * 16 + c) * 784 + i)];
    CHECK(got[static_cast<size_t>(c)] == Approx(want).epsilon(1e-6));
  }
  CHECK(kernels({rand_like_shape({256, 256}).sum({1})}) == 1);  // many outputs: already shared out
}

TEST_CASE("a reduction over inputs larger than a cache sums chunks first", "[schedule]") {
  // A weight gradient g^T x over 40960 samples: 10 MB of inputs, each element feeding 16 multiply-adds
  // (the least that splits); split in chunks under 4 MB. The result equals a double-precision loop.
  // Sized for the REF interpreter too, which runs this in the conformance suite.
  const int64_t n = 40960, f = 32;
  Tensor g = rand_like_shape({n, f}).realize(), x = (rand_like_shape({n, f}) * 0.5).realize();
  Tensor w = g.transpose(0, 1).matmul(x);
  REQUIRE(kernels({w}) == 2);
  std::vector<float> gv = g.to_vector<float>(), xv = x.to_vector<float>(), got = w.to_vector<float>();
  for (int64_t i = 0; i < f; i += 5)
    for (int64_t j = 0; j < f; j += 7) {
      double want = 0;
      for (int64_t k = 0; k < n; ++k) want += double(gv[static_cast<size_t>(k * f + i)]) * xv[static_cast<size_t>(k * f + j)];
      CHECK(got[static_cast<size_t>(i * f + j)] == Approx(want).epsilon(1e-5));
    }
}

TEST_CASE("a reduce of a reduce stores the inner one", "[schedule]") {
  Tensor a = rand_like_shape({8, 32});
  CHECK(kernels({a.sum({1}).sum({0})}) == 2);
  CHECK(a.sum({1}).sum({0}).to_vector<float>()[0] == Approx(a.sum().to_vector<float>()[0]));
}

TEST_CASE("a reduce read through a pad is stored: a cat of two sums is two reduce kernels and one elementwise", "[schedule]") {
  Tensor a = rand_like_shape({8, 32}), b = rand_like_shape({6, 16}) * 0.5;
  Tensor joined = Tensor::cat({a.sum({1}), b.sum({1})}, 0);
  CHECK(kernels({joined}) == 3);  // fused, the cat's kernel would run both sums for every element, masked
  std::vector<float> got = joined.to_vector<float>(), sa = a.to_vector<float>(), sb = b.to_vector<float>();
  REQUIRE(got.size() == 14);
  for (size_t i = 0; i < 8; ++i) {
    float want = 0;
    for (size_t j = 0; j < 32; ++j) want += sa[i * 32 + j];
    CHECK(got[i] == Approx(want));
  }
  for (size_t i = 0; i < 6; ++i) {
    float want = 0;
    for (size_t j = 0; j < 16; ++j) want += sb[i * 16 + j];
    CHECK(got[8 + i] == Approx(want));
  }
}

TEST_CASE("an elementwise piece of a stack is stored when the stack's gate would discard most of its work", "[schedule]") {
  // Stacking 8 pieces pads each 8-fold: fused, the stack's kernel computes every piece for every element
  // and keeps 1/8. A piece of 8 ALU ops (8 x 8 > 32) is stored; a piece of one op stays fused.
  Tensor x = rand_like_shape({8, 64}) * 0.1;
  std::vector<Tensor> heavy, light;
  for (int64_t t = 0; t < 8; ++t) {
    Tensor row = x.shrink({{t, t + 1}, {0, 64}}).reshape({64});
    heavy.push_back(((row * 2.0 + 1.0).sigmoid() * row).tanh());
    light.push_back(row + 1.0);
  }
  Tensor h = Tensor::stack(heavy, 0), l = Tensor::stack(light, 0);
  CHECK(kernels({h}) == 9);
  CHECK(kernels({l}) == 1);
  std::vector<float> got = h.to_vector<float>(), xs = x.to_vector<float>(), lg = l.to_vector<float>();
  REQUIRE(got.size() == xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    double v = xs[i];
    CHECK(got[i] == Approx(std::tanh(v / (1 + std::exp(-(2 * v + 1))))).margin(1e-6));
    CHECK(lg[i] == Approx(v + 1).margin(1e-6));
  }
}

TEST_CASE("a weight used at many steps gets its gradient as one matmul per step, each in its own kernel", "[schedule]") {
  // An RNN's W_hh: one EXPAND node (interned) read by every step's matmul. Its gradient parts are
  // reduced one by one past four (frontend/autograd.cpp), and a region fusing more than four reductions
  // stores each (kMaxFusedReduces): summed first, they were one reduction over an 8-term sum of
  // products, which no tiling fits.
  Tensor w = rand_like_shape({6, 5}).requires_grad_();
  std::vector<Tensor> xs;
  Tensor loss = Tensor::zeros({});
  for (int t = 0; t < 8; ++t) {
    xs.push_back(rand_like_shape({4, 6}) * (0.1 * (t + 1)));
    loss = loss + (xs.back().matmul(w) * static_cast<double>(t + 1)).sum();
  }
  loss.backward();
  Tensor g = *w.grad();
  size_t reductions = 0;
  for (const ScheduleItem& item : Tensor::schedule({g}).items)
    if (item.kind == ScheduleItem::Kind::Kernel && item.ast != nullptr)
      for (const UOpPtr& u : toposort(item.ast)) reductions += u->op == Op::REDUCE;
  CHECK(reductions >= 8);
  // d loss / d w[i][j] = sum_t (t + 1) sum_n x_t[n][i].
  std::vector<float> got = g.to_vector<float>();
  for (int64_t i = 0; i < 6; ++i) {
    double want = 0;
    for (int t = 0; t < 8; ++t) {
      std::vector<float> x = xs[static_cast<size_t>(t)].to_vector<float>();
      for (int64_t n = 0; n < 4; ++n) want += (t + 1) * x[static_cast<size_t>(n * 6 + i)];
    }
    for (int64_t j = 0; j < 5; ++j) CHECK(got[static_cast<size_t>(i * 5 + j)] == Approx(want).epsilon(1e-5));
  }
}

TEST_CASE("intermediate buffers are freed after their last reader", "[schedule]") {
  Tensor a = rand_like_shape({8, 32});
  Schedule s = Tensor::schedule({a.softmax(1)});
  size_t freed = 0;
  for (const auto& list : s.free_after) freed += list.size();
  CHECK(freed == 2);  // the max and the sum; the output is kept
}

TEST_CASE("very long graphs schedule without overflowing the stack", "[schedule]") {
  Tensor x = Tensor::from_vector<float>({1, 2}, {2});
  Tensor fused = x, stored = x;
  for (int i = 0; i < 20000; ++i) fused = fused + 1.0;                   // one kernel, 20000 ops deep
  for (int i = 0; i < 3000; ++i) stored = (stored + 1.0).contiguous();  // 3000 kernels in a chain
  CHECK(Tensor::schedule({fused}).items.size() == 1);  // scheduling only: compiling 20000 statements is slow
  CHECK(Tensor::schedule({stored}).items.size() == 3000);
}

TEST_CASE("an intermediate is stored in the layout its kernel reads: NHWC after a channels-last value", "[schedule]") {
  // y reads `a`, stored (N, H, W, C), as (N, C, H, W), and two reductions read y, so y is stored (81 ALU
  // ops per element is too many to recompute in each). Stored row-major it would be a transpose that
  // gathers `a` lane by lane; the scheduler keeps it channels-last, like `a`: its kernel loops with C
  // innermost and walks both its load and its store contiguously there. Values are unchanged.
  const int64_t N = 2, C = 24, H = 5, W = 7;
  auto build = [&](const Tensor& nchw) {
    Tensor y = nchw;
    for (int i = 0; i < 40; ++i) y = y * 1.01 + 0.1;
    y = y.relu();
    return std::vector<Tensor>{y.sum({0, 2, 3}), y.max({1})};
  };
  // The loop the store walks contiguously (stride 1), by its size, in the kernel that stores y.
  auto contiguous_loop = [](const std::vector<Tensor>& outs) {
    int64_t size = -1;
    for (const ScheduleItem& item : Tensor::schedule(outs).items) {
      std::vector<UOpPtr> nodes = toposort(item.ast);
      if (std::any_of(nodes.begin(), nodes.end(), [](const UOpPtr& u) { return u->op == Op::REDUCE; })) continue;
      const UOpPtr& index = item.ast->src[0]->src[0]->src[1];  // SINK(STORE(INDEX(out, index), value))
      for (const UOpPtr& u : nodes)
        if (u->op == Op::RANGE && index_stride(index, u) == 1) size = u->end()->vmax();
    }
    return size;
  };
  Tensor a = (rand_like_shape({N, H, W, C}) * 0.25).realize();
  std::vector<Tensor> nhwc = build(a.permute({0, 3, 1, 2}));
  CHECK(kernels(nhwc) == 3);
  CHECK(contiguous_loop(nhwc) == C);
  Tensor b = (rand_like_shape({N, C, H, W}) * 0.25).realize();
  CHECK(contiguous_loop(build(b)) == W);  // row-major input: row-major intermediate
  std::vector<float> av = a.to_vector<float>(), sums = nhwc[0].to_vector<float>(), maxes = nhwc[1].to_vector<float>();
  auto f = [](double v) {
    for (int i = 0; i < 40; ++i) v = double(float(float(v) * 1.01f) + 0.1f);
    return std::max(v, 0.0);
  };
  for (int64_t c = 0; c < C; ++c) {
    double want = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) want += f(av[static_cast<size_t>(((n * H + h) * W + w) * C + c)]);
    CHECK(sums[static_cast<size_t>(c)] == Approx(want).epsilon(1e-4));
  }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w) {
        double want = 0;
        for (int64_t c = 0; c < C; ++c) want = std::max(want, f(av[static_cast<size_t>(((n * H + h) * W + w) * C + c)]));
        CHECK(maxes[static_cast<size_t>((n * H + h) * W + w)] == Approx(want).epsilon(1e-4));
      }
}

TEST_CASE("a reduction read through a permute is stored in its own order, then transposed", "[schedule]") {
  // conv2d sums with the output channels innermost (NHWC) and returns the NCHW view. Fused into the
  // output's kernel, that kernel looped in NCHW order and stored each vector of channels scattered a
  // plane apart; stored on its own, the conv writes NHWC contiguously and a transpose makes the NCHW
  // output. With fewer than 8 output channels there is no vector of them to fill: the conv sums with the
  // pixels innermost and stores NCHW itself, reading a padded copy of the input (a padded view would be
  // masked lane by lane along the row). Values against a direct convolution on the host.
  for (int64_t K : {24, 3}) {
    INFO("K = " << K);
    const int64_t N = 2, C = 3, H = 6, W = 5;
    Tensor x = (rand_like_shape({N, C, H, W}) * 0.25).realize(), w = (rand_like_shape({K, C, 3, 3}) * 0.125).realize();
    Tensor y = x.conv2d(w, std::nullopt, {1, 1}, {1, 1});
    Schedule s = Tensor::schedule({y});
    const ScheduleItem* conv = nullptr;
    for (const ScheduleItem& item : s.items) {
      std::vector<UOpPtr> nodes = toposort(item.ast);
      if (std::any_of(nodes.begin(), nodes.end(), [](const UOpPtr& u) { return u->op == Op::REDUCE; })) conv = &item;
    }
    REQUIRE(conv != nullptr);
    CHECK((conv != &s.items.back()) == (K == 24));  // the transpose runs after it; with 3 channels none
    if (K == 3) CHECK(s.items.size() == 2);          // the padded copy, then the conv
    const UOpPtr& index = conv->ast->src[0]->src[0]->src[1];
    int64_t contiguous = -1;
    for (const UOpPtr& u : toposort(conv->ast))
      if (u->op == Op::RANGE && index_stride(index, u) == 1) contiguous = u->end()->vmax();
    CHECK(contiguous == (K == 24 ? K : W));
    std::vector<float> xv = x.to_vector<float>(), wv = w.to_vector<float>(), got = y.to_vector<float>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t i = 0; i < H; ++i)
          for (int64_t j = 0; j < W; ++j) {
            double want = 0;
            for (int64_t c = 0; c < C; ++c)
              for (int64_t r = 0; r < 3; ++r)
                for (int64_t t = 0; t < 3; ++t) {
                  int64_t a = i + r - 1, b = j + t - 1;
                  if (a < 0 || a >= H || b < 0 || b >= W) continue;
                  want += double(xv[static_cast<size_t>(((n * C + c) * H + a) * W + b)]) * wv[static_cast<size_t>(((k * C + c) * 3 + r) * 3 + t)];
                }
            CHECK(got[static_cast<size_t>(((n * K + k) * H + i) * W + j)] == Approx(want).margin(1e-5));
          }
  }
}

TEST_CASE("an index a pad's gate bounds simplifies under the gate: cat of a regrouped channels-last tensor needs no div or mod", "[schedule]") {
  // x is NCHW over an NHWC buffer and regrouped as GroupNorm does ((N, G, C/G*H*W) and back), so reading
  // it takes div/mod of its flat offset; cat puts it at channels 6..9 behind a pad whose gate says
  // 6 <= c < 10. Under that gate the offset's division folds away; outside it nothing is read.
  const int64_t N = 2, C = 4, H = 3, W = 8, G = 2;
  Tensor nhwc = (rand_like_shape({N, H, W, C}) * 0.25).realize();
  Tensor x = nhwc.permute({0, 3, 1, 2}).reshape({N, G, C / G * H * W}).reshape({N, C, H, W});
  Tensor other = (rand_like_shape({N, 6, H, W}) * 0.5).realize();
  Tensor out = Tensor::cat({other, x}, 1) + 1.0;
  Schedule s = Tensor::schedule({out});
  REQUIRE(s.items.size() == 1);
  for (const UOpPtr& u : toposort(s.items[0].ast)) CHECK((u->op != Op::IDIV && u->op != Op::MOD));
  std::vector<float> got = out.to_vector<float>(), xv = nhwc.to_vector<float>(), ov = other.to_vector<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < 6 + C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) {
          float want = c < 6 ? ov[static_cast<size_t>(((n * 6 + c) * H + h) * W + w)] : xv[static_cast<size_t>(((n * H + h) * W + w) * C + c - 6)];
          CHECK(got[static_cast<size_t>(((n * (6 + C) + c) * H + h) * W + w)] == want + 1.0f);
        }
}

TEST_CASE("a residual stream read by every layer is stored once it reads more than two buffers, not re-read by each", "[schedule]") {
  // x = a0 + a1 + ... + ai, summed after every add as a LayerNorm would: recomputed in each reduction,
  // the i-th would read i+1 buffers (quadratic in the depth); stored, no kernel reads more than three.
  const int64_t R = 64, C = 32;
  std::vector<Tensor> a;
  for (int i = 0; i < 7; ++i) a.push_back((rand_like_shape({R, C}) * (0.1 * (i + 1))).realize());
  Tensor x = a[0];
  std::vector<Tensor> outs;
  for (int i = 1; i < 7; ++i) {
    x = x + a[static_cast<size_t>(i)];
    outs.push_back(x.sum({1}));
  }
  outs.push_back(x);
  for (const ScheduleItem& item : Tensor::schedule(outs).items) CHECK(item.bufs.size() <= 4);  // an output and at most 3 inputs
  std::vector<std::vector<float>> av;
  for (Tensor& t : a) av.push_back(t.to_vector<float>());
  for (int i = 1; i < 7; ++i) {
    std::vector<float> got = outs[static_cast<size_t>(i - 1)].to_vector<float>();
    for (int64_t r = 0; r < R; ++r) {
      double want = 0;
      for (int64_t c = 0; c < C; ++c) {
        float v = av[0][static_cast<size_t>(r * C + c)];
        for (int j = 1; j <= i; ++j) v += av[static_cast<size_t>(j)][static_cast<size_t>(r * C + c)];
        want += v;
      }
      CHECK(got[static_cast<size_t>(r)] == Approx(want).epsilon(1e-5).margin(1e-4));
    }
  }
}

TEST_CASE("gather reads the element its index names: an Embedding lookup is one kernel with no reduction over the vocabulary", "[schedule]") {
  const int64_t V = 50, D = 8;
  std::vector<float> table(V * D);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>(i) * 0.5f - 7;
  Tensor w = Tensor::from_vector(table, {V, D});
  std::vector<int32_t> ids = {3, 0, 49, 3, 17};
  Tensor rows = w.gather(0, Tensor::from_vector(ids, {5, 1}).expand({5, D})) * 2.0;
  Schedule s = Tensor::schedule({rows});
  REQUIRE(s.items.size() == 1);
  for (const UOpPtr& u : toposort(s.items[0].ast)) CHECK(u->op != Op::REDUCE);
  std::vector<float> got = rows.to_vector<float>();
  for (size_t r = 0; r < ids.size(); ++r)
    for (int64_t d = 0; d < D; ++d) CHECK(got[r * D + static_cast<size_t>(d)] == table[static_cast<size_t>(ids[r] * D + d)] * 2);
}

TEST_CASE("a slice of memory starts at a launch variable: a loop over x[t] is one kernel for every t", "[schedule]") {
  // Each step of an RNN reads its rows of the input projection (plus a bias, fused): with the start a
  // constant, every step was another kernel to compile.
  Tensor x = rand_like_shape({8, 4, 6}).realize(), b = rand_like_shape({6}).realize();
  std::vector<float> xv = x.to_vector<float>(), bv = b.to_vector<float>();
  std::set<const UOp*> asts;
  size_t lowered = realize_stats().kernels_lowered;
  for (int64_t t = 0; t < 8; ++t) {
    Tensor xt = x.slice(0, t, t + 1).reshape({4, 6});
    Tensor step = ((xt + b) * 2.0).realize();
    Schedule s = Tensor::schedule({(xt + b) * 2.0});
    REQUIRE(s.items.size() == 1);
    asts.insert(s.items[0].ast.get());
    REQUIRE(s.items[0].var_vals.size() == 1);
    CHECK(s.items[0].var_vals[0].second == t);
    std::vector<float> got = step.to_vector<float>();
    for (size_t i = 0; i < 24; ++i) CHECK(got[i] == (xv[size_t(t) * 24 + i] + bv[i % 6]) * 2.0f);
  }
  CHECK(asts.size() == 1);
  CHECK(realize_stats().kernels_lowered - lowered <= 1);
  // A slice of padded values keeps its constant start: the simplifier folds the pad's gate with it.
  Schedule padded = Tensor::schedule({x.pad({{0, 0}, {1, 1}, {0, 0}}).shrink({{2, 3}, {0, 6}, {0, 6}}) + 1.0});
  REQUIRE(padded.items.size() == 1);
  CHECK(padded.items[0].var_vals.empty());
}

TEST_CASE("nearest interpolation by an integer factor, up or down, reads its input as a view", "[schedule]") {
  // x * 2 resampled: one kernel reading x and writing the output, no index buffer gathered through
  // (2x upsampling repeats each input twice; 0.5x reads every other one), and the values are those.
  Tensor x = rand_like_shape({2, 3, 4, 6});
  std::vector<float> in = x.to_vector<float>();
  for (auto [h, w] : {std::pair<int64_t, int64_t>{8, 12}, {2, 3}, {12, 6}}) {
    CAPTURE(h, w);
    Tensor y = nn::interpolate(x * 2.0, {h, w}, "nearest");
    Schedule s = Tensor::schedule({y});
    REQUIRE(s.items.size() == 1);
    CHECK(s.items[0].bufs.size() == 2);
    std::vector<float> got = y.to_vector<float>();
    for (int64_t nc = 0; nc < 6; ++nc)
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < w; ++j) {
          int64_t si = i * 4 / h, sj = j * 6 / w;  // PyTorch's nearest: floor(out * in / size)
          CHECK(got[static_cast<size_t>((nc * h + i) * w + j)] == 2 * in[static_cast<size_t>((nc * 4 + si) * 6 + sj)]);
        }
  }
}

TEST_CASE("nearest interpolation through views reads what a gather at PyTorch's positions reads", "[schedule]") {
  // Every size from 1..7 to 1..17 (integer factors become views, the rest runs of views or a gather),
  // against index_select at floor(o * float(in / out)), clamped: PyTorch's nearest.
  for (int64_t in = 1; in <= 7; ++in)
    for (int64_t out = 1; out <= 17; ++out) {
      CAPTURE(in, out);
      Tensor x = rand_like_shape({2, in}) + Tensor::arange(2 * in, dtypes::float32).reshape({2, in});
      std::vector<int64_t> picks;
      float scale = static_cast<float>(in) / static_cast<float>(out);
      for (int64_t o = 0; o < out; ++o)
        picks.push_back(std::min<int64_t>(static_cast<int64_t>(std::floor(static_cast<float>(o) * scale)), in - 1));
      Tensor want = x.index_select(1, Tensor::from_vector(picks, {out}));
      CHECK(nn::interpolate(x.reshape({1, 2, in}), nn::InterpolateOptions().size({out})).reshape({2, out}).to_vector<float>() ==
            want.to_vector<float>());
    }
}

TEST_CASE("bilinear upsampling by 2 reads its input through views, not an (out x in) table", "[schedule]") {
  // Each output reads two inputs: the taps' views times an axis of 16 weights, summed, one axis after
  // the other. The table it replaced (16 x 8 weights and a mask) read every input of the axis for each
  // output.
  Tensor x = rand_like_shape({2, 3, 8, 8});
  Schedule s = Tensor::schedule({nn::interpolate(x, {16, 16}, "bilinear")});
  CHECK(s.items.size() <= 2);
  for (const ScheduleItem& item : s.items)
    for (const UOpPtr& b : item.bufs) {
      int64_t size = b->arg_as<BufferArg>().size;
      CHECK((size == 16 || size >= 2 * 3 * 8 * 8));
      if (size == 16) CHECK(b->dtype == dtypes::float32);
    }
}
