#include "processor/legacy_state.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"

namespace bubblewatch {
namespace {

constexpr uint8_t kSnapshotFormat = 1;

// Reads from the front of `in`, consuming what it reads; false when `in` is
// too short.
bool GetU64(absl::string_view& in, uint64_t& u) {
  if (in.size() < 8) return false;
  u = 0;
  for (int i = 7; i >= 0; --i) u = (u << 8) | static_cast<uint8_t>(in[i]);
  in.remove_prefix(8);
  return true;
}

bool GetBytes(absl::string_view& in, std::string& out) {
  uint64_t size = 0;
  if (!GetU64(in, size) || in.size() < size) return false;
  out.assign(in.data(), size);
  in.remove_prefix(size);
  return true;
}

// job -> legacy text, the ledger under "".
bool GetJobStates(absl::string_view& in,
                  std::map<std::string, std::string>& jobs) {
  uint64_t count = 0;
  if (!GetU64(in, count)) return false;
  for (uint64_t i = 0; i < count; ++i) {
    std::string job, state;
    if (!GetBytes(in, job) || !GetBytes(in, state)) return false;
    jobs.emplace(std::move(job), std::move(state));
  }
  return true;
}

// Moves the legacy job states into `s`: the ledger out of job "", every
// job state re-serialized in the current format.
absl::Status Adopt(std::map<std::string, std::string> legacy,
                   PartitionSnapshot& s) {
  for (auto& [job, text] : legacy) {
    if (job.empty()) {
      ASSIGN_OR_RETURN(s.ledger, LegacyParseLimitLedger(text));
      continue;
    }
    ASSIGN_OR_RETURN(JobState state, JobState::Parse(text));
    s.jobs.emplace(job, state.Serialize());
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JobState> LegacyParseJobState(absl::string_view text) {
  std::vector<absl::string_view> parts =
      absl::StrSplit(text, ' ', absl::SkipEmpty());
  JobState state;
  const bool v2 = !parts.empty() && parts[0] == "v2";
  int64_t finalized_through_ns = 0;  // kNoneOnWire for none.
  if (parts.size() < 2 || (!v2 && parts[0] != "v1") ||
      !absl::SimpleAtoi(parts[1], &finalized_through_ns)) {
    return absl::DataLossError(absl::StrCat(
        "stored job state is not readable: '", text.substr(0, 60), "'"));
  }
  state.finalized_through_ns = FromWire(finalized_through_ns);
  for (size_t i = 2; i < parts.size(); ++i) {
    absl::InlinedVector<absl::string_view, 3> fields =
        absl::StrSplit(parts[i], ':');
    uint64_t producer = 0, sequence = 0;
    int64_t newest = finalized_through_ns;
    if (fields.size() != (v2 ? 3u : 2u) ||
        !absl::SimpleAtoi(fields[0], &producer) ||
        !absl::SimpleAtoi(fields[1], &sequence) ||
        (v2 && !absl::SimpleAtoi(fields[2], &newest))) {
      return absl::DataLossError(absl::StrCat(
          "stored job state has a bad producer entry '", parts[i], "'"));
    }
    state.producer_sequences[producer] = sequence;
    state.producer_newest_ns[producer] = FromWire(newest);
  }
  return state;
}

absl::StatusOr<LimitLedger> LegacyParseLimitLedger(absl::string_view text) {
  std::vector<absl::string_view> parts =
      absl::StrSplit(text, ' ', absl::SkipEmpty());
  int64_t newest = 0;
  if (parts.size() < 2 || parts[0] != "L1" ||
      !absl::SimpleAtoi(parts[1], &newest)) {
    return absl::DataLossError(absl::StrCat(
        "stored limit ledger is not readable: '", text.substr(0, 60), "'"));
  }
  std::vector<int64_t> offsets;
  for (size_t i = 2; i < parts.size(); ++i) {
    int64_t offset = 0;
    if (!absl::SimpleAtoi(parts[i], &offset)) {
      return absl::DataLossError(absl::StrCat(
          "stored limit ledger is not readable: '", text.substr(0, 60), "'"));
    }
    offsets.push_back(offset);
  }
  return LimitLedger::Restore(FromWire(newest), std::move(offsets));
}

absl::StatusOr<PartitionSnapshot> LegacyDecodeStoredJobStates(
    absl::string_view bytes) {
  std::map<std::string, std::string> legacy;
  if (!GetJobStates(bytes, legacy) || !bytes.empty()) {
    return absl::DataLossError("corrupt job states of a partition snapshot");
  }
  PartitionSnapshot s;
  RETURN_IF_ERROR(Adopt(std::move(legacy), s));
  return s;
}

absl::StatusOr<PartitionSnapshot> LegacyDecodePartitionSnapshot(
    absl::string_view bytes) {
  if (bytes.empty() || static_cast<uint8_t>(bytes[0]) != kSnapshotFormat) {
    return absl::DataLossError(
        "partition snapshot: empty or of an unknown format");
  }
  bytes.remove_prefix(1);
  PartitionSnapshot s;
  uint64_t partition = 0, resume = 0, committed = 0;
  std::map<std::string, std::string> legacy;
  if (!GetBytes(bytes, s.topic) || !GetU64(bytes, partition) ||
      !GetU64(bytes, resume) || !GetU64(bytes, committed) ||
      !GetJobStates(bytes, legacy) || !bytes.empty()) {
    return absl::DataLossError("corrupt partition snapshot");
  }
  s.partition = static_cast<int32_t>(partition);
  s.resume_offset = static_cast<int64_t>(resume);
  s.committed_position = static_cast<int64_t>(committed);
  RETURN_IF_ERROR(Adopt(std::move(legacy), s));
  return s;
}

}  // namespace bubblewatch
