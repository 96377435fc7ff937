// ProcessorStats: the stream processor's counters, read by logs, /metrics
// (serve/prometheus_metrics.h) and the demo. Kept apart from
// stream_processor.h so that readers of the counters do not depend on the
// Kafka runtime. A snapshot: StreamProcessor::stats() copies it under a lock.
#ifndef BUBBLEWATCH_PROCESSOR_PROCESSOR_STATS_H_
#define BUBBLEWATCH_PROCESSOR_PROCESSOR_STATS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"

namespace bubblewatch {

// The most (job, producer) pairs ProcessorStats::dlq_by_source tracks.
inline constexpr size_t kMaxDlqSources = 1000;

// Counters for logs and the metrics endpoint.
struct ProcessorStats {
  int64_t messages = 0;
  int64_t events = 0;
  int64_t replayed_messages = 0;
  // Messages the consumer handed over again within one assignment (an
  // offset below the partition's next one): skipped, never counted twice
  // (docs/semantics.md#effectively-once). Not in `messages`.
  int64_t redelivered_messages = 0;
  int64_t duplicate_batches = 0;
  int64_t late_events = 0;
  // Collective records that arrived after their window was final
  // (docs/semantics.md#streaming-collectives).
  int64_t late_collectives = 0;
  // Windows of multi-rank jobs stored without their collective analysis
  // because it refused the ranks (e.g. two hosts claiming one rank); each
  // job's first such window is also logged with the reason.
  int64_t collective_errors = 0;
  // Window analyses that failed (a bug; the processor stops before
  // committing past them, docs/semantics.md#no-silent-loss).
  int64_t window_analysis_failures = 0;
  int64_t windows_written = 0;
  // Windows the windows topic acknowledged (late-event republishes
  // included), and of them those trimmed to fit its message limit
  // (processor/window_fit.h; each also carries the note).
  int64_t windows_published = 0;
  int64_t windows_trimmed = 0;
  // Window parts of split units (stage 1 of a split job,
  // docs/architecture.md#one-job-across-processors) the parts topic
  // acknowledged; a replay's republished parts included.
  int64_t window_parts_published = 0;
  // Rejected messages whose dead letter the DLQ topic refused even in its
  // minimal form (logged each; dead_letter.h).
  int64_t dead_letters_lost = 0;
  // Partitions assigned whose state came from the changelog (newer than the
  // local store's), and snapshots written to it: partition records, and
  // the per-job records of the jobs each one changed.
  int64_t state_restores = 0;
  int64_t state_snapshots_written = 0;
  int64_t state_job_records_written = 0;
  int64_t open_jobs = 0;
  int64_t buffered_events = 0;
  // Jobs tracked over the partitions owned (what max_jobs_per_partition
  // limits, per partition), and jobs forgotten after job_expiry.
  int64_t tracked_jobs = 0;
  int64_t jobs_forgotten = 0;
  // The job lifecycle (docs/semantics.md#job-lifecycle): end markers
  // counted, jobs that ended by them, and batches a producer sent after its
  // own end marker (bad input: counted, kept, the job becomes active again).
  int64_t end_markers = 0;
  int64_t jobs_ended = 0;
  int64_t batches_after_end = 0;
  // Observations (docs/semantics.md#observations): jobs closed because a
  // new observation started after their data (live batches), and bad
  // input: an observation overlapping, or starting before, the previous
  // one of its (host, rank) (counted, kept).
  int64_t observation_closes = 0;
  // Jobs whose windows closed and whose buffer was dropped because a batch
  // would have taken it past max_job_buffer_events (live batches;
  // docs/semantics.md#buffer-bound).
  int64_t buffer_full_closes = 0;
  int64_t overlapping_observations = 0;
  int64_t observations_backwards = 0;
  // Jobs whose host skew is at or above skew_warning, as measured when
  // their windows last closed (at most kMaxDlqSources).
  struct HostSkew {
    int64_t skew_ns = 0;
    std::string ahead;   // The host with the newest events.
    std::string behind;  // The host holding the watermark back.
  };
  absl::flat_hash_map<std::string, HostSkew> host_skew;
  absl::flat_hash_map<std::string, int64_t> dlq_by_reason;
  // Rejected batches that decoded, by (job, producer id): which producer of
  // which job sends bad batches. At most kMaxDlqSources entries; the rest
  // are counted under job "" (a hostile stream of made-up job names must
  // not grow this without bound).
  absl::flat_hash_map<std::pair<std::string, uint64_t>, int64_t> dlq_by_source;
  // Per "topic/partition": high watermark - position.
  absl::flat_hash_map<std::string, int64_t> lag;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_PROCESSOR_STATS_H_
