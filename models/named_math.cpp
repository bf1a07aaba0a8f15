#include "models/named_math.hpp"

#include <algorithm>

#include "models/kernels/kernels.hpp"

namespace tpusim::named {

namespace {

bool has(const Names& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

}  // namespace

Tensor permute(const Tensor& x, const Names& from, const Sizes& size, const Names& to) {
  if (from == to) return x;
  const std::size_t rank = from.size();
  std::vector<std::int64_t> stride(rank), to_size(rank), to_stride(rank);
  std::int64_t s = 1;
  for (std::size_t i = rank; i-- > 0;) {
    stride[i] = s;
    s *= size.at(from[i]);
  }
  for (std::size_t j = 0; j < rank; ++j) {
    const std::size_t i = std::size_t(std::find(from.begin(), from.end(), to[j]) - from.begin());
    to_size[j] = size.at(to[j]);
    to_stride[j] = stride[i];
  }
  Tensor y(x.size());
  std::vector<std::int64_t> at(rank, 0);
  for (std::size_t n = 0; n < y.size(); ++n) {
    std::int64_t src = 0;
    for (std::size_t j = 0; j < rank; ++j) src += at[j] * to_stride[j];
    y[n] = x[std::size_t(src)];
    for (std::size_t j = rank; j-- > 0;) {
      if (++at[j] < to_size[j]) break;
      at[j] = 0;
    }
  }
  return y;
}

Tensor einsum(const Tensor& a, const Names& an, const Tensor& b, const Names& bn, const Names& on,
              const Sizes& size) {
  Names batch, m, k, n;
  for (const auto& d : an) {
    if (has(bn, d) && has(on, d))
      batch.push_back(d);
    else if (has(on, d))
      m.push_back(d);
    else if (has(bn, d))
      k.push_back(d);
  }
  for (const auto& d : bn)
    if (has(on, d) && !has(an, d)) n.push_back(d);
  auto product = [&](const Names& v) {
    std::int64_t p = 1;
    for (const auto& d : v) p *= size.at(d);
    return p;
  };
  auto cat = [](Names x, const Names& y, const Names& z) {
    x.insert(x.end(), y.begin(), y.end());
    x.insert(x.end(), z.begin(), z.end());
    return x;
  };
  const std::int64_t B = product(batch), M = product(m), K = product(k), N = product(n);
  const Tensor ap = permute(a, an, size, cat(batch, m, k)), bp = permute(b, bn, size, cat(batch, k, n));
  Tensor c(std::size_t(B * M * N));
  for (std::int64_t i = 0; i < B; ++i)
    kernels::gemm(false, false, M, N, K, 1.0f, ap.data() + i * M * K, bp.data() + i * K * N, 0.0f,
                  c.data() + i * M * N);
  return permute(c, cat(batch, m, n), size, on);
}

void add_into(Tensor& into, const Tensor& x) {
  for (std::size_t i = 0; i < into.size(); ++i) into[i] += x[i];
}

}  // namespace tpusim::named
