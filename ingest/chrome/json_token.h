// Scalars read from the text of a simdjson On-Demand token, without consuming
// the value and without copying: what the Chrome-trace reader uses to keep
// the fields of an event whose category it only learns later, and to convert
// numbers exactly (never through a double).
//
// Token text points into the padded JSON buffer and lives as long as it.
#ifndef BUBBLEWATCH_INGEST_CHROME_JSON_TOKEN_H_
#define BUBBLEWATCH_INGEST_CHROME_JSON_TOKEN_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "simdjson.h"

namespace bubblewatch {

// `s` without trailing JSON whitespace (space, tab, CR, LF).
inline std::string_view TrimJsonSpace(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' ||
                        s.back() == '\r' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

// The text of `value`'s token, which stays unconsumed: a scalar as written
// ("12.5", "\"a\\\"b\"" with its quotes, "true"), or "{" / "[" for a
// container.
inline std::string_view TokenText(simdjson::ondemand::value& value) {
  return TrimJsonSpace(value.raw_json_token());
}

// The raw content of a string token between its quotes (escapes left as
// written); nullopt if `token` is not a string.
inline std::optional<std::string_view> StringTokenContent(
    std::string_view token) {
  if (token.size() < 2 || token.front() != '"' || token.back() != '"') {
    return std::nullopt;
  }
  return token.substr(1, token.size() - 2);
}

// The integer a token holds, written as a JSON integer or as a string holding
// one ("7", "\"7\""); nullopt for anything else or a value outside int64.
std::optional<int64_t> TokenInteger(std::string_view token);

// Microseconds written as a JSON number or a string holding a decimal
// ("4458676983543.183"), converted exactly to nanoseconds. The common shapes
// (integers, up to three decimals) take a fast path; everything else goes to
// DecimalMicrosToNanos, whose errors (not a number, does not fit in int64
// nanoseconds) this returns.
absl::StatusOr<int64_t> TokenMicrosToNanos(std::string_view token);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_CHROME_JSON_TOKEN_H_
