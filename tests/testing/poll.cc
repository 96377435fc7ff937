#include "tests/testing/poll.h"

#include "absl/time/clock.h"
#include "tests/testing/test_time.h"

namespace bubblewatch::testing {

bool PollUntil(absl::FunctionRef<bool()> done, absl::Duration timeout,
               absl::Duration interval) {
  // Scaled: under a sanitizer the programs a test waits for run slower
  // (test_time.h); 1 otherwise.
  const absl::Time deadline = absl::Now() + Scaled(timeout);
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(interval);
  }
  return done();
}

}  // namespace bubblewatch::testing
