// Durations for people: "1.234 ms"-style text with a unit that fits the
// magnitude. Shared by every report (analyze, diff, query) so that one
// duration reads the same everywhere.
#ifndef BUBBLEWATCH_BASE_HUMAN_DURATION_H_
#define BUBBLEWATCH_BASE_HUMAN_DURATION_H_

#include <cstdint>
#include <string>

namespace bubblewatch {

// Three decimals in us below 1 ms, in ms below 1 s, else in s; negative
// durations keep their sign.
std::string HumanDuration(int64_t ns);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_BASE_HUMAN_DURATION_H_
