// Writes a Trace as a PyTorch-profiler (Kineto) Chrome trace, the JSON
// `torch.profiler` exports, so that synthetic jobs can be put on disk and
// read back by `analyze`, the watcher or any Kineto tool.
//
// ReadChromeTrace (chrome_trace_reader.h) reads the output back to the same
// events: every GPU activity (times, correlation, bytes, name, device,
// stream, kind), CPU event (times, correlation, thread, name, category) and
// collective record (every field that is present), plus rank, world_size
// (`distributedInfo`), host (`host_name`) and job (`bubblewatch_job`). What
// does not travel: the order of the string table (names are interned as
// read), Trace::skipped and Trace::source_format ("chrome" once read);
// `pageable` is the reader's reading of a memcpy's name ("Pageable"), so it
// survives only where the name says it; kOther CPU events (the seed format's)
// have no Kineto category and are written as "cpu_op". Events that are
// byte-identical are one event to the reader (its duplicate filter).
//
// Times: "ts" and "dur" in microseconds with three decimals (exact
// nanoseconds), absolute, as older PyTorch writes them.
#ifndef BUBBLEWATCH_INGEST_CHROME_CHROME_TRACE_WRITER_H_
#define BUBBLEWATCH_INGEST_CHROME_CHROME_TRACE_WRITER_H_

#include <zlib.h>

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "schemas/trace.h"

namespace bubblewatch {

// The Kineto JSON of `trace`. REQUIRES: every collective record has its
// kernel in trace.gpu (same start, end, device, stream and name); a record
// without one is written nowhere.
std::string ChromeTraceJson(const Trace& trace);

// Writes ChromeTraceJson(trace) to `path`, gzip-compressed when the path ends
// in ".gz". Errors: kUnavailable (or the errno's code) from the file system.
absl::Status WriteChromeTraceFile(const Trace& trace, absl::string_view path);

// A Chrome trace JSON written as it is produced: to a file, gzip-compressed
// (zlib, level 1: JSON compresses well even so, and level 6 would be the
// bottleneck; on a thread of its own) when the path ends in ".gz". Memory
// is a few buffers of about kFlushBytes whatever the size of the output, so a
// caller that appends event by event writes any number of events in bounded
// memory.
//
// Use: Open, append the top-level keys to buffer() (JSON text after "{"),
// BeginEvents, then per event Event() and the event's JSON object, Flush
// now and then (cheap when the buffer is small), Close. The sink writes
// the braces and the commas between events.
class ChromeTraceSink {
 public:
  static constexpr size_t kFlushBytes = size_t{1} << 20;

  // Errors: the file cannot be created (kUnavailable with the errno's text).
  static absl::StatusOr<std::unique_ptr<ChromeTraceSink>> Open(
      absl::string_view path);
  ChromeTraceSink(const ChromeTraceSink&) = delete;
  ChromeTraceSink& operator=(const ChromeTraceSink&) = delete;
  ~ChromeTraceSink();  // Closes the file if Close was not called.

  // Where JSON text goes.
  std::string& buffer() { return buffer_; }
  // Opens "traceEvents"; the keys before it must end with a comma if any.
  void BeginEvents();
  // Starts an event: returns buffer() after a separating comma.
  std::string& Event() {
    if (events_++ > 0) buffer_ += ",\n";
    return buffer_;
  }
  // Writes the buffer out once it holds kFlushBytes or more.
  absl::Status Flush() {
    return buffer_.size() >= kFlushBytes ? WriteOut() : absl::OkStatus();
  }
  // Closes the array and the object, writes everything and closes the file.
  absl::Status Close();

  // Event times are written minus this (0 by default): a caller that
  // writes "baseTimeNanoseconds" = base keeps "ts" small, exact in a double.
  void set_time_base_ns(int64_t base) { time_base_ns_ = base; }
  int64_t time_base_ns() const { return time_base_ns_; }

  int64_t events() const { return events_; }
  // Uncompressed bytes written so far (the buffer included).
  uint64_t bytes() const { return written_ + buffer_.size(); }

 private:
  explicit ChromeTraceSink(std::string path) : path_(std::move(path)) {}
  absl::Status WriteOut();
  // The gzip thread: deflates the full buffers queued by WriteOut, so that
  // formatting and compressing use two cores (deflate costs more than the
  // formatting). At most kMaxQueued buffers wait: memory stays bounded.
  void Compress();
  void StopCompressor();

  static constexpr size_t kMaxQueued = 2;
  std::string path_;
  gzFile gz_ = nullptr;
  FILE* file_ = nullptr;
  std::string buffer_;
  uint64_t written_ = 0;
  int64_t events_ = 0;
  int64_t time_base_ns_ = 0;
  std::thread compressor_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;   // Guarded by mu_.
  std::vector<std::string> spare_;  // Emptied buffers to reuse; mu_.
  bool closing_ = false;            // mu_.
  bool failed_ = false;             // mu_: a gzwrite failed.
};

// `s` as a JSON string (quotes included) appended to `out`.
void AppendJsonString(std::string* out, absl::string_view s);
// Nanoseconds as decimal microseconds with three decimals (exact), as
// Kineto's "ts" and "dur" and the reader's inverse.
void AppendMicros(std::string* out, int64_t ns);

// How AppendChromeEvents writes one trace's events into a job's file.
struct ChromeEventOptions {
  // Every event's "pid", or -1 for the trace's own (GPU: the device; CPU:
  // the process folded into CpuEvent::thread).
  int64_t pid = -1;
  // Only GPU events (and collective records) of this device; -1: all.
  int32_t device = -1;
  bool cpu = true;  // Write the CPU events.
  // The clock: each time t becomes t − (offset_ns + drift_ns_per_s ×
  // (t − origin_ns) / 1 s), rounded as ClockSolution::OffsetAt rounds
  // (analysis/clock_graph.h).
  int64_t offset_ns = 0;
  double drift_ns_per_s = 0;
  int64_t origin_ns = 0;
  // Only events overlapping [from_ns, to_ns) after the clock (a
  // zero-length one: starting inside it), written whole. The defaults are
  // the ends of the int64 range: every event.
  int64_t from_ns = std::numeric_limits<int64_t>::min();
  int64_t to_ns = std::numeric_limits<int64_t>::max();

  int64_t ToClock(int64_t t) const {
    if (drift_ns_per_s == 0) return t - offset_ns;
    const double d = drift_ns_per_s * 1e-9 * static_cast<double>(t - origin_ns);
    return t - offset_ns - static_cast<int64_t>(d < 0 ? d - 0.5 : d + 0.5);
  }
};

// Appends the events of `trace` chosen by `options` to `sink` (times less
// the sink's time base), as ChromeTraceJson writes them (names, categories,
// correlation ids, device, stream, bytes and collective args), flushing as it
// goes. Errors: the sink's.
absl::Status AppendChromeEvents(const Trace& trace,
                                const ChromeEventOptions& options,
                                ChromeTraceSink& sink);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_CHROME_CHROME_TRACE_WRITER_H_
