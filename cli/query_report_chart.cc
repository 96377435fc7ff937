// The compact terminal chart of a job's utilization over time.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "serve/query_report.h"

namespace bubblewatch {
namespace {

// U+2581..U+2588: one to eight eighths of a cell.
constexpr const char* kEighths[] = {" ",      "\u2581", "\u2582",
                                    "\u2583", "\u2584", "\u2585",
                                    "\u2586", "\u2587", "\u2588"};
constexpr const char* kNoData = "\u00b7";

std::string ClockText(int64_t ns) {
  return absl::FormatTime("%H:%M:%S", absl::FromUnixNanos(ns),
                          absl::UTCTimeZone());
}

}  // namespace

std::string EventTimeText(int64_t ns) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixNanos(ns),
                          absl::UTCTimeZone());
}

std::string RenderUtilizationChart(const std::vector<WindowPoint>& windows,
                                   int width, int height) {
  if (windows.empty() || width < 1 || height < 1) return "";
  const int64_t t0 = windows.front().start_ns;
  const int64_t t1 = std::max(windows.back().end_ns, t0 + 1);
  const double span = static_cast<double>(t1 - t0);
  // One column per window slot when they fit, so short periods are not
  // stretched; else `width` columns of equal time.
  const int64_t slot = std::max<int64_t>(1, windows.front().end_ns - t0);
  const int columns = static_cast<int>(std::clamp<int64_t>(
      (t1 - t0 + slot - 1) / slot, 1, static_cast<int64_t>(width)));
  std::vector<int64_t> span_ns(columns, 0), compute_ns(columns, 0);
  std::vector<bool> seen(columns, false);
  for (const WindowPoint& w : windows) {
    int c = static_cast<int>((w.start_ns - t0) / span * columns);
    c = std::clamp(c, 0, columns - 1);
    seen[c] = true;
    span_ns[c] += w.stats.span_ns;
    compute_ns[c] += w.stats.compute_ns;
  }
  // Each column's height in eighths of a row.
  std::vector<int> units(columns, 0);
  for (int c = 0; c < columns; ++c) {
    if (span_ns[c] > 0) {
      const double u = static_cast<double>(compute_ns[c]) / span_ns[c];
      units[c] = static_cast<int>(std::lround(u * height * 8));
    }
  }
  std::string out;
  for (int row = height - 1; row >= 0; --row) {
    if (row == height - 1) {
      absl::StrAppend(&out, "  100% \u2524");
    } else if (row == 0) {
      absl::StrAppend(&out, "    0% \u2524");
    } else {
      absl::StrAppend(&out, "       \u2502");
    }
    for (int c = 0; c < columns; ++c) {
      if (!seen[c]) {
        absl::StrAppend(&out, row == 0 ? kNoData : " ");
        continue;
      }
      absl::StrAppend(&out, kEighths[std::clamp(units[c] - row * 8, 0, 8)]);
    }
    out += "\n";
  }
  absl::StrAppend(&out, "       \u2514");
  for (int c = 0; c < columns; ++c) out += "\u2500";
  out += "\n";
  // Start under the first column, end flush with the last one.
  const std::string start = ClockText(t0);
  const std::string end = ClockText(t1);
  std::string axis(8, ' ');
  axis += start;
  const int pad = columns - static_cast<int>(start.size() + end.size());
  if (pad >= 1) {
    axis += std::string(pad, ' ') + end;
  } else {
    axis += " .. " + end;
  }
  absl::StrAppend(&out, axis, "  UTC\n");
  return out;
}

}  // namespace bubblewatch
