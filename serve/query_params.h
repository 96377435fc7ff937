// Parsing of the query parameters `bubblewatch query` takes as options and
// the HTTP API as URL parameters, in one place so that both accept the same
// spellings and reject the same mistakes with the same reason.
//
// Every function returns kInvalidArgument with a one-line reason that names
// the parameter, e.g. "bad from time \"yesterday\": want RFC 3339
// (2026-11-29T10:00:00Z) or epoch seconds".
#ifndef BUBBLEWATCH_SERVE_QUERY_PARAMS_H_
#define BUBBLEWATCH_SERVE_QUERY_PARAMS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "storage/window_queries.h"

namespace bubblewatch {

// Default period of a job query: the last hour.
inline constexpr absl::Duration kDefaultLast = absl::Hours(1);
// Defaults and bounds of `top` (fleet entries) and `bubbles` (top bubbles of
// a job report).
inline constexpr int kDefaultFleetTop = 20;
inline constexpr int kMaxFleetTop = 10000;
inline constexpr int kDefaultTopBubbles = 10;
inline constexpr int kMaxTopBubbles = 100;

// Parses an event time: RFC 3339 ("2026-11-29T10:00:00Z",
// "2026-11-29T11:00:00.5+01:00") or epoch seconds ("1764410400",
// "1764410400.25"). Returns ns since the Unix epoch. `name` is the
// parameter's name for the error message.
absl::StatusOr<int64_t> ParseEventTime(absl::string_view name,
                                       absl::string_view text);

// The period of a job query from its three optional parameters (empty =
// absent): `last` (a duration such as "1h", "90m", "30s"), or both `from`
// and `to` (ParseEventTime). Neither: the last hour. `last` together with
// `from`/`to`, or only one of `from`/`to`, is an error; so is a period that
// is empty or longer than kMaxQueryRange.
absl::StatusOr<JobPeriod> ParseJobPeriod(absl::string_view last,
                                         absl::string_view from,
                                         absl::string_view to);

// Parses a count in [1, max]; empty gives `fallback`.
absl::StatusOr<int> ParseCount(absl::string_view name, absl::string_view text,
                               int fallback, int max);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_SERVE_QUERY_PARAMS_H_
