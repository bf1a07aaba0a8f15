// fp32 host kernels for functional mode: forward and backward of the layers' building blocks.
// Matrices are row-major; images NHWC. Backward functions ACCUMULATE weight gradients (+=),
// so micro-batches add up, and WRITE input gradients (=). Every backward is checked against
// finite differences in tests/test_kernels.cpp.
#pragma once

#include <cstdint>
#include <vector>

namespace tpusim::kernels {

using I = std::int64_t;

/// C[m x n] = alpha * op(A) . op(B) + beta * C (OpenBLAS sgemm, row-major).
void gemm(bool trans_a, bool trans_b, I m, I n, I k, float alpha, const float* A, const float* B, float beta,
          float* C);

/// y[t x n] = x[t x k] . W[k x n] (+ b[n] when b is non-null).
void dense_forward(const float* x, const float* W, const float* b, float* y, I t, I k, I n);
/// dx = dy . W^T (if dx), dW += x^T . dy, db += column sums of dy (if db).
void dense_backward(const float* x, const float* W, const float* dy, float* dx, float* dW, float* db, I t,
                    I k, I n);

void relu_forward(const float* x, float* y, I n);
/// dx = dy where y > 0 (y: the ReLU output).
void relu_backward(const float* y, const float* dy, float* dx, I n);
/// GELU, tanh approximation.
void gelu_forward(const float* x, float* y, I n);
void gelu_backward(const float* x, const float* dy, float* dx, I n);

/// y = x + r (residual add).
void add(const float* x, const float* r, float* y, I n);

/// Layer norm in pieces, so that a row split over cores (a mesh layout) computes exactly what a
/// whole row does: each piece's per-row sums are added over the pieces, then each piece applies
/// the whole row's statistics. `sums`, `stats`: two doubles per row.
/// Per row of this piece: (sum of x, sum of x^2).
void layernorm_sums(const float* x, double* sums, I rows, I cols);
/// From the whole rows' sums over `n` elements each: (mean, rstd) per row, written over them.
/// Not `centered` (RMSNorm): the mean is 0 and rstd 1 / sqrt(mean of x^2 + eps).
void layernorm_statistics(double* sums, I rows, double n, float eps = 1e-5f, bool centered = true);
/// y = (x - mean) * rstd * gamma + beta over this piece (gamma, beta: the piece's columns; beta
/// null: none, RMSNorm's).
void layernorm_apply(const float* x, const float* gamma, const float* beta, const double* stats, float* y,
                     I rows, I cols);
/// Backward, this piece: dgamma += dy * xhat, dbeta += dy (dbeta null: none), and per row (sum of
/// g, sum of g * xhat) with g = dy * gamma, to be added over the pieces.
void layernorm_gradient_sums(const float* x, const float* gamma, const double* stats, const float* dy,
                             float* dgamma, float* dbeta, double* sums, I rows, I cols);
/// dx = rstd (g - sum g / n - xhat sum(g xhat) / n) from the whole rows' sums; not `centered`
/// (RMSNorm, no mean): dx = rstd (g - xhat sum(g xhat) / n).
void layernorm_gradient_apply(const float* x, const float* gamma, const double* stats, const float* dy,
                              const double* sums, float* dx, I rows, I cols, double n, bool centered = true);

/// Softmax of scale * x over the first visible(r) columns of each row, 0 after them: with
/// causal masking row r is query position query_offset + r % queries and sees the positions up
/// to its own (visible = min(cols, that + 1)); queries = 0: every column is visible.
void softmax_forward(const float* x, float* y, I rows, I cols, double scale = 1, I queries = 0,
                     I query_offset = 0);
/// dx = scale * y * (dy - sum(dy * y)) per row.
void softmax_backward(const float* y, const float* dy, float* dx, I rows, I cols, double scale = 1);

/// Layer norm over rows of `cols`: y = (x - mean) * rstd * gamma + beta; saves mean, rstd per row.
void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                       float* rstd, I rows, I cols, float eps = 1e-5f);
void layernorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                        const float* dy, float* dx, float* dgamma, float* dbeta, I rows, I cols);
/// RMSNorm over rows of `cols` (Zhang and Sennrich 2019): y = x * rstd * gamma, rstd =
/// 1 / sqrt(mean of x^2 + eps); saves rstd per row. Backward: dx = rstd (g - xhat sum(g xhat) / n)
/// with g = dy * gamma, xhat = x * rstd; dgamma += dy * xhat.
void rmsnorm_forward(const float* x, const float* gamma, float* y, float* rstd, I rows, I cols,
                     float eps = 1e-5f);
