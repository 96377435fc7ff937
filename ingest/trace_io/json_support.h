// Helpers shared by the simdjson On-Demand readers (timeline, Chrome trace):
// error messages with byte offsets, and exact timestamps from number text.
#ifndef BUBBLEWATCH_INGEST_TRACE_IO_JSON_SUPPORT_H_
#define BUBBLEWATCH_INGEST_TRACE_IO_JSON_SUPPORT_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "simdjson.h"

namespace bubblewatch {

// simdjson speaks std::string_view; Debian's Abseil has its own string_view.
inline absl::string_view AbslView(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}

// "bad JSON at offset K: <simdjson's reason>", K taken from the document's
// current location (the end of input when it ran out).
absl::Status JsonSyntaxError(simdjson::ondemand::document& doc,
                             const simdjson::padded_string& json,
                             simdjson::error_code error);

// Reads a microsecond timestamp given as a JSON number or as a string holding
// a decimal, exactly, into nanoseconds. `what` names the field in errors.
absl::StatusOr<int64_t> ReadMicrosAsNanos(simdjson::ondemand::value value,
                                          absl::string_view what);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_TRACE_IO_JSON_SUPPORT_H_
