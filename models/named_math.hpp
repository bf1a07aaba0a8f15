// Host math over tensors whose dimensions have names (functional mode): a tensor is row-major
// over its dimensions in the order of its NamedTensor, so an einsum only needs the names.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "models/functional.hpp"

namespace tpusim::named {

using Names = std::vector<std::string>;
using Sizes = std::map<std::string, std::int64_t>;

/// `x` (dimensions `from`, of `size`) laid out with its dimensions in the order `to`.
Tensor permute(const Tensor& x, const Names& from, const Sizes& size, const Names& to);

/// out[on] = sum over the dimensions of a and b absent from out of a[an] * b[bn]: a batched
/// matmul (dimensions in all three are batch, a's others rows, b's others columns).
Tensor einsum(const Tensor& a, const Names& an, const Tensor& b, const Names& bn, const Names& on,
              const Sizes& size);

/// into += x, element by element.
void add_into(Tensor& into, const Tensor& x);

}  // namespace tpusim::named
