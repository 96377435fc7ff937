// The one entry point for reading a profiler file into a Trace, whatever its
// format: the seed's timeline JSON, a PyTorch-profiler (Kineto) Chrome trace
// (.json or .json.gz), an Nsight Systems SQLite export, or one process's NCCL
// Inspector log (its collectives as kernels; docs/analyze.md#inspector-logs).
#ifndef BUBBLEWATCH_INGEST_TRACE_READER_H_
#define BUBBLEWATCH_INGEST_TRACE_READER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ingest/chrome/chrome_trace_reader.h"
#include "schemas/trace.h"

namespace bubblewatch {

enum class TraceFormat { kAuto, kTimeline, kChrome, kNsys, kInspector };

// "auto", "timeline", "chrome", "nsys", "inspector".
absl::string_view TraceFormatName(TraceFormat format);
std::optional<TraceFormat> ParseTraceFormat(absl::string_view name);

struct TraceReadOptions {
  // kAuto decides by content: SQLite magic -> nsys; gzip is opened first;
  // JSON with "traceEvents" -> chrome; JSON with "gpu_kernels" -> timeline;
  // JSON lines of NCCL Inspector records -> inspector (one process's log:
  // ingest/inspector/inspector_log.h; a job's logs together go through
  // BuildInspectorJob).
  TraceFormat format = TraceFormat::kAuto;

  // When set, called now and then while a Chrome trace is converted (every
  // few MB of uncompressed JSON) with the bytes done and the total; the last
  // call has done == total. Not called for the other formats. Default: none.
  std::function<void(uint64_t done_bytes, uint64_t total_bytes)> progress;

  // Threads that parse a Chrome trace's events besides the calling thread
  // (ReadChromeTrace's parse_threads): auto = one less than the cores, at
  // most 3; 0 = the calling thread alone. The result does not depend on it.
  int parse_threads = kChromeParseThreadsAuto;

  // Bounds on one file (0: none), for callers that must not let one file
  // take unbounded time or memory (`produce --watch`). max_bytes: the
  // file's bytes as read, gunzipped (SQLite: its size on disk), checked
  // while inflating, so that a gzip bomb stops at the limit. max_events: its
  // GPU + CPU events, checked as a Chrome trace's events are kept (the
  // other formats: once read, their memory bounded by max_bytes). Past
  // either: kResourceExhausted, "over the limit of N bytes gunzipped" /
  // "over the limit of N events".
  uint64_t max_bytes = 0;
  uint64_t max_events = 0;
};

// Reads the file at `path`.
// Errors: kNotFound and friends for the file system; kDataLoss for a
// truncated gzip; kResourceExhausted past options.max_bytes or max_events;
// kInvalidArgument for content that is not a trace of the format (the message
// says what is wrong and where). Messages do not repeat the path; callers
// prefix it.
absl::StatusOr<Trace> ReadTraceFile(absl::string_view path,
                                    const TraceReadOptions& options = {});

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_TRACE_READER_H_
