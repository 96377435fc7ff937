// The clock of the alert unit tests: 10 s windows from a fixed instant, so
// that expected alert times can be written down by hand.
#ifndef BUBBLEWATCH_TESTS_ALERTS_ALERT_TEST_CLOCK_H_
#define BUBBLEWATCH_TESTS_ALERTS_ALERT_TEST_CLOCK_H_

#include <cstdint>

#include "absl/time/time.h"

namespace bubblewatch::alert_test {

inline constexpr int64_t kWindowNs = 10'000'000'000;
inline constexpr absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

}  // namespace bubblewatch::alert_test

#endif  // BUBBLEWATCH_TESTS_ALERTS_ALERT_TEST_CLOCK_H_
