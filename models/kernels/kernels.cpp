#include "models/kernels/kernels.hpp"

#include <cblas-openblas.h>

#include <algorithm>
#include <cmath>

namespace tpusim::kernels {

void gemm(bool ta, bool tb, I m, I n, I k, float alpha, const float* A, const float* B, float beta,
          float* C) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n),
              int(k), alpha, A, ta ? int(m) : int(k), B, tb ? int(k) : int(n), beta, C, int(n));
}

void dense_forward(const float* x, const float* W, const float* b, float* y, I t, I k, I n) {
  gemm(false, false, t, n, k, 1.0f, x, W, 0.0f, y);
  if (b)
    for (I r = 0; r < t; ++r)
      for (I j = 0; j < n; ++j) y[r * n + j] += b[j];
}

void dense_backward(const float* x, const float* W, const float* dy, float* dx, float* dW, float* db, I t,
                    I k, I n) {
  if (dx) gemm(false, true, t, k, n, 1.0f, dy, W, 0.0f, dx);
  gemm(true, false, k, n, t, 1.0f, x, dy, 1.0f, dW);
  if (db)
    for (I r = 0; r < t; ++r)
      for (I j = 0; j < n; ++j) db[j] += dy[r * n + j];
}

void relu_forward(const float* x, float* y, I n) {
#pragma omp parallel for schedule(static)
  for (I i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0.0f;
}

void relu_backward(const float* y, const float* dy, float* dx, I n) {
#pragma omp parallel for schedule(static)
  for (I i = 0; i < n; ++i) dx[i] = y[i] > 0 ? dy[i] : 0.0f;
}

namespace {
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
}

void gelu_forward(const float* x, float* y, I n) {
  for (I i = 0; i < n; ++i) {
    const float u = kGeluC * (x[i] + 0.044715f * x[i] * x[i] * x[i]);
    y[i] = 0.5f * x[i] * (1.0f + std::tanh(u));
  }
}

void gelu_backward(const float* x, const float* dy, float* dx, I n) {
  for (I i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = kGeluC * (v + 0.044715f * v * v * v);
    const float t = std::tanh(u);
    const float du = kGeluC * (1.0f + 3.0f * 0.044715f * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
}

void add(const float* x, const float* r, float* y, I n) {
#pragma omp parallel for schedule(static)
  for (I i = 0; i < n; ++i) y[i] = x[i] + r[i];
}

void layernorm_sums(const float* x, double* sums, I rows, I cols) {
  for (I r = 0; r < rows; ++r) {
    double sum = 0, squares = 0;
    for (I j = 0; j < cols; ++j) {
      const double v = x[r * cols + j];
      sum += v;
      squares += v * v;
    }
    sums[2 * r] = sum;
    sums[2 * r + 1] = squares;
  }
}

void layernorm_statistics(double* sums, I rows, double n, float eps, bool centered) {
  for (I r = 0; r < rows; ++r) {
    const double mean = centered ? sums[2 * r] / n : 0.0;
    const double var = std::max(0.0, sums[2 * r + 1] / n - mean * mean);
    sums[2 * r] = float(mean);
    sums[2 * r + 1] = float(1.0 / std::sqrt(var + eps));
  }
}

void layernorm_apply(const float* x, const float* gamma, const float* beta, const double* stats, float* y,
                     I rows, I cols) {
  for (I r = 0; r < rows; ++r) {
    const float m = float(stats[2 * r]), rstd = float(stats[2 * r + 1]);
    for (I j = 0; j < cols; ++j)
      y[r * cols + j] = (x[r * cols + j] - m) * rstd * gamma[j] + (beta ? beta[j] : 0.0f);
  }
}

void layernorm_gradient_sums(const float* x, const float* gamma, const double* stats, const float* dy,
                             float* dgamma, float* dbeta, double* sums, I rows, I cols) {
  for (I r = 0; r < rows; ++r) {
    double sum_g = 0, sum_gx = 0;
    for (I j = 0; j < cols; ++j) {
      const I i = r * cols + j;
      const float xhat = float((x[i] - stats[2 * r]) * stats[2 * r + 1]);
      dgamma[j] += dy[i] * xhat;
      if (dbeta) dbeta[j] += dy[i];
      const double g = double(dy[i]) * gamma[j];
      sum_g += g;
      sum_gx += g * xhat;
    }
    sums[2 * r] = sum_g;
    sums[2 * r + 1] = sum_gx;
  }
}

void layernorm_gradient_apply(const float* x, const float* gamma, const double* stats, const float* dy,
                              const double* sums, float* dx, I rows, I cols, double n, bool centered) {
  for (I r = 0; r < rows; ++r) {
    const double mean = stats[2 * r], rstd = stats[2 * r + 1];
    for (I j = 0; j < cols; ++j) {
      const I i = r * cols + j;
      const double xhat = float((x[i] - float(mean)) * float(rstd));
      const double g = double(dy[i]) * gamma[j];
      dx[i] = float(rstd * (g - (centered ? sums[2 * r] / n : 0.0) - xhat * sums[2 * r + 1] / n));
    }
  }
}

void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                       float* rstd, I rows, I cols, float eps) {
  std::vector<double> stats(std::size_t(2 * rows));
  layernorm_sums(x, stats.data(), rows, cols);
  layernorm_statistics(stats.data(), rows, double(cols), eps);
  layernorm_apply(x, gamma, beta, stats.data(), y, rows, cols);
  for (I r = 0; r < rows; ++r) {
    mean[r] = float(stats[std::size_t(2 * r)]);
    rstd[r] = float(stats[std::size_t(2 * r + 1)]);
  }
}

void layernorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                        const float* dy, float* dx, float* dgamma, float* dbeta, I rows, I cols) {
  std::vector<double> stats(std::size_t(2 * rows)), sums(std::size_t(2 * rows));
  for (I r = 0; r < rows; ++r) {
    stats[std::size_t(2 * r)] = mean[r];
    stats[std::size_t(2 * r + 1)] = rstd[r];
  }
  layernorm_gradient_sums(x, gamma, stats.data(), dy, dgamma, dbeta, sums.data(), rows, cols);
  layernorm_gradient_apply(x, gamma, stats.data(), dy, sums.data(), dx, rows, cols, double(cols));
}

void rmsnorm_forward(const float* x, const float* gamma, float* y, float* rstd, I rows, I cols, float eps) {
  std::vector<double> stats(std::size_t(2 * rows));
  layernorm_sums(x, stats.data(), rows, cols);
  layernorm_statistics(stats.data(), rows, double(cols), eps, false);
  layernorm_apply(x, gamma, nullptr, stats.data(), y, rows, cols);
  for (I r = 0; r < rows; ++r) rstd[r] = float(stats[std::size_t(2 * r + 1)]);
}

void rmsnorm_backward(const float* x, const float* gamma, const float* rstd, const float* dy, float* dx,
                      float* dgamma, I rows, I cols) {
  std::vector<double> stats(std::size_t(2 * rows)), sums(std::size_t(2 * rows));
  for (I r = 0; r < rows; ++r) stats[std::size_t(2 * r + 1)] = rstd[r];
  layernorm_gradient_sums(x, gamma, stats.data(), dy, dgamma, nullptr, sums.data(), rows, cols);
  layernorm_gradient_apply(x, gamma, stats.data(), dy, sums.data(), dx, rows, cols, double(cols), false);
}

void softmax_forward(const float* x, float* y, I rows, I cols, double scale, I queries, I query_offset) {
  for (I r = 0; r < rows; ++r) {
    const I visible = queries > 0 ? std::min<I>(cols, query_offset + r % queries + 1) : cols;
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    double m = -INFINITY, sum = 0;
    for (I j = 0; j < visible; ++j) m = std::max(m, scale * xr[j]);
    for (I j = 0; j < visible; ++j) sum += std::exp(scale * xr[j] - m);
    for (I j = 0; j < cols; ++j) yr[j] = j < visible ? float(std::exp(scale * xr[j] - m) / sum) : 0.0f;
  }
}

void softmax_backward(const float* y, const float* dy, float* dx, I rows, I cols, double scale) {
  for (I r = 0; r < rows; ++r) {
    double dot = 0;
    for (I j = 0; j < cols; ++j) dot += double(dy[r * cols + j]) * y[r * cols + j];
    for (I j = 0; j < cols; ++j) dx[r * cols + j] = float(scale * y[r * cols + j] * (dy[r * cols + j] - dot));
  }
}

double softmax_xent_forward(const float* logits, const std::int32_t* targets, float* probs, I rows, I classes,
                            double scale) {
  // Per-row losses summed in row order afterwards: the same total whatever the threads.
  std::vector<double> row_loss(static_cast<std::size_t>(rows));
#pragma omp parallel for schedule(static)
  for (I r = 0; r < rows; ++r) {
    const float* l = logits + r * classes;
    float* p = probs + r * classes;
    const float mx = *std::max_element(l, l + classes);
    double sum = 0;
    for (I j = 0; j < classes; ++j) {
      p[j] = std::exp(l[j] - mx);
      sum += p[j];
    }
    const float inv = float(1.0 / sum);
    for (I j = 0; j < classes; ++j) p[j] *= inv;
    row_loss[std::size_t(r)] = -(double(l[targets[r]] - mx) - std::log(sum));
  }
  double loss = 0;
  for (double v : row_loss) loss += v;
  return loss * scale;
}

void softmax_xent_backward(const float* probs, const std::int32_t* targets, float* dlogits, I rows, I classes,
                           double scale) {
#pragma omp parallel for schedule(static)
  for (I r = 0; r < rows; ++r)
    for (I j = 0; j < classes; ++j)
      dlogits[r * classes + j] = float((probs[r * classes + j] - (j == targets[r] ? 1.0 : 0.0)) * scale);
}

void softmax_row_statistics(const float* x, double* stats, I rows, I cols) {
  for (I r = 0; r < rows; ++r) {
    double m = -INFINITY, e = 0;
    for (I j = 0; j < cols; ++j) m = std::max(m, double(x[r * cols + j]));
    for (I j = 0; j < cols; ++j) e += std::exp(double(x[r * cols + j]) - m);
    stats[2 * r] = m;
    stats[2 * r + 1] = e;
  }
}

void softmax_combine_statistics(const std::vector<double*>& pieces, I rows) {
  for (I r = 0; r < rows; ++r) {
    double m = -INFINITY, e = 0;
    for (const double* p : pieces) m = std::max(m, p[2 * r]);
    for (const double* p : pieces) e += p[2 * r + 1] * std::exp(p[2 * r] - m);
    for (double* p : pieces) {
      p[2 * r] = m;
      p[2 * r + 1] = e;
    }
  }
}

std::vector<double> softmax_log_sum_exp(const double* stats, I rows) {
  std::vector<double> lse(static_cast<std::size_t>(rows));
  for (I r = 0; r < rows; ++r) lse[std::size_t(r)] = stats[2 * r] + std::log(stats[2 * r + 1]);
  return lse;
}

void softmax_xent_gradient(const float* x, const double* lse, const std::int32_t* targets, float* dx, I rows,
                           I cols, I first_col, double scale) {
  for (I r = 0; r < rows; ++r)
    for (I j = 0; j < cols; ++j) {
      const double p = std::exp(double(x[r * cols + j]) - lse[r]);
      dx[r * cols + j] = float((p - (first_col + j == targets[r] ? 1.0 : 0.0)) * scale);
    }
}

void embedding_forward(const std::int32_t* ids, const float* table, float* out, I rows, I width) {
  for (I r = 0; r < rows; ++r)
    std::copy(table + I(ids[r]) * width, table + I(ids[r] + 1) * width, out + r * width);
}

void embedding_backward(const std::int32_t* ids, const float* dout, float* dtable, I rows, I width) {
  for (I r = 0; r < rows; ++r)
    for (I j = 0; j < width; ++j) dtable[I(ids[r]) * width + j] += dout[r * width + j];
}

namespace {

/// Copies head h of example b out of qkv [b, s, 3, h, d] into q, k, v [s, d].
void unpack_head(const float* qkv, I b, I h, I S, I H, I D, float* q, float* k, float* v) {
  for (I t = 0; t < S; ++t)
    for (I e = 0; e < D; ++e) {
      const I base = (b * S + t) * 3 * H * D + h * D + e;
      q[t * D + e] = qkv[base];
      k[t * D + e] = qkv[base + H * D];
      v[t * D + e] = qkv[base + 2 * H * D];
    }
}

}  // namespace

void attention_forward(const float* qkv, float* ctx, float* probs, I B, I S, I H, I D) {
  const float scale = 1.0f / std::sqrt(float(D));
  std::vector<float> q(S * D), k(S * D), v(S * D), c(S * D);
  for (I b = 0; b < B; ++b)
    for (I h = 0; h < H; ++h) {
      unpack_head(qkv, b, h, S, H, D, q.data(), k.data(), v.data());
      float* P = probs + (b * H + h) * S * S;
      gemm(false, true, S, S, D, scale, q.data(), k.data(), 0.0f, P);
      softmax_forward(P, P, S, S, 1.0, S);  // causal: position t sees positions 0..t
      gemm(false, false, S, D, S, 1.0f, P, v.data(), 0.0f, c.data());
      for (I t = 0; t < S; ++t)
        for (I e = 0; e < D; ++e) ctx[((b * S + t) * H + h) * D + e] = c[t * D + e];
    }
}

void attention_backward(const float* qkv, const float* probs, const float* dctx, float* dqkv, I B, I S, I H,
                        I D) {
  const float scale = 1.0f / std::sqrt(float(D));
  std::vector<float> q(S * D), k(S * D), v(S * D), dc(S * D), dP(S * S), dq(S * D), dk(S * D), dv(S * D);
  for (I b = 0; b < B; ++b)
    for (I h = 0; h < H; ++h) {
      unpack_head(qkv, b, h, S, H, D, q.data(), k.data(), v.data());
      for (I t = 0; t < S; ++t)
        for (I e = 0; e < D; ++e) dc[t * D + e] = dctx[((b * S + t) * H + h) * D + e];
      const float* P = probs + (b * H + h) * S * S;
      gemm(true, false, S, D, S, 1.0f, P, dc.data(), 0.0f, dv.data());         // dV = P^T dC
      gemm(false, true, S, S, D, 1.0f, dc.data(), v.data(), 0.0f, dP.data());  // dP = dC V^T
      softmax_backward(P, dP.data(), dP.data(), S, S, scale);  // dS = scale P (dP - sum(dP P))
      gemm(false, false, S, D, S, 1.0f, dP.data(), k.data(), 0.0f, dq.data());  // dQ = dS K
      gemm(true, false, S, D, S, 1.0f, dP.data(), q.data(), 0.0f, dk.data());   // dK = dS^T Q
      for (I t = 0; t < S; ++t)
        for (I e = 0; e < D; ++e) {
          const I base = (b * S + t) * 3 * H * D + h * D + e;
          dqkv[base] = dq[t * D + e];
          dqkv[base + H * D] = dk[t * D + e];
          dqkv[base + 2 * H * D] = dv[t * D + e];
        }
    }
}

I Conv::pad() const {
  const I total = std::max<I>(0, (out_h() - 1) * stride + k - h);
  return total / 2;
}

namespace {

/// im2col for one image: rows = output pixels, columns = (ky, kx, cin).
void im2col(const Conv& c, const float* x, float* cols) {
  const I oh = c.out_h(), ow = c.out_w(), p = c.pad();
  for (I oy = 0; oy < oh; ++oy)
    for (I ox = 0; ox < ow; ++ox) {
      float* row = cols + (oy * ow + ox) * c.k * c.k * c.cin;
      for (I ky = 0; ky < c.k; ++ky)
        for (I kx = 0; kx < c.k; ++kx) {
          const I iy = oy * c.stride + ky - p, ix = ox * c.stride + kx - p;
          float* dst = row + (ky * c.k + kx) * c.cin;
          if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w)
            std::fill(dst, dst + c.cin, 0.0f);
          else
            std::copy(x + (iy * c.w + ix) * c.cin, x + (iy * c.w + ix + 1) * c.cin, dst);
        }
    }
}

void col2im(const Conv& c, const float* cols, float* dx) {
  const I oh = c.out_h(), ow = c.out_w(), p = c.pad();
  for (I oy = 0; oy < oh; ++oy)
    for (I ox = 0; ox < ow; ++ox) {
      const float* row = cols + (oy * ow + ox) * c.k * c.k * c.cin;
      for (I ky = 0; ky < c.k; ++ky)
        for (I kx = 0; kx < c.k; ++kx) {
          const I iy = oy * c.stride + ky - p, ix = ox * c.stride + kx - p;
          if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w) continue;
          const float* src = row + (ky * c.k + kx) * c.cin;
          float* dst = dx + (iy * c.w + ix) * c.cin;
          for (I e = 0; e < c.cin; ++e) dst[e] += src[e];
        }
    }
}

}  // namespace

