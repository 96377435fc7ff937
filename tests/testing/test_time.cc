#include "tests/testing/test_time.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace bubblewatch::testing {

double TimeScale() {
  static const double scale = [] {
    const char* text = std::getenv("BUBBLEWATCH_TEST_TIME_SCALE");
    double value = 1;
    if (text == nullptr || !absl::SimpleAtod(text, &value) || !(value >= 1)) {
      return 1.0;
    }
    return value;
  }();
  return scale;
}

absl::Duration Scaled(absl::Duration d) { return d * TimeScale(); }

std::string ScaledFlag(absl::Duration d) {
  return absl::StrCat(absl::ToInt64Milliseconds(Scaled(d)), "ms");
}

std::string ScaledMs(absl::Duration d) {
  return absl::StrCat(absl::ToInt64Milliseconds(Scaled(d)));
}

std::vector<std::string> ScaledReplaySpeed(double speed) {
  // 50 ms: produce's default --linger.
  return {"--replay-speed", absl::StrCat(speed / TimeScale(), "x"), "--linger",
          ScaledFlag(absl::Milliseconds(50))};
}

absl::Duration GroupSession() { return Scaled(absl::Seconds(3)); }

std::string GroupSessionMs() {
  return absl::StrCat(absl::ToInt64Milliseconds(GroupSession()));
}

std::string GroupHeartbeatMs() {
  return absl::StrCat(absl::ToInt64Milliseconds(GroupSession() / 6));
}

}  // namespace bubblewatch::testing
