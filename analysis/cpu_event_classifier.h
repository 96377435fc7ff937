// Sorts CPU events into the host-activity classes that can explain GPU idle
// time (docs/semantics.md#cpu-event-classes), by name and category.
#ifndef BUBBLEWATCH_ANALYSIS_CPU_EVENT_CLASSIFIER_H_
#define BUBBLEWATCH_ANALYSIS_CPU_EVENT_CLASSIFIER_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"
#include "schemas/bubble_cause.h"
#include "schemas/trace.h"

namespace bubblewatch {

// Host activity classes, highest priority first: where events of several
// classes overlap, the lowest value wins. kContext events (framework ops,
// Python, annotations that match nothing) explain nothing by themselves.
enum class HostClass : uint8_t {
  kSync = 0,
  kAllocator = 1,
  kDataLoading = 2,
  kLaunch = 3,
  kContext = 4,
};
inline constexpr int kNumExplainingHostClasses = 4;

// The bubble cause time covered by a class is attributed to.
BubbleCause HostClassCause(HostClass host_class);

// `name` without a trailing API version suffix: "cudaLaunchKernel_v7000" ->
// "cudaLaunchKernel" (Nsight Systems writes names that way).
absl::string_view StripApiVersionSuffix(absl::string_view name);

// Classifies one CPU event by its name and category:
//   kSync: Synchronize | aten::item\b | _local_scalar_dense | \.item\(\) |
//          ^cudaMemcpy$ | ^cuMemcpyDtoH(_v2)?$
//   kAllocator: cudaMalloc | cudaFree | cuMemAlloc | cuMemFree | empty_cache |
//          cudaHostAlloc | cuMemHostAlloc
//   kDataLoading: "dataloader" in any case
//   kLaunch: any other CUDA API call (^(cuda|cu[A-Z]) or a CUDA runtime/driver
//          category)
//   kContext: everything else.
// Matching happens after StripApiVersionSuffix. A memcpy call whose copy is
// pageable is also kSync; the analyzer applies that by correlation.
HostClass ClassifyCpuEvent(absl::string_view name, CpuEventCategory category);

// ClassifyCpuEvent for the events of one trace, each distinct (name, CUDA
// API category or not) classified once: the name matching allocates and
// searches, and a trace repeats a few hundred names tens of thousands of
// times. `trace` must outlive the cache and keep its names.
class CpuEventClassCache {
 public:
  explicit CpuEventClassCache(const Trace& trace)
      : trace_(trace), classes_(trace.names.size() * 2, -1) {}

  HostClass Of(const CpuEvent& e) {
    const bool api_category = e.category == CpuEventCategory::kCudaRuntime ||
                              e.category == CpuEventCategory::kCudaDriver;
    int8_t& cached = classes_[size_t{e.name} * 2 + (api_category ? 1 : 0)];
    if (cached < 0) {
      cached = static_cast<int8_t>(
          ClassifyCpuEvent(trace_.Name(e.name), e.category));
    }
    return static_cast<HostClass>(cached);
  }

 private:
  const Trace& trace_;
  std::vector<int8_t> classes_;  // Per name x api category; -1: not yet.
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ANALYSIS_CPU_EVENT_CLASSIFIER_H_
