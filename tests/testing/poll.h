// PollUntil: waits for a condition instead of sleeping for a fixed time.
#ifndef BUBBLEWATCH_TESTS_TESTING_POLL_H_
#define BUBBLEWATCH_TESTS_TESTING_POLL_H_

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"

namespace bubblewatch::testing {

// Calls `done` every `interval` until it returns true, and returns true at
// once when it does. Returns false if it still does not hold once `timeout`
// (wall time, from the call) has passed: `done` is always asked once more at
// or after the deadline, so a condition that became true during the last
// interval is not missed. `done` runs on the calling thread; it may be
// called any number of times, including once with a zero timeout.
//
// The timeout is scaled by the test time scale (test_time.h: 1 unless a
// sanitizer build sets BUBBLEWATCH_TEST_TIME_SCALE).
//
// Pick `interval` by the cost of `done`: reading a file or a variable can
// be asked every few milliseconds, a broker or an HTTP server less often.
bool PollUntil(absl::FunctionRef<bool()> done, absl::Duration timeout,
               absl::Duration interval = absl::Milliseconds(50));

}  // namespace bubblewatch::testing

#endif  // BUBBLEWATCH_TESTS_TESTING_POLL_H_
