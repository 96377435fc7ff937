// The original events of a Chrome (Kineto) trace file, passed through into a
// job timeline (cli/timeline_export.h) as they were written: every field and
// every arg verbatim, only what putting the rank on the job's one clock and
// into its own process must change rewritten (docs/analyze.md#timeline-export).
//
// Two streaming passes over each file, neither holding more than one chunk
// of it and one event: Survey (its top-level metadata, the time shift the
// reader applied, its earliest "ts") before the timeline's header is
// written, then PassThrough, which appends the rewritten events to the
// sink. A file is walked as the reader's cutter walks it (the top-level
// object, "traceEvents" cut into elements by ScanJsonContainer), so the
// events it passes are those the reader saw.
#ifndef BUBBLEWATCH_CLI_CHROME_PASSTHROUGH_H_
#define BUBBLEWATCH_CLI_CHROME_PASSTHROUGH_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ingest/chrome/chrome_trace_writer.h"

namespace bubblewatch {

// One top-level field of a JSON object: the key as written (between its
// quotes, escapes left) and the value's text (a container whole).
struct JsonField {
  std::string_view key;
  std::string_view value;
};

// The top-level fields of the JSON object `object` (its braces included),
// in order, into `fields` (cleared first); nested values are skipped whole,
// not parsed. False when it is not an object the scan can cut (the caller
// then leaves it as it is). REQUIRES: 64 bytes readable past the end
// (ScanJsonContainer's padding).
bool TopLevelFields(std::string_view object, std::vector<JsonField>& fields);

// Walks the Chrome trace at `path` (plain or gzip), streaming: `top` gets
// each top-level key other than "traceEvents" with its value's text, `event`
// each object element of "traceEvents" (64 readable bytes follow it), in
// file order. Elements that are not objects are skipped. Errors: the file's,
// bad JSON where the walk cannot cut it, or the first error of a callback.
absl::Status WalkChromeFile(
    const std::string& path,
    const std::function<absl::Status(std::string_view key,
                                     std::string_view value)>& top,
    const std::function<absl::Status(std::string_view event)>& event);

// What the first pass learns of a file.
struct ChromeFileSurvey {
  // Every top-level key but "traceEvents", in file order, value as written.
  std::vector<std::pair<std::string, std::string>> metadata;
  // What the reader added to every time of the file (its
  // "baseTimeNanoseconds" where the reader applied it: every kept event
  // starting before it; chrome_trace_reader.h), else 0.
  int64_t shift_ns = 0;
  // The earliest "ts" of any event (kept or not), shifted; nullopt if none.
  std::optional<int64_t> min_start_ns;
  int64_t events = 0;
};

absl::StatusOr<ChromeFileSurvey> SurveyChromeFile(const std::string& path);

// How PassThroughChromeEvents rewrites one file's events.
struct PassThroughOptions {
  int32_t rank = 0;      // Every event's "pid".
  int64_t shift_ns = 0;  // ChromeFileSurvey::shift_ns.
  // The job's clock (offset, drift) and the cut, as for AppendChromeEvents;
  // its pid, device and cpu are not used.
  ChromeEventOptions clock;
  // Flow ids ("s", "t", "f" events' "id") made unique across the ranks of
  // the file: an integer id below 2^36 becomes rank × 2^36 + id, any other
  // the string "RANK:ID". Off for a file of one rank.
  bool remap_flow_ids = false;
};

struct PassThroughStats {
  int64_t events = 0;         // Written.
  int64_t cut = 0;            // Outside the cut, not written.
  int64_t devices_added = 0;  // GPU events given args.device (see below).
};

// Appends every event of the Chrome trace at `path` to `sink`, each as its
// original text with only these values replaced:
//   "ts"   the job's clock: (ts + shift) with the clock's offset and drift
//          removed, less the sink's time base, in microseconds (3 decimals);
//   "dur"  only where the drift changes it (the corrected end less the
//          corrected start), else as written;
//   "pid"  the rank;
//   "id"   of flow events, with remap_flow_ids;
// and one addition: a GPU activity ("X", a kernel / memcpy / memset
// category) without args.device gets "device": its original pid (which the
// reader takes as its device), since the pid no longer says it.
// Events with a "ts" outside the cut are left out; events without one
// (metadata) are all written. Errors: the walk's, the sink's.
absl::StatusOr<PassThroughStats> PassThroughChromeEvents(
    const std::string& path, const PassThroughOptions& options,
    ChromeTraceSink& sink);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_CLI_CHROME_PASSTHROUGH_H_