void rmsnorm_backward(const float* x, const float* gamma, const float* rstd, const float* dy, float* dx,
                      float* dgamma, I rows, I cols);

/// Softmax cross-entropy of `rows` rows of `classes` logits against integer targets. Writes the
/// probabilities, returns the summed loss times `scale`.
double softmax_xent_forward(const float* logits, const std::int32_t* targets, float* probs, I rows, I classes,
                            double scale);
/// dlogits = (probs - onehot(target)) * scale.
void softmax_xent_backward(const float* probs, const std::int32_t* targets, float* dlogits, I rows, I classes,
                           double scale);

/// Softmax cross-entropy over rows split into pieces (a vocabulary split over cores) computes what
/// the whole row does: each piece's per-row (max, sum of exponentials) combine exactly into the
/// whole row's, from which each piece takes the row's log-sum-exp. `stats`: two doubles per row.
/// Per row of this piece: (max, sum of exp(x - max)).
void softmax_row_statistics(const float* x, double* stats, I rows, I cols);
/// Combines the pieces' row statistics: M = max m, S = sum s exp(m - M), written over each piece's.
void softmax_combine_statistics(const std::vector<double*>& pieces, I rows);
/// The log-sum-exp of each row from its (whole-row) statistics.
std::vector<double> softmax_log_sum_exp(const double* stats, I rows);
/// This piece's d logits = (exp(x - lse) - onehot(target)) * scale; the piece's columns start at
/// `first_col` of the row (a target outside them contributes no one-hot).
void softmax_xent_gradient(const float* x, const double* lse, const std::int32_t* targets, float* dx, I rows,
                           I cols, I first_col, double scale);

/// out[r] = table[ids[r]] (rows of `width`).
void embedding_forward(const std::int32_t* ids, const float* table, float* out, I rows, I width);
/// dtable[ids[r]] += dout[r].
void embedding_backward(const std::int32_t* ids, const float* dout, float* dtable, I rows, I width);

/// Multi-head causal self-attention on qkv[b, s, 3, h, d] (q, k, v interleaved as a dense
/// projection produces them): ctx[b, s, h, d] = softmax(q k^T / sqrt(d) + causal mask) v.
/// Saves the probabilities probs[b, h, s, s].
void attention_forward(const float* qkv, float* ctx, float* probs, I b, I s, I h, I d);
void attention_backward(const float* qkv, const float* probs, const float* dctx, float* dqkv, I b, I s, I h,
                        I d);

/// 2D convolution, NHWC, "SAME" padding, square kernel k, stride; weights [k, k, cin, cout].
struct Conv {
  I n, h, w, cin, k, stride, cout;
  I out_h() const { return (h + stride - 1) / stride; }
  I out_w() const { return (w + stride - 1) / stride; }
  I pad() const;  ///< padding before (top/left) giving out_h = ceil(h / stride)
};
void conv2d_forward(const Conv& c, const float* x, const float* W, float* y);
/// dx (if non-null) = transposed convolution of dy; dW += im2col(x)^T . dy.
void conv2d_backward(const Conv& c, const float* x, const float* W, const float* dy, float* dx, float* dW);

/// Batch norm (training: batch statistics) over rows of `channels` (NHWC flattened): saves
/// mean and rstd per channel.
void batchnorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                       float* rstd, I rows, I channels, float eps = 1e-5f);
void batchnorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                        const float* dy, float* dx, float* dgamma, float* dbeta, I rows, I channels);

/// Pooling, NHWC, window k x k, stride, "SAME" padding (padding ignored by max, excluded from
/// the average's count).
struct Pool {
  I n, h, w, c, k, stride;
  I out_h() const { return (h + stride - 1) / stride; }
  I out_w() const { return (w + stride - 1) / stride; }
};
void avgpool_forward(const Pool& p, const float* x, float* y);
void avgpool_backward(const Pool& p, const float* dy, float* dx);
void maxpool_forward(const Pool& p, const float* x, float* y);
void maxpool_backward(const Pool& p, const float* x, const float* dy, float* dx);

}  // namespace tpusim::kernels
