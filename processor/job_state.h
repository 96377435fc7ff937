// JobState: what the processor must remember about a job across restarts,
// stored in the window store atomically with the job's windows and its
// partition's progress: the finalized edge and, per producer, the highest
// batch sequence counted (so a resent batch never counts twice).
//
// Producers come and go (the watcher gives every trace file a producer id of
// its own), so a producer is forgotten once its newest event lies more than
// an expiry behind the finalized edge (ForgetProducersBefore). A batch it
// resends after that holds only events of finalized windows: the windower
// counts them as late, they never enter a window twice.
//
// It also holds the job's lifecycle (schemas/job_lifecycle.h,
// docs/semantics.md#job-lifecycle): which producers sent their end marker,
// whether the job ended, its last gaps between snapshots, the bad input it
// counted. Like the rest, a function of the job's batches in partition order
// (PartitionJobs::AddBatch).
//
// And the last observation of each of the job's streams
// (docs/semantics.md#observations), what the stream's next observation is
// compared with to count an overlap or one going backwards. It is persisted
// (not kept beside the state in memory only) because the counts are: a
// restarted processor counts only the batches past the committed position
// (those before it are in the restored counts, so none counts twice), and
// it must compare the first of them with what the last commit knew, not
// with nothing, or it would miss an overlap that an uninterrupted run
// counts. A stream is forgotten with the producers of its time
// (ForgetObservationsBefore), so the state does not grow without bound.
#ifndef BUBBLEWATCH_PROCESSOR_JOB_STATE_H_
#define BUBBLEWATCH_PROCESSOR_JOB_STATE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "schemas/event_batch_codec.h"
#include "schemas/job_lifecycle.h"
#include "schemas/time_types.h"

namespace bubblewatch {

// One stream of a job's observations (docs/semantics.md#observations): what
// one profiler records at a time. (host, rank, 0) for a rank >= 0, which one
// process holds; (host, rank, producer id) for an unknown rank (< 0), which
// every process of a host may send.
using ObservationStream = std::tuple<std::string, int32_t, uint64_t>;

struct JobState {
  // Windows ending at or before this are final; none before the first.
  std::optional<EventNs> finalized_through_ns;
  // producer id -> highest sequence number processed.
  absl::flat_hash_map<ProducerId, ProducerSeq> producer_sequences;
  // producer id -> end of the newest event it sent (none: its batches held
  // no event). Every producer in producer_sequences has an entry once a
  // batch of it was counted.
  absl::flat_hash_map<ProducerId, std::optional<EventNs>> producer_newest_ns;
  // Producers whose end marker was counted (a subset of the tracked ones:
  // forgotten with them).
  absl::flat_hash_set<ProducerId> ended_producers;
  JobLifecycle lifecycle;
  // The last observation of each stream (see the top).
  absl::flat_hash_map<ObservationStream, ObservationInfo> last_observations;
  // The offset of the batch at which the job's buffer was last dropped for
  // the buffer bound (docs/semantics.md#buffer-bound); -1: never. A replay
  // ignores the job's batches before it: the live run dropped them.
  // (Stored as is: -1 is the schema's default, not a time.)
  KafkaOffset buffer_reset_offset = -1;
  // The state of a split unit (`JOB@HOST`, docs/architecture.md#one-job-
  // across-processors), not of a job: stored in its partition's snapshot
  // only, and skipped by what lists jobs (serve --brokers).
  bool split_unit = false;

  // Records that a batch of `producer` ending at `newest_ns` (none: without
  // events) was counted.
  void NoteProducerEvents(ProducerId producer,
                          std::optional<EventNs> newest_ns);

  // The newest event end the state knows of: the latest of the finalized
  // edge and the producers' newest events (none for none).
  std::optional<EventNs> NewestEventNs() const;

  // True when every tracked producer sent its end marker (and there is one).
  bool AllProducersEnded() const;

  // Forgets the producers whose newest event ends before `cutoff_ns` (and
  // those that sent no event); returns how many.
  int ForgetProducersBefore(EventNs cutoff_ns);

  // Forgets the streams whose last observation ends before `cutoff_ns`
  // (PartitionJobs forgets them with the producers of their time: their
  // newest events lie inside that observation); returns how many.
  int ForgetObservationsBefore(EventNs cutoff_ns);

  // Marks the job ended by --job-expiry (docs/semantics.md#job-lifecycle):
  // what is stored of a job the processor forgot. Returns false when it was
  // marked so already (nothing changed).
  bool MarkExpired();

  // A StateRecord holding a JobStateRecord (schemas/state.fbs,
  // docs/state.md); equal states serialize to equal bytes. None is stored
  // as kNoneOnWire, the bytes written before the optional fields.
  std::string Serialize() const;
  // Parses Serialize()'s output, and the text formats written before the
  // schema (LegacyParseJobState, processor/legacy_state.h); kDataLoss for
  // anything else.
  static absl::StatusOr<JobState> Parse(absl::string_view bytes);
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_JOB_STATE_H_
