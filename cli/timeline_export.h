// `bubblewatch analyze --timeline OUT.json[.gz]`: one Chrome/Perfetto trace
// JSON of a whole job on the job's one clock, with bubblewatch's own tracks
// (docs/analyze.md#timeline-export, docs/semantics.md#timeline-tracks).
//
// Layout: one process per rank (pid = the rank, named "rank N (HOST)" by
// "M" events); each rank's original events with its clock's offset and
// drift removed (docs/semantics.md#clocks): a Chrome (Kineto) input's
// passed through from its file, every field and arg as written but "ts",
// "pid", a drifted "dur" and a flow's "id" (cli/chrome_passthrough.h), with
// its top-level metadata in the header; any other input's (Nsight Systems,
// a trace of several ranks) written from its Trace (names, categories,
// correlation ids, device, stream, bytes, collective args, as the Kineto
// writer writes them: ingest/chrome/chrome_trace_writer.h); and per rank
// the tracks
//   - "bubblewatch: bubbles": each bubble, named by its dominant cause, with
//     the blamed event, the advice and the attribution in args;
//   - "bubblewatch: collectives": each collective kernel as its wait (until
//     the last member arrived) and its transfer, two slices;
//   - "bubblewatch: roots": on the root rank of an instance whose waits were
//     blamed on it, a slice at the arrival, with flow arrows ("s"/"f") to
//     the wait slice of each rank it held up;
//   - a counter "what-if saved_us" on each straggler whose what-if was
//     computed (docs/semantics.md#what-it-cost).
// A trace holding several ranks (an Nsight Systems node export) writes its
// CPU events under its lowest rank, and the header lists such ranks
// (bubblewatch_timeline.traces) so that reading back joins them again.
//
// Streaming: the file is written rank by rank and event by event through a
// ChromeTraceSink; beyond the inputs and their analyses (which `analyze`
// holds anyway), memory is one trace's bubbles, one output buffer, one
// read chunk of the input being passed through, and every input's top-level
// metadata (kilobytes each).
//
// Reading it back: ReadTraceFile sees the top-level "bubblewatch_timeline"
// (written before "traceEvents") and reads each GPU event's device as
// pid × 65536 + device; SplitTimelineExport turns the trace into one per rank,
// so that `analyze` of the export gives each rank's figures again (the clocks
// being aligned already, they share one clock domain).
#ifndef BUBBLEWATCH_CLI_TIMELINE_EXPORT_H_
#define BUBBLEWATCH_CLI_TIMELINE_EXPORT_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "analysis/bubble_analyzer.h"
#include "analysis/collectives.h"
#include "schemas/trace.h"

namespace bubblewatch {

struct TimelineExportOptions {
  // Ranks to write; empty: all.
  absl::flat_hash_set<int32_t> ranks;
  // The cut, in ns after the job's first event on the job's clock: events
  // overlapping [from_ns, to_ns) are written whole.
  int64_t from_ns = 0;
  int64_t to_ns = std::numeric_limits<int64_t>::max();
  // For each trace's bubbles (its windows and top list are not used).
  AnalyzerOptions analyzer;
};

// What was written.
struct TimelineExportStats {
  int64_t ranks = 0;
  int64_t events = 0;  // Every JSON event, metadata included.
  int64_t bubbles = 0;
  int64_t collective_slices = 0;
  int64_t flows = 0;
  uint64_t bytes = 0;  // Uncompressed JSON.
};

// Writes the timeline of `traces` (read from `files`, same order) to
// `path`. `collectives`: the job's analysis with keep_instances (its clocks,
// instances and stragglers), or null for a single rank (no clock, no
// collective tracks). `files` are read again for the Chrome inputs' events.
// Errors: kInvalidArgument for a rank selection or cut that leaves nothing,
// what AnalyzeTrace refuses, the file system's, or an input that cannot be
// read again ("re-reading FILE: ...").
absl::StatusOr<TimelineExportStats> WriteTimelineExport(
    absl::Span<const Trace> traces, absl::Span<const std::string> files,
    const CollectiveAnalysis* collectives, const TimelineExportOptions& options,
    const std::string& path);

// True when the file at `path` (plain or gzip) starts as a timeline export
// does: its first 512 bytes hold the "bubblewatch_timeline" key.
bool IsTimelineExport(const std::string& path);

// One Trace per rank of a read export: GPU events and collective records by
// device / 65536 (the pid; device % 65536 is their device again), CPU
// events by the pid folded into their thread; each with rank = that pid and the
// export's world size and job. Names are copied whole into each.
// `groups`: the ranks that came from one input trace (TimelineExportGroups),
// which go back into one trace (rank -1: its devices are its ranks, as an
// Nsight Systems node export's are).
std::vector<Trace> SplitTimelineExport(
    Trace&& trace, absl::Span<const std::vector<int32_t>> groups = {});

// The groups of ranks an export says came from one input trace (its
// bubblewatch_timeline.traces, in the first MiB of the file); empty when
// every rank had a trace of its own, or the file does not say.
std::vector<std::vector<int32_t>> TimelineExportGroups(const std::string& path);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_CLI_TIMELINE_EXPORT_H_
