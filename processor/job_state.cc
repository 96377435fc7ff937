#include "processor/job_state.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace bubblewatch {

void JobState::NoteProducerEvents(uint64_t producer, int64_t newest_ns) {
  auto [it, inserted] = producer_newest_ns.try_emplace(producer, newest_ns);
  if (!inserted) it->second = std::max(it->second, newest_ns);
}

int64_t JobState::NewestEventNs() const {
  int64_t newest = finalized_through_ns;
  for (const auto& [producer, ns] : producer_newest_ns) {
    newest = std::max(newest, ns);
  }
  return newest;
}

int JobState::ForgetProducersBefore(int64_t cutoff_ns) {
  int forgotten = 0;
  for (auto it = producer_newest_ns.begin(); it != producer_newest_ns.end();) {
    if (it->second < cutoff_ns) {
      producer_sequences.erase(it->first);
      producer_newest_ns.erase(it++);
      ++forgotten;
    } else {
      ++it;
    }
  }
  return forgotten;
}

std::string JobState::Serialize() const {
  std::string out = absl::StrCat("v2 ", finalized_through_ns);
  // Sorted, so equal states serialize equally.
  std::vector<std::tuple<uint64_t, uint64_t, int64_t>> sorted;
  sorted.reserve(producer_sequences.size());
  for (const auto& [producer, sequence] : producer_sequences) {
    auto newest = producer_newest_ns.find(producer);
    sorted.emplace_back(producer, sequence,
                        newest != producer_newest_ns.end()
                            ? newest->second
                            : finalized_through_ns);
  }
  std::sort(sorted.begin(), sorted.end());
  for (const auto& [producer, sequence, newest] : sorted) {
    absl::StrAppend(&out, " ", producer, ":", sequence, ":", newest);
  }
  return out;
}

absl::StatusOr<JobState> JobState::Parse(absl::string_view text) {
  std::vector<absl::string_view> parts =
      absl::StrSplit(text, ' ', absl::SkipEmpty());
  JobState state;
  const bool v2 = !parts.empty() && parts[0] == "v2";
  if (parts.size() < 2 || (!v2 && parts[0] != "v1") ||
      !absl::SimpleAtoi(parts[1], &state.finalized_through_ns)) {
    return absl::DataLossError(absl::StrCat(
        "stored job state is not readable: '", text.substr(0, 60), "'"));
  }
  for (size_t i = 2; i < parts.size(); ++i) {
    absl::InlinedVector<absl::string_view, 3> fields =
        absl::StrSplit(parts[i], ':');
    uint64_t producer = 0, sequence = 0;
    int64_t newest = state.finalized_through_ns;
    if (fields.size() != (v2 ? 3u : 2u) ||
        !absl::SimpleAtoi(fields[0], &producer) ||
        !absl::SimpleAtoi(fields[1], &sequence) ||
        (v2 && !absl::SimpleAtoi(fields[2], &newest))) {
      return absl::DataLossError(absl::StrCat(
          "stored job state has a bad producer entry '", parts[i], "'"));
    }
    state.producer_sequences[producer] = sequence;
    state.producer_newest_ns[producer] = newest;
  }
  return state;
}

}  // namespace bubblewatch
