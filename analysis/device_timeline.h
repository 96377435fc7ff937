// DeviceTimeline: the kernels of one GPU in start order, merged into busy
// intervals, and the gaps (bubbles) between them with the kernels on each
// side. The analyzer's first stage; attribution works on its gaps.
#ifndef BUBBLEWATCH_ANALYSIS_DEVICE_TIMELINE_H_
#define BUBBLEWATCH_ANALYSIS_DEVICE_TIMELINE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "analysis/interval_set.h"
#include "schemas/time_types.h"
#include "schemas/trace.h"

namespace bubblewatch {

// A non-empty kernel of the device: its times, its index in Trace::gpu and
// the Trace::cpu index of its launch (UINT32_MAX: none, or not looked up).
// The launch rides along because the gap loop needs it for every gap, and
// looking it up there again cost a cache miss per gap (docs/performance.md).
struct KernelSlot {
  int64_t start_ns;
  int64_t end_ns;
  uint32_t index;
  uint32_t launch = UINT32_MAX;
};
static_assert(sizeof(KernelSlot) == 24, "the launch fills the padding");

// A gap [start_ns, end_ns) between two busy intervals.
struct Gap {
  int64_t start_ns;
  int64_t end_ns;
  uint32_t culprit;     // Trace::gpu index of the kernel that ended at start.
  uint32_t next_begin;  // Positions in kernels() of the kernels starting at
  uint32_t next_end;    // end_ns: [next_begin, next_end). Empty for a
                        // trailing gap, whose next kernel has not arrived.
  bool has_next() const { return next_begin < next_end; }
};

class DeviceTimeline {
 public:
  // Sorts `kernels` (cheaply when they come as a few sorted runs, e.g. one
  // per stream) and merges them. `trace` supplies names for tie-breaks.
  // If `open_until_ns` is after the last kernel's end, the device is taken to
  // be idle until then: a trailing gap [last end, open_until_ns) without a
  // next kernel closes the timeline (the streaming processor's view of a gap
  // whose next kernel has not arrived yet).
  // `scratch`, when given, is the sort's merge buffer, reused across
  // timelines (a fresh one per timeline costs page faults at scale).
  DeviceTimeline(std::vector<KernelSlot> kernels, const Trace& trace,
                 std::optional<EventNs> open_until_ns = std::nullopt,
                 std::vector<KernelSlot>* scratch = nullptr);

  const std::vector<KernelSlot>& kernels() const { return kernels_; }
  const std::vector<Interval>& busy() const { return busy_; }
  const std::vector<Gap>& gaps() const { return gaps_; }
  int64_t compute_ns() const { return compute_ns_; }

 private:
  std::vector<KernelSlot> kernels_;
  std::vector<Interval> busy_;
  std::vector<Gap> gaps_;
  int64_t compute_ns_ = 0;
};

// Sorts by start time, merging existing sorted runs (stably) when there are
// few of them (per-stream input usually is) instead of sorting everything.
// The merges use `scratch` as their buffer (grown as needed, kept for the
// next call); a local one when null.
void SortKernelsByStart(std::vector<KernelSlot>& kernels,
                        std::vector<KernelSlot>* scratch = nullptr);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ANALYSIS_DEVICE_TIMELINE_H_