void conv2d_forward(const Conv& c, const float* x, const float* W, float* y) {
  const I pixels = c.out_h() * c.out_w(), patch = c.k * c.k * c.cin;
  std::vector<float> cols(pixels * patch);
  for (I n = 0; n < c.n; ++n) {
    im2col(c, x + n * c.h * c.w * c.cin, cols.data());
    gemm(false, false, pixels, c.cout, patch, 1.0f, cols.data(), W, 0.0f, y + n * pixels * c.cout);
  }
}

void conv2d_backward(const Conv& c, const float* x, const float* W, const float* dy, float* dx, float* dW) {
  const I pixels = c.out_h() * c.out_w(), patch = c.k * c.k * c.cin;
  std::vector<float> cols(pixels * patch);
  for (I n = 0; n < c.n; ++n) {
    const float* dyn = dy + n * pixels * c.cout;
    im2col(c, x + n * c.h * c.w * c.cin, cols.data());
    gemm(true, false, patch, c.cout, pixels, 1.0f, cols.data(), dyn, 1.0f, dW);
    if (dx) {
      gemm(false, true, pixels, patch, c.cout, 1.0f, dyn, W, 0.0f, cols.data());
      float* dxn = dx + n * c.h * c.w * c.cin;
      std::fill(dxn, dxn + c.h * c.w * c.cin, 0.0f);
      col2im(c, cols.data(), dxn);
    }
  }
}

void batchnorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                       float* rstd, I rows, I ch, float eps) {
  std::vector<double> m(ch, 0.0), v(ch, 0.0);
  for (I r = 0; r < rows; ++r)
    for (I j = 0; j < ch; ++j) m[j] += x[r * ch + j];
  for (I j = 0; j < ch; ++j) m[j] /= double(rows);
  for (I r = 0; r < rows; ++r)
    for (I j = 0; j < ch; ++j) v[j] += (x[r * ch + j] - m[j]) * (x[r * ch + j] - m[j]);
  for (I j = 0; j < ch; ++j) {
    mean[j] = float(m[j]);
    rstd[j] = float(1.0 / std::sqrt(v[j] / double(rows) + eps));
  }
  for (I r = 0; r < rows; ++r)
    for (I j = 0; j < ch; ++j) y[r * ch + j] = (x[r * ch + j] - mean[j]) * rstd[j] * gamma[j] + beta[j];
}

void batchnorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                        const float* dy, float* dx, float* dgamma, float* dbeta, I rows, I ch) {
  std::vector<double> sum_dy(ch, 0.0), sum_dy_xhat(ch, 0.0);
  for (I r = 0; r < rows; ++r)
    for (I j = 0; j < ch; ++j) {
      const double xhat = (x[r * ch + j] - mean[j]) * rstd[j];
      sum_dy[j] += dy[r * ch + j];
      sum_dy_xhat[j] += dy[r * ch + j] * xhat;
    }
  for (I j = 0; j < ch; ++j) {
    dgamma[j] += float(sum_dy_xhat[j]);
    dbeta[j] += float(sum_dy[j]);
  }
  for (I r = 0; r < rows; ++r)
    for (I j = 0; j < ch; ++j) {
      const double xhat = (x[r * ch + j] - mean[j]) * rstd[j];
      dx[r * ch + j] =
          float(gamma[j] * rstd[j] *
                (dy[r * ch + j] - sum_dy[j] / double(rows) - xhat * sum_dy_xhat[j] / double(rows)));
    }
}

