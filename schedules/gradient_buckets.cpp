#include "schedules/gradient_buckets.hpp"

namespace tpusim {

std::vector<std::pair<std::size_t, std::size_t>> combine_in_order(const std::vector<double>& bytes,
                                                                  double threshold_bytes) {
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  for (std::size_t first = 0; first < bytes.size();) {
    std::size_t last = first + 1;
    double combined = bytes[first];
    while (last < bytes.size() && combined + bytes[last] <= threshold_bytes) combined += bytes[last++];
    spans.emplace_back(first, last);
    first = last;
  }
  return spans;
}

std::vector<LayerRange> gradient_buckets(LayerRange range, const std::function<double(int)>& bytes_of,
                                         double threshold_bytes) {
  std::vector<double> bytes;  // backward order: the last layer first
  for (int l = range.last - 1; l >= range.first; --l) bytes.push_back(bytes_of(l));
  std::vector<LayerRange> buckets;
  for (const auto& [first, last] : combine_in_order(bytes, threshold_bytes))
    buckets.push_back({range.last - int(last), range.last - int(first)});
  return buckets;
}

}  // namespace tpusim
