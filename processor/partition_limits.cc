#include "processor/partition_limits.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace bubblewatch {

std::optional<BatchRejection> CheckOpenWindows(int64_t open_windows,
                                               int64_t window_ns,
                                               const ProcessorLimits& limits) {
  if (open_windows <= limits.max_open_windows) return std::nullopt;
  return BatchRejection{
      "too_many_open_windows",
      absl::StrFormat("the batch would leave its job with %d open windows of "
                      "%s (limit %d): timestamps far from the job's others",
                      open_windows,
                      absl::FormatDuration(absl::Nanoseconds(window_ns)),
                      limits.max_open_windows)};
}

std::optional<BatchRejection> CheckNewJob(int64_t tracked_jobs,
                                          const ProcessorLimits& limits) {
  if (tracked_jobs < limits.max_jobs_per_partition) return std::nullopt;
  return BatchRejection{
      "too_many_jobs",
      absl::StrFormat("a new job, and its partition already tracks %d jobs "
                      "(limit %d)",
                      tracked_jobs, limits.max_jobs_per_partition)};
}

std::optional<BatchRejection> CheckSequenceStep(
    const absl::flat_hash_map<uint64_t, uint64_t>& counted,
    const BatchHeader& header, const ProcessorLimits& limits) {
  if (header.producer_id == 0) return std::nullopt;  // Not deduplicated.
  auto it = counted.find(header.producer_id);
  if (it == counted.end()) {
    // A stream starts at batch 0 (a restart resends from there), so an
    // unknown producer's first batch lies within the step of it; adopting a
    // forged 2^64 - 1 here would shadow the whole real stream.
    if (header.sequence < limits.max_sequence_step) return std::nullopt;
    return BatchRejection{
        "sequence_gap",
        absl::StrFormat("producer %016x is not tracked by its job and starts "
                        "at batch %d (a stream starts below %d): a forged or "
                        "corrupt sequence, or a stream whose start this job "
                        "never counted",
                        header.producer_id, header.sequence,
                        limits.max_sequence_step)};
  }
  if (header.sequence <= it->second) return std::nullopt;
  // Unsigned: the distance to a forged 2^64 - 1 fits, the sum might not.
  const uint64_t step = header.sequence - it->second;
  if (step <= limits.max_sequence_step) return std::nullopt;
  return BatchRejection{
      "sequence_gap",
      absl::StrFormat("producer %016x jumps from batch %d to %d (at most %d "
                      "ahead is accepted): a forged or corrupt sequence",
                      header.producer_id, it->second, header.sequence,
                      limits.max_sequence_step)};
}

void LimitLedger::RecordRejection(KafkaOffset offset) {
  if (!rejected_.empty() && offset <= rejected_.back()) return;
  rejected_.push_back(offset);
}

bool LimitLedger::WasRejected(KafkaOffset offset) const {
  return std::binary_search(rejected_.begin(), rejected_.end(), offset);
}

void LimitLedger::ForgetBefore(KafkaOffset offset) {
  rejected_.erase(rejected_.begin(),
                  std::lower_bound(rejected_.begin(), rejected_.end(), offset));
}

absl::StatusOr<LimitLedger> LimitLedger::Restore(
    std::optional<EventNs> newest_event_ns,
    std::vector<KafkaOffset> rejected_offsets) {
  for (size_t i = 1; i < rejected_offsets.size(); ++i) {
    if (rejected_offsets[i] <= rejected_offsets[i - 1]) {
      return absl::DataLossError(absl::StrCat(
          "stored limit ledger is not ascending: offset ", rejected_offsets[i],
          " after ", rejected_offsets[i - 1]));
    }
  }
  LimitLedger ledger;
  ledger.newest_event_ns_ = newest_event_ns;
  ledger.rejected_ = std::move(rejected_offsets);
  return ledger;
}

}  // namespace bubblewatch
