// The ground truth of a synthetic fleet: which bubbles the generator planted,
// and how long each cause lasts in each event-time window.
//
// The truth comes from construction, never from an analyzer: the generator
// knows every kernel it placed, the launch call of each, the class of every
// CPU event it emitted (sync, allocator, data loading, launch, or plain
// Python with no explaining event) and every copy. GapPainter applies the
// attribution rules of docs/semantics.md#attribution to that knowledge, so the
// truth says what a correct analyzer must report: per device and window, busy
// time, bubble time and bubble time per cause, adding up exactly.
#ifndef BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_TRUTH_H_
#define BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_TRUTH_H_

#include <array>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "schemas/bubble_cause.h"

namespace bubblewatch {

// The causes of docs/semantics.md#attribution, shared with the analyzer
// (schemas/bubble_cause.h).
using PlantedCause = BubbleCause;
inline constexpr int kNumPlantedCauses = kNumBubbleCauses;
using CauseNs = std::array<int64_t, kNumPlantedCauses>;

// "host_sync", "launch_overhead", ... as in reports.
inline absl::string_view PlantedCauseName(PlantedCause cause) {
  return BubbleCauseName(cause);
}

// What the generator knows a stretch of the launching thread's time holds.
// kUncovered is time no explaining CPU event covers (Python, framework ops).
enum class PlantedHostClass : uint8_t {
  kSync,
  kAllocator,
  kDataLoading,
  kLaunch,
  kUncovered,
};

struct TimeInterval {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

// A stretch of the launching thread's timeline. Consecutive blocks touch.
struct HostBlock {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  PlantedHostClass host_class = PlantedHostClass::kUncovered;
};

// One part of a gap with a single cause.
struct GapSegment {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  PlantedCause cause = PlantedCause::kUnattributed;
};

// One bubble of a device: [start_ns, end_ns), split into segments that
// cover it exactly, in time order.
struct PlantedGap {
  int32_t device = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  std::vector<GapSegment> segments;
};

// Splits the gap [g0, g1) of one device into causes
// (docs/semantics.md#attribution):
//   1. time covered by a copy in `copies` -> memcpy;
//   2. the rest: if the next kernel's launch started before g0 ->
//      gpu_dependency; else [launch_start, g1) -> launch_overhead and
//      [g0, launch_start) by the host block covering it: sync -> host_sync,
//      allocator, data loading, launch -> launch_overhead; uncovered time ->
//      host_sync if a sync block overlaps [g0, launch_start), else
//      host_compute.
// REQUIRES: g0 < g1; launch_start <= g1; `host` covers [g0, launch_start)
// when launch_start > g0, sorted and touching.
PlantedGap PaintGap(int32_t device, int64_t g0, int64_t g1,
                    int64_t launch_start,
                    const std::deque<TimeInterval>& copies,
                    const std::deque<HostBlock>& host);

// Per device and window: what the generator planted there.
struct TruthWindow {
  int32_t device = 0;
  int64_t window_start_ns = 0;
  int64_t compute_ns = 0;  // Busy (kernel union) time inside the window.
  int64_t bubble_ns = 0;   // Gap time inside the window.
  CauseNs cause_ns{};      // Adds up to bubble_ns.
};

// Accumulates busy intervals and gap segments of several devices into
// event-time windows aligned to multiples of `window_ns` since the epoch,
// splitting intervals at window boundaries.
// REQUIRES: per device, intervals are added in time order.
class TruthAccumulator {
 public:
  explicit TruthAccumulator(int64_t window_ns) : window_ns_(window_ns) {}

  void AddBusy(int32_t device, int64_t start_ns, int64_t end_ns);
  void AddGap(const PlantedGap& gap);

  int64_t window_ns() const { return window_ns_; }
  // Non-empty windows, by device then window start.
  std::vector<TruthWindow> Windows() const;

 private:
  TruthWindow& At(int32_t device, int64_t window_start_ns);

  int64_t window_ns_;
  struct DeviceWindows {
    int64_t first_window_start_ns = 0;
    std::vector<TruthWindow> windows;
  };
  std::vector<DeviceWindows> devices_;  // Indexed by device.
};

// Writes one JSON object per line for each window of a job: first a line
// per device ("scope":"device"), then the job's sum ("scope":"job"):
//   {"job":"J","scenario":"sync","scope":"device","device":0,
//    "window_start_ns":...,"window_end_ns":...,"span_ns":...,
//    "compute_ns":...,"bubble_ns":...,"causes":{"host_sync":...,...}}
// span_ns = compute_ns + bubble_ns: the device's span inside the window.
void WriteTruthJsonLines(absl::string_view job, absl::string_view scenario,
                         int64_t window_ns,
                         const std::vector<TruthWindow>& windows,
                         std::string* out);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_TRUTH_H_
