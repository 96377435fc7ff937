// Encodes WindowSummary (schemas/window_summary.h) as the FlatBuffers table of
// schemas/window_summary.fbs and decodes it back. Every field round-trips.
//
// Decoding runs the FlatBuffers Verifier first, so a corrupt or truncated
// record is an error, never an out-of-bounds read.
#ifndef BUBBLEWATCH_SCHEMAS_WINDOW_SUMMARY_CODEC_H_
#define BUBBLEWATCH_SCHEMAS_WINDOW_SUMMARY_CODEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "schemas/window_summary.h"

namespace bubblewatch {

// The schema version this build writes and the only one it reads.
inline constexpr uint16_t kWindowSummarySchemaVersion = 1;

// Returns the FlatBuffers bytes (identifier "BWWS") of `summary`.
std::string EncodeWindowSummary(const WindowSummary& summary);

// How much of a window to decode.
enum class WindowDetail {
  kFull,  // Every field.
  // Every field but the per-device stats: window.devices holds one entry per
  // device with its id and kernel count, its stats left default (zero). For
  // readers of the job as a whole (a job's report reads hundreds of windows;
  // the 8 or so per-device stats are most of each window's decoding).
  kJobLevel,
};

// Verifies and decodes bytes produced by EncodeWindowSummary. `scratch`, when
// given, holds the aligned copy FlatBuffers needs of bytes that are not
// 8-byte aligned; reusing one across calls saves an allocation per window.
// Errors (all kDataLoss, the message says which): fails the FlatBuffers
// Verifier or lacks the "BWWS" identifier; schema_version other than
// kWindowSummarySchemaVersion; an attribution vector whose length is not the
// number of causes (in the parts decoded); an unknown cause or closed_by
// value (one appended to the schema after this build: "unknown closed_by N").
absl::StatusOr<WindowSummary> DecodeWindowSummary(
    absl::string_view bytes, WindowDetail detail = WindowDetail::kFull,
    std::vector<uint64_t>* scratch = nullptr);

namespace fb {
struct WindowSummary;
}  // namespace fb

// One encoded window read in place: verified once, then decoded part by part
// on request. A job's report reads hundreds of windows and keeps only their
// job-level figures and a few of their top bubbles; decoding each window
// whole (every kernel name a heap string) was most of its cost.
// The view borrows the bytes: they must outlive it and be 8-byte aligned.
class WindowSummaryView {
 public:
  // Verifies `bytes`. Errors: as DecodeWindowSummary for the FlatBuffers
  // Verifier, the identifier, schema_version and closed_by; a bad
  // attribution length or cause is reported by the Decode* call that meets
  // it.
  // REQUIRES: bytes.data() is 8-byte aligned.
  static absl::StatusOr<WindowSummaryView> Open(absl::string_view bytes);

  int64_t start_ns() const;
  int64_t end_ns() const;
  int64_t gpu_events() const;
  int64_t cpu_events() const;
  int64_t late_events() const;
  int64_t host_skew_ns() const;      // 0 for windows stored before the field.
  int64_t late_collectives() const;  // 0 likewise.
  // WindowSummary::observed_ns (nullopt when absent).
  std::optional<int64_t> observed_ns() const;
  // WindowSummary::trimmed (nullopt when the window was not trimmed).
  std::optional<WindowTrim> trimmed() const;
  // The collective analysis (multi-rank windows); nullopt when absent.
  // A rank's host equal to that of `like`'s rank at the same index (the
  // previous window of a scan: ranks rarely move) shares its buffer instead
  // of allocating one.
  // The ranks' timelines only `with_timelines` (a report over many windows
  // draws none of them; the timeline endpoint reads one window).
  // Errors: kDataLoss for an unknown key or a bad attribution length.
  absl::StatusOr<std::optional<WindowCollectives>> DecodeCollectives(
      const WindowCollectives* like = nullptr,
      bool with_timelines = false) const;
  WindowSummary::ClosedBy closed_by() const;
  int32_t device_count() const;
  // The job-level stats (sums over devices).
  absl::StatusOr<UtilizationStats> DecodeJobStats() const;

  int32_t top_bubble_count() const;
  // Top bubble i with only its device and times set (no decoding).
  // REQUIRES: 0 <= i < top_bubble_count().
  BubbleReport TopBubbleExtent(int32_t i) const;
  // Top bubble i, whole. REQUIRES: 0 <= i < top_bubble_count().
  absl::StatusOr<BubbleReport> DecodeTopBubble(int32_t i) const;

 private:
  explicit WindowSummaryView(const fb::WindowSummary* root) : root_(root) {}
  const fb::WindowSummary* root_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_SCHEMAS_WINDOW_SUMMARY_CODEC_H_
