// Wall-clock durations of integration tests, scaled to the speed of the
// programs under test.
//
// The integration tests wait for `bubblewatch` children with durations sized
// for an optimized build: how long a job may be silent before it is closed
// (--idle-timeout), how long a run waits once idle, a consumer's session, a
// kill's delay, a poll's deadline. Under ThreadSanitizer the same programs
// run 5-15x slower (and 2 cores shared by a broker, a producer and up to
// three processors starve them further), so a producer's pause looks like a
// silent job and deadlines pass while work is still being done: failures of
// the test's assumptions, not of the code. BUBBLEWATCH_TEST_TIME_SCALE (a
// number >= 1, default 1; `ops/test --sanitize=thread` sets it) multiplies
// such durations. Event times (the data) are never scaled; a producer's
// pacing only where a test needs the stream to outlast a number of steps
// that each wait for a slowed program (ScaledReplaySpeed).
#ifndef BUBBLEWATCH_TESTS_TESTING_TEST_TIME_H_
#define BUBBLEWATCH_TESTS_TESTING_TEST_TIME_H_

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace bubblewatch::testing {

// BUBBLEWATCH_TEST_TIME_SCALE, or 1 when unset or not a number >= 1.
double TimeScale();

// `d` times TimeScale().
absl::Duration Scaled(absl::Duration d);

// Scaled(d) as a command-line duration ("15s", "1500ms").
std::string ScaledFlag(absl::Duration d);

// Scaled(d) in whole milliseconds, for librdkafka's *.ms properties.
std::string ScaledMs(absl::Duration d);

// `bubblewatch produce` flags that pace the stream at `speed` (1 = event
// time) divided by TimeScale(), with batches spanning as much event time
// as at `speed` (the paced --linger is wall time).
std::vector<std::string> ScaledReplaySpeed(double speed);

// The consumer-group session of the processors the broker tests start:
// 3 s, scaled. A member killed with SIGKILL (no LeaveGroup) keeps its
// partitions until its session expires, and a rebalance (a member joining)
// waits for it too, so this bounds how long a kill holds partitions up.
// Kafka's default floor is 6 s; the test broker (ops/kafka/start) allows
// 1 s. The product's default stays librdkafka's 45 s.
absl::Duration GroupSession();

// GroupSession() in whole milliseconds, for `-X session.timeout.ms=`, and
// the heartbeat for `-X heartbeat.interval.ms=`: a sixth of it (heartbeats
// also carry the news of a rebalance to the members).
std::string GroupSessionMs();
std::string GroupHeartbeatMs();

}  // namespace bubblewatch::testing

#endif  // BUBBLEWATCH_TESTS_TESTING_TEST_TIME_H_
