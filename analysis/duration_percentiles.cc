#include "analysis/duration_percentiles.h"

#include <algorithm>
#include <cmath>

namespace bubblewatch {

int64_t NearestRank(const std::vector<int64_t>& sorted, double p) {
  const size_t n = sorted.size();
  // ceil(p * n) computed in integers where it matters: p * n of 0.9 * 10
  // is 9.000000000000002 in doubles, which must stay rank 9.
  double exact = p * static_cast<double>(n);
  size_t rank = static_cast<size_t>(std::ceil(exact - 1e-9));
  rank = std::clamp<size_t>(rank, 1, n);
  return sorted[rank - 1];
}

DurationPercentiles SummarizeDurations(std::vector<int64_t>& values) {
  DurationPercentiles out;
  out.count = static_cast<int64_t>(values.size());
  if (values.empty()) return out;
  std::sort(values.begin(), values.end());
  out.p10_ns = NearestRank(values, 0.10);
  out.p50_ns = NearestRank(values, 0.50);
  out.p90_ns = NearestRank(values, 0.90);
  return out;
}

}  // namespace bubblewatch
