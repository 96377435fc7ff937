// JobNamePattern: finds a trace file's job id and rank in its file name with
// a regular expression whose named groups `job` and `rank` say where they are,
// e.g. "(?<job>[^.]+)\.rank(?<rank>\d+)\." (the watcher's default, matching
// the names bubblewatch_torch writes).
//
// std::regex (ECMAScript) has no named groups, so the pattern is translated:
// every "(?<name>" or "(?P<name>" becomes a plain capturing "(", and the
// names are remembered by the number of their group. Escapes ("\("),
// character classes ("[(]") and non-capturing groups ("(?:", lookaheads) are
// recognized so that group numbers stay right.
#ifndef BUBBLEWATCH_INGEST_WATCH_JOB_NAME_PATTERN_H_
#define BUBBLEWATCH_INGEST_WATCH_JOB_NAME_PATTERN_H_

#include <cstdint>
#include <optional>
#include <regex>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace bubblewatch {

// The default --job-from-name pattern: "<job>.rank<rank>." anywhere in the
// name, e.g. "llama-7b.rank3.1732943012.pt.trace.json.gz".
inline constexpr char kDefaultJobNamePattern[] =
    R"((?<job>[A-Za-z0-9_-]+)\.rank(?<rank>\d+)\.)";

// The result of translating a pattern with named groups.
struct TranslatedPattern {
  std::string ecmascript;  // The pattern with only numbered groups.
  // Group name -> its number (1-based, as in std::smatch).
  absl::flat_hash_map<std::string, int> groups;
};

// Translates named groups to numbered ones (see the file comment).
// Errors: kInvalidArgument for an unterminated or empty group name, a name
// used twice, or an unterminated character class.
absl::StatusOr<TranslatedPattern> TranslateNamedGroups(
    absl::string_view pattern);

struct JobAndRank {
  std::string job;    // Empty if the pattern has no `job` group or it is empty.
  int32_t rank = -1;  // -1 if no `rank` group or it is not a number.
};

class JobNamePattern {
 public:
  // Compiles `pattern`. Errors: kInvalidArgument for a bad regular expression
  // or a pattern with neither a `job` nor a `rank` group.
  static absl::StatusOr<JobNamePattern> Create(absl::string_view pattern);

  // Searches `file_name` (a base name, not a path) for the pattern; nullopt
  // if it does not occur.
  std::optional<JobAndRank> Match(absl::string_view file_name) const;

  const std::string& pattern() const { return pattern_; }

 private:
  JobNamePattern() = default;

  std::string pattern_;
  std::regex regex_;
  int job_group_ = 0;   // 0: none.
  int rank_group_ = 0;  // 0: none.
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_WATCH_JOB_NAME_PATTERN_H_
