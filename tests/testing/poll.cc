#include "tests/testing/poll.h"

#include "absl/time/clock.h"

namespace bubblewatch::testing {

bool PollUntil(absl::FunctionRef<bool()> done, absl::Duration timeout,
               absl::Duration interval) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(interval);
  }
  return done();
}

}  // namespace bubblewatch::testing
