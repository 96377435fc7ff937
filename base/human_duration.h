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

// The same for a sentence (alert text, period headers): units spelled out,
// at most the two largest of days, hours, minutes and seconds from a minute
// up ("1 hour 30 minutes", "2 days 3 hours"; the rest truncated), three
// significant digits below ("10 seconds", "2.5 seconds", "250 milliseconds",
// "12 microseconds"); "1 second", not "1 seconds". Negative durations keep
// their sign.
std::string HumanDurationWords(int64_t ns);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_BASE_HUMAN_DURATION_H_
