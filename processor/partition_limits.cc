#include "processor/partition_limits.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

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
  if (it == counted.end() || header.sequence <= it->second) return std::nullopt;
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

void LimitLedger::RecordRejection(int64_t offset) {
  if (!rejected_.empty() && offset <= rejected_.back()) return;
  rejected_.push_back(offset);
}

bool LimitLedger::WasRejected(int64_t offset) const {
  return std::binary_search(rejected_.begin(), rejected_.end(), offset);
}

void LimitLedger::ForgetBefore(int64_t offset) {
  rejected_.erase(rejected_.begin(),
                  std::lower_bound(rejected_.begin(), rejected_.end(), offset));
}

std::string LimitLedger::Serialize() const {
  std::string out = absl::StrCat("L1 ", newest_event_ns_);
  for (int64_t offset : rejected_) absl::StrAppend(&out, " ", offset);
  return out;
}

absl::StatusOr<LimitLedger> LimitLedger::Parse(absl::string_view text) {
  std::vector<absl::string_view> parts =
      absl::StrSplit(text, ' ', absl::SkipEmpty());
  LimitLedger ledger;
  auto bad = [&] {
    return absl::DataLossError(absl::StrCat(
        "stored limit ledger is not readable: '", text.substr(0, 60), "'"));
  };
  if (parts.size() < 2 || parts[0] != "L1" ||
      !absl::SimpleAtoi(parts[1], &ledger.newest_event_ns_)) {
    return bad();
  }
  for (size_t i = 2; i < parts.size(); ++i) {
    int64_t offset = 0;
    if (!absl::SimpleAtoi(parts[i], &offset) ||
        (!ledger.rejected_.empty() && offset <= ledger.rejected_.back())) {
      return bad();
    }
    ledger.rejected_.push_back(offset);
  }
  return ledger;
}

}  // namespace bubblewatch
