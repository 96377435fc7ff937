// WindowAccumulator collects the analyzer's per-piece results (busy time,
// bubble time by cause, gap parts) into event-time tumbling windows, so that
// windows add up to the whole-trace analysis (docs/semantics.md#windows).
#ifndef BUBBLEWATCH_ANALYSIS_WINDOW_ACCUMULATOR_H_
#define BUBBLEWATCH_ANALYSIS_WINDOW_ACCUMULATOR_H_

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "schemas/analysis.h"
#include "schemas/bubble_cause.h"

namespace bubblewatch {

// Start of the window holding `t`: the largest multiple of `window_ns` <= t.
// REQUIRES: window_ns > 0.
int64_t WindowStartOf(int64_t t, int64_t window_ns);

// Adds a device's figures into the job's: span, compute, bubble and
// attribution add up; the largest bubble is the largest over devices (ties:
// the earlier; call in device order for "then the lower device").
void AddDeviceStats(const UtilizationStats& device, UtilizationStats& job);

// The order of top bubbles, of a trace and of a window: longest first;
// ties: earliest, then lowest device.
bool LongerBubble(int64_t len_a, int64_t start_a, int32_t dev_a, int64_t len_b,
                  int64_t start_b, int32_t dev_b);

class WindowAccumulator {
 public:
  // `window_ns` == 0 disables accumulation (every call is then a no-op).
  explicit WindowAccumulator(int64_t window_ns) : window_ns_(window_ns) {}

  bool enabled() const { return window_ns_ > 0; }

  // A kernel of `device` started at `start_ns`.
  void CountKernel(int32_t device, int64_t start_ns);
  // `ns` of busy time in the window starting at `window`.
  void AddBusy(int32_t device, int64_t window, int64_t ns);
  // `ns` of bubble attributed to `cause` in the window starting at `window`.
  void AddBubbleCause(int32_t device, int64_t window, BubbleCause cause,
                      int64_t ns);
  // The part [start, end) of gap `gap` of device slot `slot` lies in window
  // `window`.
  void AddGapPart(int32_t device, int64_t window, int64_t start, int64_t end,
                  size_t slot, size_t gap);

  // The windows in start order, devices by id. `culprit(slot, gap)` names the
  // kernel before a gap; `report(slot, gap, lo, hi)` details a gap part.
  std::vector<WindowAnalysis> Finish(
      absl::FunctionRef<KernelRef(size_t, size_t)> culprit,
      absl::FunctionRef<BubbleReport(size_t, size_t, int64_t, int64_t)> report,
      int top_per_window) const;

 private:
  struct GapPart {
    int64_t start;
    int64_t end;
    int32_t device;
    size_t slot;
    size_t gap;
  };
  struct Cell {
    int64_t busy_ns = 0;
    int64_t kernels = 0;
    Attribution attribution{};
    bool has_largest = false;
    GapPart largest{};
    std::vector<GapPart> parts;  // All gap parts; trimmed in Finish.
  };
  Cell& CellAt(int32_t device, int64_t window) {
    return cells_[{window, device}];
  }

  int64_t window_ns_;
  std::map<std::pair<int64_t, int32_t>, Cell> cells_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ANALYSIS_WINDOW_ACCUMULATOR_H_
