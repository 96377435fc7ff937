#include "base/human_duration.h"

#include <cstdint>

#include "gtest/gtest.h"
#include "tests/testing/units.h"

namespace bubblewatch {
namespace {

using testing::kS;

TEST(HumanDurationWords, SpellsUnitsAndSingular) {
  EXPECT_EQ(HumanDurationWords(0), "0 nanoseconds");
  EXPECT_EQ(HumanDurationWords(1), "1 nanosecond");
  EXPECT_EQ(HumanDurationWords(12'000), "12 microseconds");
  EXPECT_EQ(HumanDurationWords(250'000'000), "250 milliseconds");
  EXPECT_EQ(HumanDurationWords(kS), "1 second");
  EXPECT_EQ(HumanDurationWords(10 * kS), "10 seconds");
  EXPECT_EQ(HumanDurationWords(2'500'000'000), "2.5 seconds");
  EXPECT_EQ(HumanDurationWords(12'345'678'901), "12.3 seconds");
}

TEST(HumanDurationWords, NoExponentNearAUnitBoundary) {
  EXPECT_EQ(HumanDurationWords(999'600'000), "1000 milliseconds");
  EXPECT_EQ(HumanDurationWords(123'456'789), "123 milliseconds");
}

TEST(HumanDurationWords, TwoLargestUnitsFromAMinuteUp) {
  EXPECT_EQ(HumanDurationWords(60 * kS), "1 minute");
  EXPECT_EQ(HumanDurationWords(90 * kS), "1 minute 30 seconds");
  EXPECT_EQ(HumanDurationWords(3600 * kS), "1 hour");
  EXPECT_EQ(HumanDurationWords(5400 * kS), "1 hour 30 minutes");
  // The unit after the largest counts even when it is zero: 1 h 0 min 30 s
  // reads "1 hour", not "1 hour 30 seconds".
  EXPECT_EQ(HumanDurationWords(3630 * kS), "1 hour");
  EXPECT_EQ(HumanDurationWords((2 * 86400 + 3 * 3600 + 59) * kS),
            "2 days 3 hours");
  EXPECT_EQ(HumanDurationWords(int64_t{1000} * 86400 * kS), "1000 days");
}

TEST(HumanDurationWords, NegativeKeepsItsSign) {
  EXPECT_EQ(HumanDurationWords(-90 * kS), "-1 minute 30 seconds");
  EXPECT_EQ(HumanDurationWords(INT64_MIN).front(), '-');
}

}  // namespace
}  // namespace bubblewatch
