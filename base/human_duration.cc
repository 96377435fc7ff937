#include "base/human_duration.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace bubblewatch {

std::string HumanDuration(int64_t ns) {
  double v = static_cast<double>(ns);
  double a = v < 0 ? -v : v;
  if (a < 1e6) return absl::StrFormat("%.3f us", v / 1e3);
  if (a < 1e9) return absl::StrFormat("%.3f ms", v / 1e6);
  return absl::StrFormat("%.3f s", v / 1e9);
}

namespace {

// Three significant digits; whole numbers from 100 up (no "1e+03").
std::string Unit(double v, const char* unit) {
  std::string n =
      v >= 99.95 ? absl::StrFormat("%.0f", v) : absl::StrFormat("%.3g", v);
  return absl::StrCat(n, " ", unit, n == "1" ? "" : "s");
}

}  // namespace

std::string HumanDurationWords(int64_t ns) {
  if (ns < 0) {
    // -INT64_MIN does not exist; one ns less does not show.
    return absl::StrCat("-",
                        HumanDurationWords(ns == INT64_MIN ? INT64_MAX : -ns));
  }
  if (ns < 1'000) return Unit(static_cast<double>(ns), "nanosecond");
  if (ns < 1'000'000) return Unit(ns / 1e3, "microsecond");
  if (ns < 1'000'000'000) return Unit(ns / 1e6, "millisecond");
  if (ns < 60'000'000'000) return Unit(ns / 1e9, "second");
  int64_t s = ns / 1'000'000'000;
  const struct {
    int64_t seconds;
    const char* name;
  } units[] = {{86400, "day"}, {3600, "hour"}, {60, "minute"}, {1, "second"}};
  std::string out;
  int shown = 0;
  for (const auto& u : units) {
    const int64_t n = s / u.seconds;
    s %= u.seconds;
    if (shown > 0) ++shown;  // The unit after the first counts, zero or not.
    if (n == 0) continue;
    if (shown == 0) shown = 1;
    if (shown > 2) break;
    absl::StrAppend(&out, out.empty() ? "" : " ", n, " ", u.name,
                    n == 1 ? "" : "s");
  }
  return out;
}

}  // namespace bubblewatch
