#include "processor/job_state.h"

#include <algorithm>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace bubblewatch {

std::string JobState::Serialize() const {
  std::string out = absl::StrCat("v1 ", finalized_through_ns);
  // Sorted, so equal states serialize equally.
  std::vector<std::pair<uint64_t, uint64_t>> sorted(producer_sequences.begin(),
                                                    producer_sequences.end());
  std::sort(sorted.begin(), sorted.end());
  for (const auto& [producer, sequence] : sorted) {
    absl::StrAppend(&out, " ", producer, ":", sequence);
  }
  return out;
}

absl::StatusOr<JobState> JobState::Parse(absl::string_view text) {
  std::vector<absl::string_view> parts =
      absl::StrSplit(text, ' ', absl::SkipEmpty());
  JobState state;
  if (parts.size() < 2 || parts[0] != "v1" ||
      !absl::SimpleAtoi(parts[1], &state.finalized_through_ns)) {
    return absl::DataLossError(absl::StrCat(
        "stored job state is not readable: '", text.substr(0, 60), "'"));
  }
  for (size_t i = 2; i < parts.size(); ++i) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(parts[i], ':');
    uint64_t producer = 0, sequence = 0;
    if (!absl::SimpleAtoi(kv.first, &producer) ||
        !absl::SimpleAtoi(kv.second, &sequence)) {
      return absl::DataLossError(absl::StrCat(
          "stored job state has a bad producer entry '", parts[i], "'"));
    }
    state.producer_sequences[producer] = sequence;
  }
  return state;
}

}  // namespace bubblewatch
