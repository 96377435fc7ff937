#include "serve/query_params.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace bubblewatch {
namespace {

// Epoch seconds beyond this do not fit int64 ns (year 2262).
constexpr double kMaxEpochSeconds = 9.2e9;

bool LooksNumeric(absl::string_view s) {
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c)) && c != '.') {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<int64_t> ParseEventTime(absl::string_view name,
                                       absl::string_view text) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad ", name, " time \"", text,
        "\": want RFC 3339 (2026-11-29T10:00:00Z) or epoch seconds"));
  };
  if (LooksNumeric(text)) {
    // Integer seconds are exact; a fraction goes through double (µs-exact for
    // present-day times, which is all a window boundary needs).
    int64_t whole = 0;
    if (absl::SimpleAtoi(text, &whole)) {
      if (whole > static_cast<int64_t>(kMaxEpochSeconds) ||
          whole < -static_cast<int64_t>(kMaxEpochSeconds)) {
        return bad();
      }
      return whole * 1'000'000'000;
    }
    double seconds = 0;
    if (!absl::SimpleAtod(text, &seconds) || !std::isfinite(seconds) ||
        std::fabs(seconds) > kMaxEpochSeconds) {
      return bad();
    }
    return static_cast<int64_t>(std::llround(seconds * 1e9));
  }
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, text, &t, &err)) return bad();
  // Only times within the int64 ns range.
  if (t < absl::FromUnixNanos(std::numeric_limits<int64_t>::min()) ||
      t > absl::FromUnixNanos(std::numeric_limits<int64_t>::max())) {
    return bad();
  }
  return absl::ToUnixNanos(t);
}

absl::StatusOr<JobPeriod> ParseJobPeriod(absl::string_view last,
                                         absl::string_view from,
                                         absl::string_view to) {
  const std::string max = absl::FormatDuration(kMaxQueryRange);
  if (!last.empty() && (!from.empty() || !to.empty())) {
    return absl::InvalidArgumentError(
        "give either last or from and to, not both");
  }
  if (from.empty() != to.empty()) {
    return absl::InvalidArgumentError("from and to go together");
  }
  if (!from.empty()) {
    absl::StatusOr<int64_t> from_ns = ParseEventTime("from", from);
    if (!from_ns.ok()) return from_ns.status();
    absl::StatusOr<int64_t> to_ns = ParseEventTime("to", to);
    if (!to_ns.ok()) return to_ns.status();
    if (*from_ns >= *to_ns) {
      return absl::InvalidArgumentError("from must be before to");
    }
    if (absl::FromUnixNanos(*to_ns) - absl::FromUnixNanos(*from_ns) >
        kMaxQueryRange) {
      return absl::InvalidArgumentError(
          absl::StrCat("from..to may span at most ", max));
    }
    return JobPeriod::Between(*from_ns, *to_ns);
  }
  if (last.empty()) return JobPeriod::Last(kDefaultLast);
  absl::Duration d;
  if (!absl::ParseDuration(last, &d) || d == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad last \"", last, "\": want a duration such as 1h, 90m or 30s"));
  }
  if (d <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("last must be positive");
  }
  if (d > kMaxQueryRange) {
    return absl::InvalidArgumentError(absl::StrCat(
        "last may be at most ", max, ", not ", absl::FormatDuration(d)));
  }
  return JobPeriod::Last(d);
}

absl::StatusOr<int> ParseCount(absl::string_view name, absl::string_view text,
                               int fallback, int max) {
  if (text.empty()) return fallback;
  int n = 0;
  if (!absl::SimpleAtoi(text, &n) || n < 1 || n > max) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad ", name, " \"", text, "\": want an integer from 1 to ", max));
  }
  return n;
}

}  // namespace bubblewatch
