// Nearest-rank percentiles of durations, shared by the launch-lead and
// kernel statistics of a diagnosis.
#ifndef BUBBLEWATCH_ANALYSIS_DURATION_PERCENTILES_H_
#define BUBBLEWATCH_ANALYSIS_DURATION_PERCENTILES_H_

#include <cstdint>
#include <vector>

#include "analysis/diagnosis.h"

namespace bubblewatch {

// The value of rank ceil(p * n) (1-based) of `sorted`, ascending: the
// smallest value with at least a share p of the values at or below it.
// REQUIRES: `sorted` is sorted and not empty; 0 < p <= 1.
int64_t NearestRank(const std::vector<int64_t>& sorted, double p);

// p10/p50/p90 of `values` (any order; sorted in place). All 0 when empty.
DurationPercentiles SummarizeDurations(std::vector<int64_t>& values);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ANALYSIS_DURATION_PERCENTILES_H_
