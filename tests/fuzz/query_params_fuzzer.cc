// libFuzzer target: the query parameters the HTTP API takes from a URL
// (serve/query_params.h). The input is split at '&' into last, from, to, top
// and bubbles. Every parse is a value or a kInvalidArgument; a period that
// parses is non-empty and within kMaxQueryRange.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "serve/query_params.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bubblewatch;
  std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> f = absl::StrSplit(text, '&');
  f.resize(5);
  absl::StatusOr<JobPeriod> period = ParseJobPeriod(f[0], f[1], f[2]);
  if (period.ok()) {
    const bool last = period->last > absl::ZeroDuration();
    if (last ? period->last > kMaxQueryRange
             : (period->to_ns <= period->from_ns ||
                static_cast<uint64_t>(period->to_ns) -
                        static_cast<uint64_t>(period->from_ns) >
                    static_cast<uint64_t>(
                        absl::ToInt64Nanoseconds(kMaxQueryRange)))) {
      __builtin_trap();
    }
  } else if (!absl::IsInvalidArgument(period.status())) {
    __builtin_trap();
  }
  for (const std::string& t : f) {
    (void)ParseEventTime("from", t);
  }
  absl::StatusOr<int> top =
      ParseCount("top", f[3], kDefaultFleetTop, kMaxFleetTop);
  if (top.ok() && (*top < 1 || *top > kMaxFleetTop)) __builtin_trap();
  absl::StatusOr<int> bubbles =
      ParseCount("bubbles", f[4], kDefaultTopBubbles, kMaxTopBubbles);
  if (bubbles.ok() && (*bubbles < 1 || *bubbles > kMaxTopBubbles)) {
    __builtin_trap();
  }
  return 0;
}
