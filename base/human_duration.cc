#include "base/human_duration.h"

#include "absl/strings/str_format.h"

namespace bubblewatch {

std::string HumanDuration(int64_t ns) {
  double v = static_cast<double>(ns);
  double a = v < 0 ? -v : v;
  if (a < 1e6) return absl::StrFormat("%.3f us", v / 1e3);
  if (a < 1e9) return absl::StrFormat("%.3f ms", v / 1e6);
  return absl::StrFormat("%.3f s", v / 1e9);
}

}  // namespace bubblewatch
