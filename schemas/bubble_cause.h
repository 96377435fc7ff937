// The causes a bubble microsecond can be attributed to, and the advice that
// goes with each (docs/semantics.md#attribution, #reports).
#ifndef BUBBLEWATCH_SCHEMAS_BUBBLE_CAUSE_H_
#define BUBBLEWATCH_SCHEMAS_BUBBLE_CAUSE_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/strings/string_view.h"

namespace bubblewatch {

// Order is that of docs/semantics.md#attribution and the JSON report's;
// values index Attribution.
enum class BubbleCause : uint8_t {
  kHostSync = 0,
  kLaunchOverhead = 1,
  kAllocator = 2,
  kMemcpy = 3,
  kDataLoading = 4,
  kHostCompute = 5,
  kGpuDependency = 6,
  kUnattributed = 7,
};
inline constexpr int kNumBubbleCauses = 8;

inline constexpr std::array<BubbleCause, kNumBubbleCauses> kAllBubbleCauses = {
    BubbleCause::kHostSync,      BubbleCause::kLaunchOverhead,
    BubbleCause::kAllocator,     BubbleCause::kMemcpy,
    BubbleCause::kDataLoading,   BubbleCause::kHostCompute,
    BubbleCause::kGpuDependency, BubbleCause::kUnattributed,
};

// Nanoseconds of bubble per cause.
using Attribution = std::array<int64_t, kNumBubbleCauses>;

// The snake_case name used in reports and JSON, e.g. "host_sync".
absl::string_view BubbleCauseName(BubbleCause cause);

// Parses a name produced by BubbleCauseName.
std::optional<BubbleCause> ParseBubbleCause(absl::string_view name);

// One or two sentences telling an engineer what to change, from the seeds.
absl::string_view BubbleCauseAdvice(BubbleCause cause);

// The cause with the most time; ties go to the earlier cause in enum order.
// Returns nullopt when every entry is zero.
std::optional<BubbleCause> DominantCause(const Attribution& attribution);

// Sum of all causes.
int64_t AttributionTotal(const Attribution& attribution);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_SCHEMAS_BUBBLE_CAUSE_H_
