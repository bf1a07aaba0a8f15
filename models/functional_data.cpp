// Synthetic data for functional mode: deterministic in seed, step and example index.
#include "models/named_op_function.hpp"

namespace tpusim {

std::uint64_t mix(std::uint64_t a, std::uint64_t b, std::uint64_t c, std::uint64_t d) {
  std::uint64_t x = a;
  for (std::uint64_t v : {b, c, d}) {
    x += 0x9e3779b97f4a7c15ULL + v;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    x ^= x >> 31;
  }
  return x;
}

float unit(std::uint64_t h) { return float(double(h >> 11) * (2.0 / 9007199254740992.0) - 1.0); }

namespace {

class MlpData : public DataSource {
 public:
  MlpData(std::int64_t input, std::int64_t classes) : input_(input), classes_(classes) {}
  Tensor features(const Batch& b) const override {
    Tensor x(std::size_t(b.count * input_));
    for (std::int64_t e = 0; e < b.count; ++e)
      for (std::int64_t j = 0; j < input_; ++j) x[std::size_t(e * input_ + j)] = feature(b, e, j);
    return x;
  }
  std::vector<std::int32_t> targets(const Batch& b) const override {
    std::vector<std::int32_t> t(std::size_t(b.count));
    for (std::int64_t e = 0; e < b.count; ++e) {
      double best = -1e300;
      for (std::int64_t c = 0; c < classes_; ++c) {
        double score = 0;
        for (std::int64_t j = 0; j < input_; ++j)
          score += double(unit(mix(b.seed ^ 0x7ea0, std::uint64_t(c), std::uint64_t(j)))) * feature(b, e, j);
        if (score > best) {
          best = score;
          t[std::size_t(e)] = std::int32_t(c);
        }
      }
    }
    return t;
  }

 private:
  float feature(const Batch& b, std::int64_t e, std::int64_t j) const {
    return unit(mix(b.seed, std::uint64_t(b.step) + 1, std::uint64_t(b.first + e), std::uint64_t(j)));
  }
  std::int64_t input_, classes_;
};

class LmData : public DataSource {
 public:
  LmData(std::int64_t seq, std::int64_t vocab) : seq_(seq), vocab_(vocab) {}
  std::vector<std::int32_t> tokens(const Batch& b) const override { return ids(b, false); }
  std::vector<std::int32_t> targets(const Batch& b) const override { return ids(b, true); }

 private:
  std::vector<std::int32_t> ids(const Batch& b, bool targets) const {
    std::vector<std::int32_t> out(std::size_t(b.count * seq_));
    for (std::int64_t e = 0; e < b.count; ++e)
      for (std::int64_t t = 0; t < seq_; ++t) {
        const auto token = std::int32_t(
            mix(b.seed, std::uint64_t(b.step) + 1, std::uint64_t(b.first + e), std::uint64_t(t)) %
            std::uint64_t(vocab_));
        out[std::size_t(e * seq_ + t)] = targets ? std::int32_t((token + 1) % vocab_) : token;
      }
    return out;
  }
  std::int64_t seq_, vocab_;
};

}  // namespace

std::shared_ptr<const DataSource> mlp_data(std::int64_t input, std::int64_t classes) {
  return std::make_shared<MlpData>(input, classes);
}

std::shared_ptr<const DataSource> lm_data(std::int64_t seq, std::int64_t vocab) {
  return std::make_shared<LmData>(seq, vocab);
}

}  // namespace tpusim
