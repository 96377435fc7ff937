// Running sums of a job's windows: what a fleet period query needs from
// every window (GPU-time totals, partial windows, capacity), kept by the
// store per window as "the sums of the job's windows before this one" plus
// "this window's own", so that the sums of any run of consecutive windows
// are two reads: through(last) - before(first). See storage/README.md,
// "Running sums", and docs/performance.md for why not buckets.
//
// The sums are integers added in two's complement (unsigned wrap), so a
// difference is exact whatever the running totals have grown to, and a
// window rewritten with other figures (late events) moves every later
// record of its job by the difference.
#ifndef BUBBLEWATCH_STORAGE_WINDOW_SUMS_H_
#define BUBBLEWATCH_STORAGE_WINDOW_SUMS_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "schemas/bubble_cause.h"
#include "schemas/time_types.h"
#include "schemas/window_summary.h"
#include "schemas/window_summary_codec.h"

namespace bubblewatch {

// Sums over a set of windows of the figures a fleet period reports.
struct WindowSums {
  int64_t windows = 0;
  int64_t span_ns = 0;  // Job-level span, summed over windows.
  int64_t compute_ns = 0;
  int64_t bubble_ns = 0;
  std::array<int64_t, kNumBubbleCauses> attribution{};
  // Windows whose job span is under devices x (end - start)
  // (IsPartialWindow in storage/window_queries.h).
  int64_t partial_windows = 0;
  int64_t capacity_ns = 0;  // devices x (end - start), summed.
  // Multi-rank windows (docs/semantics.md#streaming-collectives): windows
  // with a collective part, the GPU time the ranks waited in collectives
  // (comm_wait, summed over ranks) and the wait stragglers caused (wait
  // caused, summed over the window's stragglers). 0 for other windows.
  int64_t collective_windows = 0;
  int64_t comm_wait_ns = 0;
  int64_t straggler_wait_ns = 0;
  // StragglerCostNs (schemas/window_summary.h): the GPU time the window's
  // stragglers cost its job. Added in format 3.
  int64_t straggler_cost_ns = 0;

  // Wrapping (two's complement) addition and subtraction, field by field.
  void Add(const WindowSums& other);
  void Subtract(const WindowSums& other);
  bool operator==(const WindowSums& other) const = default;
};

// The sums of one stored window, read from its encoding exactly as a scan
// reads it (WindowSummaryView::DecodeJobStats, DecodeCollectives,
// device_count, start, end).
// Errors: kDataLoss when the job stats or the collectives do not decode.
absl::StatusOr<WindowSums> SumsOfWindow(const WindowSummaryView& window);

// SumsOfWindow of an encoded window (schemas/window_summary_codec.h),
// copied into `scratch` first when it is not 8-byte aligned.
// Errors: kDataLoss when it does not verify or decode.
absl::StatusOr<WindowSums> SumsOfEncodedWindow(absl::string_view bytes,
                                               std::vector<uint64_t>& scratch);

// One window's record: the sums of every earlier window of its job
// (including ones retention has since deleted) and its own.
inline constexpr int kRunningSumsFormat = 3;

struct RunningSumsRecord {
  WindowSums before;
  WindowSums own;

  WindowSums through() const {
    WindowSums t = before;
    t.Add(own);
    return t;
  }
};

// u8 format=2, then before's and own's fields as little-endian i64s.
// (Format 1, without the three collective fields, is not read: a store whose
// marker says so has its sums rebuilt; kRunningSumsFormat.)
std::string EncodeRunningSums(const RunningSumsRecord& record);
// kDataLoss for a malformed record.
absl::StatusOr<RunningSumsRecord> DecodeRunningSums(absl::string_view bytes);

// The job's newest window's record with its start (SumsLastKey): 8 bytes
// little-endian start, then EncodeRunningSums.
std::string EncodeLastRunningSums(WindowStartNs start_ns,
                                  const RunningSumsRecord& record);
// kDataLoss for a malformed value.
absl::StatusOr<RunningSumsRecord> DecodeLastRunningSums(
    absl::string_view bytes, WindowStartNs* start_ns);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_STORAGE_WINDOW_SUMS_H_
