// Every kernel's backward against central finite differences of L = sum(y * r) for a random r.
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <random>

#include "models/kernels/kernels.hpp"

using namespace tpusim::kernels;

namespace {

std::vector<float> random(std::size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

/// Checks `analytic` (dL/dx) against finite differences of `loss` over up to 40 elements of x.
void check_gradient(const char* what, std::vector<float>& x, const std::function<double()>& loss,
                    const std::vector<float>& analytic, float eps = 1e-2f) {
  REQUIRE(analytic.size() == x.size());
  const std::size_t stride = std::max<std::size_t>(1, x.size() / 40);
  for (std::size_t i = 0; i < x.size(); i += stride) {
    const float keep = x[i];
    x[i] = keep + eps;
    const double up = loss();
    x[i] = keep - eps;
    const double down = loss();
    x[i] = keep;
    const double numeric = (up - down) / (2.0 * eps);
    INFO(what << " element " << i << ": analytic " << analytic[i] << " numeric " << numeric);
    CHECK(std::fabs(analytic[i] - numeric) <= 2e-2 * std::max(1.0, std::fabs(numeric)));
  }
}

}  // namespace

TEST_CASE("dense backward", "[kernels]") {
  std::mt19937 rng(1);
  const I t = 5, k = 7, n = 4;
  auto x = random(t * k, rng), W = random(k * n, rng), b = random(n, rng), r = random(t * n, rng);
  std::vector<float> y(t * n);
  auto loss = [&] {
    dense_forward(x.data(), W.data(), b.data(), y.data(), t, k, n);
    return dot(y, r);
  };
  std::vector<float> dx(t * k), dW(k * n, 0.0f), db(n, 0.0f);
  dense_backward(x.data(), W.data(), r.data(), dx.data(), dW.data(), db.data(), t, k, n);
  check_gradient("dx", x, loss, dx);
  check_gradient("dW", W, loss, dW);
  check_gradient("db", b, loss, db);
}

TEST_CASE("relu, gelu and residual add backward", "[kernels]") {
  std::mt19937 rng(2);
  const I n = 50;
  auto x = random(n, rng), r = random(n, rng);
  std::vector<float> y(n), dx(n);
  auto relu_loss = [&] {
    relu_forward(x.data(), y.data(), n);
    return dot(y, r);
  };
  relu_loss();
  relu_backward(y.data(), r.data(), dx.data(), n);
  for (auto& v : x)
    if (std::fabs(v) < 0.02f) v = 0.5f;  // stay away from the kink
  relu_loss();
  relu_backward(y.data(), r.data(), dx.data(), n);
  check_gradient("relu", x, relu_loss, dx);
  auto gelu_loss = [&] {
    gelu_forward(x.data(), y.data(), n);
    return dot(y, r);
  };
  gelu_backward(x.data(), r.data(), dx.data(), n);
  check_gradient("gelu", x, gelu_loss, dx);
  auto z = random(n, rng);
  add(x.data(), z.data(), y.data(), n);
  for (I i = 0; i < n; ++i) CHECK(y[i] == x[i] + z[i]);
}

TEST_CASE("layer norm backward", "[kernels]") {
  std::mt19937 rng(3);
  const I rows = 4, cols = 9;
  auto x = random(rows * cols, rng), g = random(cols, rng), b = random(cols, rng),
       r = random(rows * cols, rng);
  std::vector<float> y(rows * cols), mean(rows), rstd(rows);
  auto loss = [&] {
    layernorm_forward(x.data(), g.data(), b.data(), y.data(), mean.data(), rstd.data(), rows, cols);
    return dot(y, r);
  };
  loss();
  std::vector<float> dx(rows * cols), dg(cols, 0.0f), dbeta(cols, 0.0f);
  layernorm_backward(x.data(), g.data(), mean.data(), rstd.data(), r.data(), dx.data(), dg.data(),
                     dbeta.data(), rows, cols);
  check_gradient("dx", x, loss, dx);
  check_gradient("dgamma", g, loss, dg);
  check_gradient("dbeta", b, loss, dbeta);
}

TEST_CASE("RMSNorm forward by hand, backward against finite differences", "[kernels]") {
  // One row (3, 4): mean of squares 12.5, y = x / sqrt(12.5 + eps) * gamma.
  std::vector<float> x1 = {3, 4}, g1 = {1, 2}, y1(2), rstd1(1);
  rmsnorm_forward(x1.data(), g1.data(), y1.data(), rstd1.data(), 1, 2);
  CHECK(rstd1[0] == Approx(1 / std::sqrt(12.5 + 1e-5)));
  CHECK(y1[0] == Approx(3 / std::sqrt(12.5)).epsilon(1e-5));
  CHECK(y1[1] == Approx(8 / std::sqrt(12.5)).epsilon(1e-5));
  std::mt19937 rng(5);
  const I rows = 4, cols = 9;
  auto x = random(rows * cols, rng), g = random(cols, rng), r = random(rows * cols, rng);
  std::vector<float> y(rows * cols), rstd(rows);
  auto loss = [&] {
    rmsnorm_forward(x.data(), g.data(), y.data(), rstd.data(), rows, cols);
    return dot(y, r);
  };
  loss();
  std::vector<float> dx(rows * cols), dg(cols, 0.0f);
  rmsnorm_backward(x.data(), g.data(), rstd.data(), r.data(), dx.data(), dg.data(), rows, cols);
  check_gradient("dx", x, loss, dx);
  check_gradient("dgamma", g, loss, dg);
}

TEST_CASE("softmax cross-entropy backward", "[kernels]") {
  std::mt19937 rng(4);
  const I rows = 6, classes = 5;
  auto logits = random(rows * classes, rng, 2.0f);
  std::vector<std::int32_t> targets = {0, 4, 2, 2, 1, 3};
  std::vector<float> probs(rows * classes), dl(rows * classes);
  auto loss = [&] {
    return softmax_xent_forward(logits.data(), targets.data(), probs.data(), rows, classes, 0.5);
  };
  loss();
  softmax_xent_backward(probs.data(), targets.data(), dl.data(), rows, classes, 0.5);
  check_gradient("dlogits", logits, loss, dl, 1e-3f);
}

TEST_CASE("embedding backward", "[kernels]") {
  std::mt19937 rng(5);
  const I vocab = 7, width = 3, rows = 5;
  auto table = random(vocab * width, rng), r = random(rows * width, rng);
  std::vector<std::int32_t> ids = {1, 3, 1, 6, 0};
  std::vector<float> out(rows * width), dtable(vocab * width, 0.0f);
  auto loss = [&] {
    embedding_forward(ids.data(), table.data(), out.data(), rows, width);
    return dot(out, r);
  };
  embedding_backward(ids.data(), r.data(), dtable.data(), rows, width);
  check_gradient("dtable", table, loss, dtable);
}

TEST_CASE("causal multi-head attention backward", "[kernels]") {
  std::mt19937 rng(6);
  const I B = 2, S = 4, H = 2, D = 3;
  auto qkv = random(B * S * 3 * H * D, rng), r = random(B * S * H * D, rng);
  std::vector<float> ctx(B * S * H * D), probs(B * H * S * S), dqkv(qkv.size());
  auto loss = [&] {
    attention_forward(qkv.data(), ctx.data(), probs.data(), B, S, H, D);
    return dot(ctx, r);
  };
  loss();
  // Causality: the first position attends only to itself.
  CHECK(probs[0] == Approx(1.0f));
  attention_backward(qkv.data(), probs.data(), r.data(), dqkv.data(), B, S, H, D);
  check_gradient("dqkv", qkv, loss, dqkv, 1e-3f);
}

TEST_CASE("conv2d (im2col + GEMM) backward, stride 1 and 2", "[kernels]") {
  for (I stride : {1, 2}) {
    std::mt19937 rng(7 + unsigned(stride));
    const Conv c{2, 5, 5, 3, 3, stride, 4};
    auto x = random(c.n * c.h * c.w * c.cin, rng), W = random(c.k * c.k * c.cin * c.cout, rng);
    auto r = random(c.n * c.out_h() * c.out_w() * c.cout, rng);
    std::vector<float> y(r.size()), dx(x.size()), dW(W.size(), 0.0f);
    auto loss = [&] {
      conv2d_forward(c, x.data(), W.data(), y.data());
      return dot(y, r);
    };
    conv2d_backward(c, x.data(), W.data(), r.data(), dx.data(), dW.data());
    INFO("stride " << stride);
    check_gradient("dx", x, loss, dx);
    check_gradient("dW", W, loss, dW);
  }
}

TEST_CASE("batch norm backward", "[kernels]") {
  std::mt19937 rng(9);
  const I rows = 8, ch = 3;
  auto x = random(rows * ch, rng), g = random(ch, rng), b = random(ch, rng), r = random(rows * ch, rng);
  std::vector<float> y(rows * ch), mean(ch), rstd(ch);
  auto loss = [&] {
    batchnorm_forward(x.data(), g.data(), b.data(), y.data(), mean.data(), rstd.data(), rows, ch);
    return dot(y, r);
  };
  loss();
  std::vector<float> dx(rows * ch), dg(ch, 0.0f), db(ch, 0.0f);
  batchnorm_backward(x.data(), g.data(), mean.data(), rstd.data(), r.data(), dx.data(), dg.data(), db.data(),
                     rows, ch);
  check_gradient("dx", x, loss, dx);
  check_gradient("dgamma", g, loss, dg);
  check_gradient("dbeta", b, loss, db);
}

TEST_CASE("average and max pooling backward", "[kernels]") {
  std::mt19937 rng(10);
  const Pool p{2, 5, 5, 2, 3, 2};
  auto x = random(p.n * p.h * p.w * p.c, rng), r = random(p.n * p.out_h() * p.out_w() * p.c, rng);
  std::vector<float> y(r.size()), dx(x.size());
  auto avg = [&] {
    avgpool_forward(p, x.data(), y.data());
    return dot(y, r);
  };
  avgpool_backward(p, r.data(), dx.data());
  check_gradient("avg", x, avg, dx);
  auto mx = [&] {
    maxpool_forward(p, x.data(), y.data());
    return dot(y, r);
  };
  maxpool_backward(p, x.data(), r.data(), dx.data());
  check_gradient("max", x, mx, dx, 1e-3f);
}

TEST_CASE("a layer norm computed over pieces of its rows equals the whole rows' (mesh layouts split them)",
          "[kernels]") {
  std::mt19937 rng(11);
  const I rows = 5, cols = 12, half = 7;  // pieces of 7 and 5 columns
  auto x = random(std::size_t(rows * cols), rng), gamma = random(std::size_t(cols), rng),
       beta = random(std::size_t(cols), rng), dy = random(std::size_t(rows * cols), rng);
  std::vector<float> y(x.size()), mean(static_cast<std::size_t>(rows)), rstd(static_cast<std::size_t>(rows)),
      dx(x.size()), dg(gamma.size()), db(beta.size());
  layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rows, cols);
  layernorm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), dx.data(), dg.data(),
                     db.data(), rows, cols);
  // The same rows as two pieces of columns, each with its own copy of x, dy and the weights.
  auto piece = [&](const std::vector<float>& v, I first, I width, I row_len) {
    std::vector<float> p;
    for (I r = 0; r < (row_len == cols ? rows : 1); ++r)
      for (I j = first; j < first + width; ++j) p.push_back(v[std::size_t(r * row_len + j)]);
    return p;
  };
  const I firsts[2] = {0, half}, widths[2] = {half, cols - half};
  std::vector<double> sums(std::size_t(2 * rows), 0.0), part(std::size_t(2 * rows));
  for (int k = 0; k < 2; ++k) {
    layernorm_sums(piece(x, firsts[k], widths[k], cols).data(), part.data(), rows, widths[k]);
    for (std::size_t i = 0; i < sums.size(); ++i) sums[i] += part[i];
  }
  layernorm_statistics(sums.data(), rows, double(cols));
  std::vector<double> gsums(std::size_t(2 * rows), 0.0);
  std::vector<std::vector<float>> dgk(2), dbk(2);
  for (int k = 0; k < 2; ++k) {
    dgk[k].assign(std::size_t(widths[k]), 0.0f);
    dbk[k].assign(std::size_t(widths[k]), 0.0f);
    layernorm_gradient_sums(piece(x, firsts[k], widths[k], cols).data(),
                            piece(gamma, firsts[k], widths[k], 1).data(), sums.data(),
                            piece(dy, firsts[k], widths[k], cols).data(), dgk[k].data(), dbk[k].data(),
                            part.data(), rows, widths[k]);
    for (std::size_t i = 0; i < gsums.size(); ++i) gsums[i] += part[i];
  }
  for (int k = 0; k < 2; ++k) {
    const auto xk = piece(x, firsts[k], widths[k], cols), gk = piece(gamma, firsts[k], widths[k], 1);
    std::vector<float> yk(xk.size()), dxk(xk.size());
    layernorm_apply(xk.data(), gk.data(), piece(beta, firsts[k], widths[k], 1).data(), sums.data(), yk.data(),
                    rows, widths[k]);
    layernorm_gradient_apply(xk.data(), gk.data(), sums.data(), piece(dy, firsts[k], widths[k], cols).data(),
                             gsums.data(), dxk.data(), rows, widths[k], double(cols));
    CHECK(yk == piece(y, firsts[k], widths[k], cols));
    CHECK(dxk == piece(dx, firsts[k], widths[k], cols));
    CHECK(dgk[k] == piece(dg, firsts[k], widths[k], 1));
    CHECK(dbk[k] == piece(db, firsts[k], widths[k], 1));
  }
}