namespace {

/// Calls f(n, oy, ox, iy, ix) for every input pixel inside every pooling window.
template <class F>
void for_each_window(const Pool& p, F&& f) {
  const I oh = p.out_h(), ow = p.out_w();
  const I pad = std::max<I>(0, (oh - 1) * p.stride + p.k - p.h) / 2;
  for (I n = 0; n < p.n; ++n)
    for (I oy = 0; oy < oh; ++oy)
      for (I ox = 0; ox < ow; ++ox)
        for (I ky = 0; ky < p.k; ++ky)
          for (I kx = 0; kx < p.k; ++kx) {
            const I iy = oy * p.stride + ky - pad, ix = ox * p.stride + kx - pad;
            if (iy >= 0 && iy < p.h && ix >= 0 && ix < p.w) f(n, oy, ox, iy, ix);
          }
}

}  // namespace

void avgpool_forward(const Pool& p, const float* x, float* y) {
  const I oh = p.out_h(), ow = p.out_w();
  std::vector<float> count(p.n * oh * ow, 0.0f);
  std::fill(y, y + p.n * oh * ow * p.c, 0.0f);
  for_each_window(p, [&](I n, I oy, I ox, I iy, I ix) {
    const I o = (n * oh + oy) * ow + ox;
    count[o] += 1;
    for (I c = 0; c < p.c; ++c) y[o * p.c + c] += x[((n * p.h + iy) * p.w + ix) * p.c + c];
  });
  for (I o = 0; o < p.n * oh * ow; ++o)
    for (I c = 0; c < p.c; ++c) y[o * p.c + c] /= count[o];
}

