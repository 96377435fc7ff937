// JobLifecycle: where a job is in its life (docs/semantics.md#job-lifecycle):
// active while observations arrive, paused between the snapshots of a duty
// cycle, ended once its producers said so (the end marker) or after
// --job-expiry.
//
// The persisted part (JobLifecycle) is a function of the job's batches in
// partition order only, kept in the job's state (schemas/state.fbs,
// JobStateRecord) and so replay-identical like the rest of it. The phase
// shown to people (JobPhase) adds one wall-clock input, how long the job has
// been silent, and is computed where it is shown (PhaseAt), never stored.
#ifndef BUBBLEWATCH_SCHEMAS_JOB_LIFECYCLE_H_
#define BUBBLEWATCH_SCHEMAS_JOB_LIFECYCLE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "schemas/time_types.h"

namespace bubblewatch {

struct JobLifecycle {
  // The last gaps kept to learn the cadence from.
  static constexpr int kMaxGaps = 5;
  // A new producer's first batch starting at least this long (event time)
  // after the job's newest event is a new snapshot: the time between is a
  // gap of the job's duty cycle.
  static constexpr int64_t kMinGapNs = 1'000'000'000;
  // Gaps needed before a cadence is learned: one gap is a pause, a cadence
  // repeats.
  static constexpr int kGapsForCadence = 2;

  // Every producer the job tracks sent its end marker (or the job expired).
  bool ended = false;
  // Ended by --job-expiry: its newest event fell that far behind its
  // partition's newest.
  bool expired = false;
  // The last gaps between snapshots (ns of event time), oldest first.
  std::vector<int64_t> gaps_ns;
  // Bad input seen: batches of a producer after its own end marker.
  int64_t batches_after_end = 0;
  // Bad input seen (docs/semantics.md#observations): observations of a
  // stream that overlapped the stream's previous one, or started before it
  // started. Kept here, beside batches_after_end, so that every reader of
  // a job's lifecycle (query jobs, /api/v1/jobs) shows them per job.
  int64_t overlapping_observations = 0;
  int64_t observations_backwards = 0;
  // A multi-rank job (docs/semantics.md#job-lifecycle, "Multi-rank jobs"):
  // the largest world size its batches declared (EventBatch.world_size, a
  // collective's group size; -1: none), the ranks whose stream sent its end
  // marker and no events since, and the partition's event-time clock at the
  // last marker that left the job waiting for its other ranks (none: not
  // waiting), from which --rank-grace counts. Persisted because a
  // restart replays only the batches after the committed position, and must
  // wait for the same ranks a run that went on would; here, beside `ended`,
  // because every reader of the lifecycle shows a job waiting for its ranks.
  int32_t world_size = -1;
  absl::flat_hash_set<int32_t> ended_ranks;
  std::optional<EventNs> awaiting_ranks_since_ns;

  // The learned cadence: the median of gaps_ns (the lower middle one of an
  // even count) once there are kGapsForCadence of them; 0 without.
  int64_t cadence_ns() const;
  // Records one gap, keeping the last kMaxGaps.
  void NoteGap(int64_t gap_ns);

  // True unless the job declared a world size above 1 and fewer distinct
  // ranks than that have ended their streams.
  bool AllRanksEnded() const;
  // Every producer ended, but not every rank: the job waits up to
  // --rank-grace (event time) for its other ranks' files.
  bool awaiting_ranks() const { return awaiting_ranks_since_ns.has_value(); }

  bool operator==(const JobLifecycle&) const = default;
};

enum class JobPhase { kActive, kPaused, kEnded, kWaiting };

// Silence shorter than this is a job sending: active whatever its cadence.
inline constexpr absl::Duration kPausedAfter = absl::Seconds(5);

// The phase of a job with `lifecycle` that has been silent (wall time since
// it was last seen) for `silence`:
//   ended   `ended` and no cadence, or expired, or ended with a cadence and
//           silent for more than twice the cadence (no snapshot is coming);
//   paused  a cadence, silent for at least kPausedAfter and at most twice the
//           cadence (a snapshot ended with its marker counts as paused too):
//           between two snapshots;
//   waiting a multi-rank job whose producers all ended but not all its
//           ranks (awaiting_ranks()): its other ranks' files are expected,
//           its silence is no crash;
//   active  otherwise (also a job with a cadence whose next snapshot is
//           overdue: silent for more than twice the cadence without a
//           marker, which `job_silent` rules report).
JobPhase PhaseAt(const JobLifecycle& lifecycle, absl::Duration silence);

// "active", "paused", "ended", "waiting".
absl::string_view JobPhaseName(JobPhase phase);

// The lifecycle in a stored job state (a StateRecord with a JobStateRecord,
// processor/job_state.h); a default (active) one for any other bytes, which
// are job states written before the lifecycle or before the schema.
JobLifecycle ReadJobLifecycle(absl::string_view job_state);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_SCHEMAS_JOB_LIFECYCLE_H_
