#include "analysis/window_accumulator.h"

#include <algorithm>

namespace bubblewatch {
bool LongerBubble(int64_t len_a, int64_t start_a, int32_t dev_a, int64_t len_b,
                  int64_t start_b, int32_t dev_b) {
  if (len_a != len_b) return len_a > len_b;
  if (start_a != start_b) return start_a < start_b;
  return dev_a < dev_b;
}

int64_t WindowStartOf(int64_t t, int64_t window_ns) {
  int64_t q = t / window_ns;
  if (t % window_ns != 0 && t < 0) --q;
  return q * window_ns;
}

void AddDeviceStats(const UtilizationStats& device, UtilizationStats& job) {
  job.span_ns += device.span_ns;
  job.compute_ns += device.compute_ns;
  job.bubble_ns += device.bubble_ns;
  for (int c = 0; c < kNumBubbleCauses; ++c) {
    job.attribution[c] += device.attribution[c];
  }
  if (device.largest_bubble_ns > 0 &&
      (device.largest_bubble_ns > job.largest_bubble_ns ||
       (device.largest_bubble_ns == job.largest_bubble_ns &&
        device.largest_bubble_start_ns < job.largest_bubble_start_ns))) {
    job.largest_bubble_ns = device.largest_bubble_ns;
    job.largest_bubble_start_ns = device.largest_bubble_start_ns;
    job.culprit_before_bubble = device.culprit_before_bubble;
  }
}

void WindowAccumulator::CountKernel(int32_t device, int64_t start_ns) {
  if (!enabled()) return;
  ++CellAt(device, WindowStartOf(start_ns, window_ns_)).kernels;
}

void WindowAccumulator::AddBusy(int32_t device, int64_t window, int64_t ns) {
  if (!enabled()) return;
  CellAt(device, window).busy_ns += ns;
}

void WindowAccumulator::AddBubbleCause(int32_t device, int64_t window,
                                       BubbleCause cause, int64_t ns) {
  if (!enabled()) return;
  CellAt(device, window).attribution[static_cast<int>(cause)] += ns;
}

void WindowAccumulator::AddGapPart(int32_t device, int64_t window,
                                   int64_t start, int64_t end, size_t slot,
                                   size_t gap) {
  if (!enabled()) return;
  Cell& cell = CellAt(device, window);
  GapPart part{start, end, device, slot, gap};
  // Gaps arrive in time order per device, so strict > keeps the earliest.
  if (!cell.has_largest ||
      end - start > cell.largest.end - cell.largest.start) {
    cell.largest = part;
    cell.has_largest = true;
  }
  cell.parts.push_back(part);
}

std::vector<WindowAnalysis> WindowAccumulator::Finish(
    absl::FunctionRef<KernelRef(size_t, size_t)> culprit,
    absl::FunctionRef<BubbleReport(size_t, size_t, int64_t, int64_t)> report,
    int top_per_window) const {
  std::vector<WindowAnalysis> windows;
  std::vector<GapPart> window_parts;
  auto flush_parts = [&]() {
    if (windows.empty()) return;
    size_t top = std::min(window_parts.size(),
                          static_cast<size_t>(std::max(0, top_per_window)));
    std::partial_sort(window_parts.begin(), window_parts.begin() + top,
                      window_parts.end(),
                      [](const GapPart& a, const GapPart& b) {
                        return LongerBubble(a.end - a.start, a.start, a.device,
                                            b.end - b.start, b.start, b.device);
                      });
    for (size_t i = 0; i < top; ++i) {
      const GapPart& p = window_parts[i];
      windows.back().top_bubbles.push_back(
          report(p.slot, p.gap, p.start, p.end));
    }
    window_parts.clear();
  };
  for (const auto& [key, cell] : cells_) {
    const auto& [window, device] = key;
    if (windows.empty() || windows.back().start_ns != window) {
      flush_parts();
      windows.push_back(
          WindowAnalysis{.start_ns = window, .end_ns = window + window_ns_});
    }
    DeviceWindow d;
    d.device = device;
    d.kernels = cell.kernels;
    UtilizationStats& s = d.stats;
    s.compute_ns = cell.busy_ns;
    s.attribution = cell.attribution;
    s.bubble_ns = AttributionTotal(cell.attribution);
    s.span_ns = s.compute_ns + s.bubble_ns;
    if (cell.has_largest) {
      s.largest_bubble_ns = cell.largest.end - cell.largest.start;
      s.largest_bubble_start_ns = cell.largest.start;
      s.culprit_before_bubble = culprit(cell.largest.slot, cell.largest.gap);
    }
    AddDeviceStats(s, windows.back().job);
    windows.back().devices.push_back(std::move(d));
    window_parts.insert(window_parts.end(), cell.parts.begin(),
                        cell.parts.end());
  }
  flush_parts();
  return windows;
}

}  // namespace bubblewatch
