// The CPU-bound / GPU-bound verdict of a diagnosis (analysis/diagnosis.h
// documents the rules and thresholds): the attribution's causes, grouped
// into idle classes, utilization and launch lead decide; the gaps are also
// classed by what held up the kernel that ended each, for lead figures.
#ifndef BUBBLEWATCH_ANALYSIS_BOUND_VERDICT_H_
#define BUBBLEWATCH_ANALYSIS_BOUND_VERDICT_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "analysis/device_timeline.h"
#include "analysis/diagnosis.h"
#include "analysis/interval_set.h"
#include "analysis/launch_index.h"
#include "schemas/trace.h"

namespace bubblewatch {

// Classifies the gaps of device timelines into idle classes.
// Borrows `trace` and `launches`, which must outlive it.
class IdleClassifier {
 public:
  IdleClassifier(const Trace& trace, const LaunchIndex& launches);

  // The gaps of each class and the launch leads of the kernels ending them.
  struct GapLeads {
    int64_t sync_gaps = 0;
    int64_t launch_gaps = 0;
    std::vector<int64_t> after_sync;
    std::vector<int64_t> after_launch_gap;
  };

  // Classes `timeline`'s gaps (diagnosis.h, after the verdict rules);
  // `copies` holds the device's memcpy and memset intervals, and a gap they
  // cover entirely is no class. A trailing gap without a next kernel is no
  // class. Counts each sync or launch gap in `leads` and appends the launch
  // lead of the kernel ending it.
  void Classify(const DeviceTimeline& timeline, const IntervalSet& copies,
                GapLeads* leads) const;

 private:
  // Host activity of one thread, or of all threads together.
  struct ThreadActivity {
    std::vector<int64_t> sync_ends;  // Ends of sync-class events, sorted.
    IntervalSet data_loading;
  };
  const ThreadActivity& ActivityOf(uint32_t launch) const;
  // The kernel among those starting at the gap's end whose launch started
  // first (kernels with a known launch before those without), and its
  // launch or LaunchIndex::kNone.
  std::pair<uint32_t, uint32_t> NextKernel(const DeviceTimeline& timeline,
                                           const Gap& gap) const;

  const Trace& trace_;
  const LaunchIndex& launches_;
  std::vector<ThreadActivity> threads_;
  absl::flat_hash_map<uint64_t, size_t> slot_of_thread_;
  ThreadActivity all_threads_;
};

// The attribution's causes grouped into idle classes (diagnosis.h, step 1),
// with the gap counts of `leads`.
IdleBreakdown GroupAttribution(const Attribution& attribution,
                               const IdleClassifier::GapLeads& leads);

// The copies (trace.gpu indices `copies`, memcpy and memset activities of the
// device of `timeline`) inside the timeline's gaps, by kind.
CopyKindBreakdown CopiesInBubbles(const Trace& trace,
                                  const DeviceTimeline& timeline,
                                  const std::vector<uint32_t>& copies);

// Reaches the verdict from `evidence` (file comment of diagnosis.h); `kernels`
// is the number of non-empty kernels. Fills reason and advice.
BoundVerdict DecideVerdict(const VerdictEvidence& evidence, int64_t kernels);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ANALYSIS_BOUND_VERDICT_H_