void avgpool_backward(const Pool& p, const float* dy, float* dx) {
  const I oh = p.out_h(), ow = p.out_w();
  std::vector<float> count(p.n * oh * ow, 0.0f);
  for_each_window(p, [&](I n, I oy, I ox, I, I) { count[(n * oh + oy) * ow + ox] += 1; });
  std::fill(dx, dx + p.n * p.h * p.w * p.c, 0.0f);
  for_each_window(p, [&](I n, I oy, I ox, I iy, I ix) {
    const I o = (n * oh + oy) * ow + ox;
    for (I c = 0; c < p.c; ++c) dx[((n * p.h + iy) * p.w + ix) * p.c + c] += dy[o * p.c + c] / count[o];
  });
}

void maxpool_forward(const Pool& p, const float* x, float* y) {
  const I oh = p.out_h(), ow = p.out_w();
  std::fill(y, y + p.n * oh * ow * p.c, -INFINITY);
  for_each_window(p, [&](I n, I oy, I ox, I iy, I ix) {
    const I o = (n * oh + oy) * ow + ox;
    for (I c = 0; c < p.c; ++c)
      y[o * p.c + c] = std::max(y[o * p.c + c], x[((n * p.h + iy) * p.w + ix) * p.c + c]);
  });
}

void maxpool_backward(const Pool& p, const float* x, const float* dy, float* dx) {
  // The gradient goes to the first maximum of each window (ties broken by scan order).
  const I oh = p.out_h(), ow = p.out_w();
  std::vector<float> y(p.n * oh * ow * p.c);
  maxpool_forward(p, x, y.data());
  std::vector<char> taken(y.size(), 0);
  std::fill(dx, dx + p.n * p.h * p.w * p.c, 0.0f);
  for_each_window(p, [&](I n, I oy, I ox, I iy, I ix) {
    const I o = (n * oh + oy) * ow + ox;
    for (I c = 0; c < p.c; ++c) {
      const I xi = ((n * p.h + iy) * p.w + ix) * p.c + c;
      if (!taken[o * p.c + c] && x[xi] == y[o * p.c + c]) {
        taken[o * p.c + c] = 1;
        dx[xi] += dy[o * p.c + c];
      }
    }
  });
}

}  // namespace tpusim::kernels
