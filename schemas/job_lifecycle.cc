#include "schemas/job_lifecycle.h"

#include <algorithm>

#include "schemas/state_record.h"

namespace bubblewatch {

int64_t JobLifecycle::cadence_ns() const {
  if (static_cast<int>(gaps_ns.size()) < kGapsForCadence) return 0;
  std::vector<int64_t> sorted = gaps_ns;
  std::sort(sorted.begin(), sorted.end());
  return sorted[(sorted.size() - 1) / 2];
}

void JobLifecycle::NoteGap(int64_t gap_ns) {
  gaps_ns.push_back(gap_ns);
  if (static_cast<int>(gaps_ns.size()) > kMaxGaps) {
    gaps_ns.erase(gaps_ns.begin());
  }
}

bool JobLifecycle::AllRanksEnded() const {
  return world_size <= 1 ||
         static_cast<int64_t>(ended_ranks.size()) >= world_size;
}

JobPhase PhaseAt(const JobLifecycle& lifecycle, absl::Duration silence) {
  if (!lifecycle.ended && lifecycle.awaiting_ranks()) return JobPhase::kWaiting;
  const int64_t cadence = lifecycle.cadence_ns();
  const bool within_cadence =
      cadence > 0 && silence <= 2 * absl::Nanoseconds(cadence);
  if (lifecycle.ended) {
    return !lifecycle.expired && within_cadence ? JobPhase::kPaused
                                                : JobPhase::kEnded;
  }
  if (within_cadence && silence >= kPausedAfter) return JobPhase::kPaused;
  return JobPhase::kActive;
}

absl::string_view JobPhaseName(JobPhase phase) {
  switch (phase) {
    case JobPhase::kActive:
      return "active";
    case JobPhase::kPaused:
      return "paused";
    case JobPhase::kEnded:
      return "ended";
    case JobPhase::kWaiting:
      return "waiting";
  }
  return "active";
}

JobLifecycle ReadJobLifecycle(absl::string_view job_state) {
  JobLifecycle out;
  if (!IsStateRecord(job_state)) return out;
  absl::StatusOr<const fb::StateRecord*> record = ReadStateRecord(
      job_state, fb::StateBody::JobStateRecord, "stored job state");
  if (!record.ok()) return out;
  const fb::JobStateRecord& r = *(*record)->body_as_JobStateRecord();
  out.ended = r.ended();
  out.expired = r.expired();
  out.batches_after_end = r.batches_after_end();
  out.overlapping_observations = r.overlapping_observations();
  out.observations_backwards = r.observations_backwards();
  if (r.gaps_ns() != nullptr) {
    out.gaps_ns.assign(r.gaps_ns()->begin(), r.gaps_ns()->end());
  }
  out.world_size = r.world_size();
  // The schema's default, kNoneOnWire, is "not waiting".
  out.awaiting_ranks_since_ns = FromWire(r.awaiting_ranks_since_ns());
  if (r.ended_ranks() != nullptr) {
    out.ended_ranks.insert(r.ended_ranks()->begin(), r.ended_ranks()->end());
  }
  return out;
}

}  // namespace bubblewatch
