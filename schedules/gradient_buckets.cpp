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

}  // namespace tpusim
