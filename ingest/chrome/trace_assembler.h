// The Chrome reader's last stage: parsed blocks of events, merged in file
// order, and the top-level metadata become one Trace. Everything here needs
// the state of the whole file, so it runs on the reading thread alone:
// names interned, repeats of kept events dropped, string pids/tids given
// ids, skip reasons counted, "distributedInfo", "host_name",
// "bubblewatch_job" and "baseTimeNanoseconds" applied (chrome_trace_reader.h
// says what each becomes).
//
// Promises, for blocks merged in file order (BlockPipeline):
//   - The Trace is that of a reading one event at a time: name ids in the
//     order names are first kept, the first copy of a duplicate kept, string
//     ids numbered in the order first seen (pid before tid), the first
//     error of a block returned.
//   - One CollectiveKernel per kept collective kernel, in file order, its
//     absent fields absent (kNoName, -1).
//   - Event vectors grow by the share of the file merged so far (a move or
//     two, not a doubling every so often).
#ifndef BUBBLEWATCH_INGEST_CHROME_TRACE_ASSEMBLER_H_
#define BUBBLEWATCH_INGEST_CHROME_TRACE_ASSEMBLER_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ingest/chrome/chrome_event_parser.h"
#include "ingest/chrome/duplicate_event_filter.h"
#include "ingest/chrome/trace_event_cutter.h"
#include "schemas/trace.h"

namespace bubblewatch {

class TraceAssembler : public TopLevelSink {
 public:
  // `estimate_total_bytes(done)`: the JSON's size in bytes, estimated when
  // `done` bytes have been read (EventStreamBuffer::EstimatedTotalBytes).
  // `max_events` (0: no limit): Merge fails with kResourceExhausted as soon
  // as more GPU + CPU events than that are kept, so that a file of too many
  // events costs the memory of the limit, not of the file.
  explicit TraceAssembler(
      std::function<uint64_t(uint64_t done)> estimate_total_bytes,
      uint64_t max_events = 0);
  TraceAssembler(const TraceAssembler&) = delete;
  TraceAssembler& operator=(const TraceAssembler&) = delete;

  // Adds a parsed block's events; the first failed element's error, if any
  // (the events before it added, none after), or kResourceExhausted past
  // max_events.
  absl::Status Merge(ChromeEventBlock& block);

  // TopLevelSink.
  bool WantsTopLevelValue(std::string_view key) const override;
  absl::Status TopLevelValue(std::string_view key, std::string_view text,
                             uint64_t offset) override;
  void NonObjectElement() override;

  // The Trace, once every block is merged: times shifted by
  // baseTimeNanoseconds where it applies. Error: a shifted time overflows.
  absl::StatusOr<Trace> Finish();

  // The file is a job timeline written by bubblewatch (a top-level
  // "bubblewatch_timeline" before "traceEvents": cli/timeline_export.h):
  // its GPU events' device is pid × 65536 + their device (the rank above
  // the device), so that ranks on the same device number of different hosts
  // stay apart (SplitTimelineExport takes them apart again).
  bool timeline_export() const { return timeline_export_; }

 private:
  void Keep(const ChromeEventBlock& block, const ParsedChromeEvent& event,
            NameId name);
  // The collective record of a kept collective kernel: its strings
  // interned after the kernel's name, wrong-typed args counted in
  // Trace::skipped ("collective arg 'Seq' not a non-negative integer").
  void KeepCollective(const ParsedCollective& parsed,
                      const GpuActivity& kernel);
  // Makes room in the Trace's event vectors for the block's kept events,
  // growing them to what the whole file will hold by the share of it merged
  // so far: a move or two instead of a doubling every so often, each a copy
  // of every event with both copies in memory for a moment. Reserved pages
  // that are never written cost no memory.
  void GrowFor(const ChromeEventBlock& block);
  uint32_t IdKey(const ChromeIdToken& id);
  absl::Status ReadDistributedInfo(simdjson::ondemand::value& value);
  absl::Status ReadBaseTime(std::string_view token);
  absl::Status ApplyBaseTime();
  // Counts a skipped event under the reason made of `parts`, each cut to 64
  // bytes; allocates only the first time a reason is seen.
  void CountSkip(std::initializer_list<std::string_view> parts);

  const std::function<uint64_t(uint64_t)> estimate_total_bytes_;
  const uint64_t max_events_;
  Trace trace_;
  NameInterner names_;
  DuplicateEventFilter duplicates_;
  // Ids for pid/tid strings that are not numbers.
  absl::flat_hash_map<std::string, uint32_t> string_ids_;
  std::optional<int64_t> base_time_ns_;
  // Identity of the max: read only once an event was kept.
  int64_t max_start_ns_ = std::numeric_limits<int64_t>::min();
  std::vector<NameId> name_ids_;  // Merge: each event's name id.
  ChromeJsonDocument top_level_;  // For top-level values.
  bool timeline_export_ = false;  // See timeline_export().
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_CHROME_TRACE_ASSEMBLER_H_
