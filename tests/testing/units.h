// Durations in nanoseconds, the unit of every time in traces, windows and
// the store: what the tests build their inputs from. A test file names the
// ones it uses (`using testing::kUs;`), so that files of one test binary,
// compiled together in a unity build, share one definition.
#ifndef BUBBLEWATCH_TESTS_TESTING_UNITS_H_
#define BUBBLEWATCH_TESTS_TESTING_UNITS_H_

#include <cstdint>
#include <limits>

namespace bubblewatch::testing {

inline constexpr int64_t kUs = 1'000;
inline constexpr int64_t kMs = 1'000'000;
inline constexpr int64_t kS = 1'000'000'000;
// The ends of the int64 ns range, for edge cases of keys and periods.
inline constexpr int64_t kMinNs = std::numeric_limits<int64_t>::min();
inline constexpr int64_t kMaxNs = std::numeric_limits<int64_t>::max();

}  // namespace bubblewatch::testing

#endif  // BUBBLEWATCH_TESTS_TESTING_UNITS_H_
