// The reader of NCCL/RCCL Inspector logs (the profiler plugin in
// plugins/profiler/inspector/ of NVIDIA/nccl): one file per process
// (`<hostname>-pid<PID>.log`, also `.jsonl` and `.gz`), one JSON object a
// line, format versions v4.0 to v5.x as the plugin's writer defines them:
//
//   - a `dump_stats` marker per communicator dump, with `header` (the
//     communicator: `id`, `comm_name`, `rank`, `n_ranks`, `nnodes`),
//     `metadata` (`inspector_output_format_version`, `dump_timestamp_us`,
//     `hostname`, `pid`, ...) and the ring's `coll_dropped_total`,
//     `coll_dropped_since_last_dump`, `p2p_...` (v4.2 and later);
//   - one `coll_perf` or `p2p_perf` record per completed operation, with its
//     own `header` and `metadata` (v4.0 to v4.2) or bare, taking them from
//     the dump marker before it (v4.3 and later);
//   - verbose records add `event_trace_sn` / `event_trace_ts` (the kernel's
//     start and stop per channel, microseconds).
//
// What it promises (docs/analyze.md#inspector-logs): a line that is not a
// JSON object, or a record lacking what it needs, is a counted skip, never
// the end of the file; fields it does not know and versions it does not
// know are read for what is known and counted; ring-buffer drops are
// summed per communicator and reported. Nothing is dropped silently.
#ifndef BUBBLEWATCH_INGEST_INSPECTOR_INSPECTOR_LOG_H_
#define BUBBLEWATCH_INGEST_INSPECTOR_INSPECTOR_LOG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "schemas/trace.h"

namespace bubblewatch {

// One communicator as one process sees it (a record's `header`).
struct InspectorComm {
  std::string id;        // `id`: the communicator's hash ("0x7f8c496ae9f661").
  std::string name;      // `comm_name`; empty when absent.
  int32_t rank = -1;     // This process's rank in it.
  int32_t n_ranks = -1;  // Its size.
  int64_t nnodes = -1;   // Hosts it spans.
  // Ring-buffer drops (docs/analyze.md#inspector-logs): the largest
  // `*_dropped_total` seen, and the sum of `*_dropped_since_last_dump`;
  // the drops are the larger of the two (a lost marker loses its increment).
  int64_t coll_dropped_total = 0;
  int64_t coll_dropped_since_sum = 0;
  int64_t p2p_dropped_total = 0;
  int64_t p2p_dropped_since_sum = 0;
  int64_t coll_dropped() const {
    return coll_dropped_total > coll_dropped_since_sum ? coll_dropped_total
                                                       : coll_dropped_since_sum;
  }
  int64_t p2p_dropped() const {
    return p2p_dropped_total > p2p_dropped_since_sum ? p2p_dropped_total
                                                     : p2p_dropped_since_sum;
  }
};

// One completed operation: a `coll_perf` or a `p2p_perf` record.
struct InspectorOp {
  uint32_t comm = 0;  // Index into InspectorLog::comms.
  uint32_t name = 0;  // Index into InspectorLog::op_names ("AllReduce").
  bool p2p = false;
  int32_t peer = -1;       // p2p: `p2p_peer`, a rank of the communicator.
  int64_t sn = -1;         // `coll_sn` / `p2p_sn`.
  int64_t msg_bytes = -1;  // `*_msg_size_bytes`.
  int64_t exec_us = -1;    // `*_exec_time_us`.
  double algobw_gbs = -1;  // `*_algobw_gbs`.
  double busbw_gbs = -1;   // `*_busbw_gbs`.
  // Verbose records: the earliest `kernel_start_ts` and the latest
  // `kernel_stop_ts` over the channels (microseconds on the host's clock);
  // -1 when absent.
  int64_t kernel_start_us = -1;
  int64_t kernel_stop_us = -1;
  // `*_timing_source` ("kernel_gpu"); index into op_names, -1 absent.
  int32_t timing_source = -1;
  // The dump that wrote it: its `dump_timestamp_us` (the record's own
  // metadata, else its dump marker's; -1 when none), the dump markers read
  // before it (0: none), and its place among the collective records its
  // marker announced (`dump_pos` of `dump_size`; -1 without a marker of its
  // communicator). The live exec-time-only pool orders instances by them
  // (docs/semantics.md#live-inspector-logs).
  int64_t dump_us = -1;
  int32_t dump_marker = 0;
  int32_t dump_pos = -1;
  int32_t dump_size = -1;
};

// One process's log.
struct InspectorLog {
  std::string hostname;  // `metadata.hostname`, else from the file name.
  int64_t pid = -1;      // `metadata.pid`, else from the file name.
  std::string version;   // The first `inspector_output_format_version`.
  std::vector<InspectorComm> comms;
  std::vector<std::string> op_names;  // Operation and timing-source names.
  std::vector<InspectorOp> ops;       // In file order.
  int64_t lines = 0;                  // Non-blank lines.
  int64_t coll_records = 0;           // Kept into ops.
  int64_t p2p_records = 0;
  int64_t dump_markers = 0;     // `dump_stats` records.
  int64_t verbose_records = 0;  // Kept records with kernel timestamps.
  int64_t last_dump_timestamp_us = -1;
  // Every distinct `dump_timestamp_us` in file order (each dump marker's,
  // and records' own metadata's when it changes).
  std::vector<int64_t> dump_timestamps_us;
  // What was not read, by reason: "bad JSON line", "truncated last line",
  // "unknown field 'coll_perf.x'", "unknown format version 'v9.0'",
  // "record without header", ... (every line that was skipped is in
  // exactly one "... (line skipped)" reason; unknown fields and versions
  // count occurrences in lines that were read).
  SkipCounts skipped;

  int64_t coll_dropped() const;
  int64_t p2p_dropped() const;
  // Lines skipped (the reasons ending in "(line skipped)").
  int64_t lines_skipped() const;
};

// True when `head` (the first bytes of a file, gunzipped) looks like an
// Inspector log: its first non-blank line is a JSON object whose text holds
// `"coll_perf"`, `"p2p_perf"`, `"dump_stats"` or
// `"inspector_output_format_version"`.
bool LooksLikeInspectorLog(absl::string_view head);

// LooksLikeInspectorLog of the first 64 KiB of the file at `path`
// (gunzipped). Errors: the file system's, kDataLoss for a corrupt gzip.
absl::StatusOr<bool> FileLooksLikeInspectorLog(absl::string_view path);

// Parses a whole log held in memory. `file_name` (may be empty) supplies the
// host and pid when no metadata names them (`<hostname>-pid<PID>.log`).
InspectorLog ParseInspectorLog(absl::string_view bytes,
                               absl::string_view file_name = "");

// Reads `path` (plain or gzip), streaming: memory is the ops kept plus a
// buffer, not the file. Errors: the file system's, kDataLoss for a corrupt
// gzip stream; kResourceExhausted once it holds more than `max_records`
// records (>= 0; -1: no limit), having read at most one more buffer (1 MiB)
// of the file: what bounds the memory of a huge log. Content problems are
// counted skips, never errors.
absl::StatusOr<InspectorLog> ReadInspectorLog(absl::string_view path,
                                              int64_t max_records = -1);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_INSPECTOR_INSPECTOR_LOG_H_