TEST_CASE("a softmax cross-entropy over pieces of its rows equals the whole rows' (a split vocabulary)",
          "[kernels]") {
  std::mt19937 rng(13);
  const I rows = 4, cols = 10, half = 6;  // pieces of 6 and 4 classes
  const auto x = random(std::size_t(rows * cols), rng);
  const std::vector<std::int32_t> targets = {0, 9, 5, 6};  // in the first piece, the second, each
  std::vector<float> probs(x.size()), dx(x.size());
  const double loss = softmax_xent_forward(x.data(), targets.data(), probs.data(), rows, cols, 1.0);
  softmax_xent_backward(probs.data(), targets.data(), dx.data(), rows, cols, 0.25);
  const I firsts[2] = {0, half}, widths[2] = {half, cols - half};
  std::vector<std::vector<float>> pieces(2);
  std::vector<std::vector<double>> stats(2, std::vector<double>(std::size_t(2 * rows)));
  for (int k = 0; k < 2; ++k) {
    for (I r = 0; r < rows; ++r)
      for (I j = firsts[k]; j < firsts[k] + widths[k]; ++j) pieces[k].push_back(x[std::size_t(r * cols + j)]);
    softmax_row_statistics(pieces[k].data(), stats[k].data(), rows, widths[k]);
  }
  softmax_combine_statistics({stats[0].data(), stats[1].data()}, rows);
  CHECK(stats[0] == stats[1]);
  const auto lse = softmax_log_sum_exp(stats[0].data(), rows);
  double piece_loss = 0;
  for (I r = 0; r < rows; ++r)
    piece_loss += lse[std::size_t(r)] - x[std::size_t(r * cols + targets[std::size_t(r)])];
  CHECK(piece_loss == Approx(loss).epsilon(1e-6));
  for (int k = 0; k < 2; ++k) {
    std::vector<float> dk(pieces[k].size());
    softmax_xent_gradient(pieces[k].data(), lse.data(), targets.data(), dk.data(), rows, widths[k], firsts[k],
                          0.25);
    for (I r = 0; r < rows; ++r)
      for (I j = 0; j < widths[k]; ++j)
        CHECK(dk[std::size_t(r * widths[k] + j)] ==
              Approx(dx[std::size_t(r * cols + firsts[k] + j)]).margin(1e-6));
  }
}

TEST_CASE("causal softmax: each row sees its own position and those before, its gradient", "[kernels]") {
  std::mt19937 rng(12);
  const I queries = 4, cols = 4, rows = 2 * queries;  // two sequences of 4 positions
  auto x = random(std::size_t(rows * cols), rng), r = random(std::size_t(rows * cols), rng);
  std::vector<float> y(x.size());
  softmax_forward(x.data(), y.data(), rows, cols, 0.5, queries);
  for (I row = 0; row < rows; ++row) {
    double sum = 0;
    for (I j = 0; j < cols; ++j) {
      if (j > row % queries) CHECK(y[std::size_t(row * cols + j)] == 0.0f);
      sum += y[std::size_t(row * cols + j)];
    }
    CHECK(sum == Approx(1.0));
  }
  std::vector<float> dx(x.size());
  softmax_backward(y.data(), r.data(), dx.data(), rows, cols, 0.5);
  check_gradient(
      "causal softmax", x,
      [&] {
        std::vector<float> out(x.size());
        softmax_forward(x.data(), out.data(), rows, cols, 0.5, queries);
        return dot(out, r);
      },
      dx);
}
