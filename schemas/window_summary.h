// WindowSummary: one finalized event-time window of one job — what the
// processor stores (storage/) and publishes (topic bubblewatch.windows), and
// what queries and alerts read back. The wire and disk form is the
// FlatBuffers table of schemas/window_summary.fbs; window_summary_codec.h
// converts.
#ifndef BUBBLEWATCH_SCHEMAS_WINDOW_SUMMARY_H_
#define BUBBLEWATCH_SCHEMAS_WINDOW_SUMMARY_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "schemas/analysis.h"

namespace bubblewatch {

// Units: every `*_ns` field is integer nanoseconds on the events' clock
// (ns since the Unix epoch, or the trace's own clock without one).
struct WindowSummary {
  // Why the window became final (docs/semantics.md#closing-windows).
  enum class ClosedBy : uint8_t {
    kWatermark = 0,    // The job's watermark passed the window's end.
    kIdleTimeout = 1,  // The job sent nothing for the idle timeout.
  };

  std::string job;
  // [window.start_ns, window.end_ns), the job's stats (sums over devices),
  // per-device stats and the top bubbles (gap parts inside the window).
  WindowAnalysis window;
  int64_t gpu_events = 0;   // GPU activities starting in the window.
  int64_t cpu_events = 0;   // CPU events starting in the window.
  int64_t late_events = 0;  // Arrived after the window was final.
  ClosedBy closed_by = ClosedBy::kWatermark;
  // Spread between the newest event starts of the job's hosts when the
  // window closed: clock skew between them plus differences in how late they
  // deliver (0 with one host; windows stored before this field read 0).
  int64_t host_skew_ns = 0;
};

// Compares two summaries field by field (every field of WindowAnalysis, the
// counts and closed_by). Returns true when they are equal. Otherwise, when
// `diff` is not null, sets it to a description of the first difference,
// e.g. "window.devices[1].stats.attribution[host_sync]: 79 vs 80".
bool SameWindow(const WindowSummary& a, const WindowSummary& b,
                std::string* diff = nullptr);

// The name of `closed_by` for reports and JSON: "watermark", "idle_timeout".
absl::string_view ClosedByName(WindowSummary::ClosedBy closed_by);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_SCHEMAS_WINDOW_SUMMARY_H_
