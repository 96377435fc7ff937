#include "storage/window_key.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace bubblewatch {
namespace {

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(WindowKey, BytewiseOrderIsSignedStartOrder) {
  const std::vector<int64_t> starts = {
      kMin, kMin + 1, -10'000'000'000, -1,       0,   1,
      255,  256,      10'000'000'000,  kMax - 1, kMax};
  for (size_t i = 1; i < starts.size(); ++i) {
    EXPECT_LT(WindowKey("job", starts[i - 1]), WindowKey("job", starts[i]))
        << starts[i - 1] << " vs " << starts[i];
  }
}

TEST(WindowKey, JobsThatArePrefixesOfEachOtherDoNotInterleave) {
  // Every key of "job1" sorts before every key of "job10".
  EXPECT_LT(WindowKey("job1", kMax), WindowKey("job10", kMin));
  EXPECT_LT(WindowKeyLimit("job1"), WindowKey("job10", kMin));
  EXPECT_LT(WindowKey("job1", kMax), WindowKeyLimit("job1"));
  EXPECT_LT(WindowKeyPrefix("job1"), WindowKey("job1", kMin));
}

TEST(WindowKey, ParsesWhatItBuilds) {
  for (int64_t start : {kMin, int64_t{-5}, int64_t{0}, kMax}) {
    absl::string_view job;
    int64_t parsed = 0;
    const std::string key = WindowKey("a/b c", start);
    ASSERT_TRUE(ParseWindowKey(key, &job, &parsed));
    EXPECT_EQ(job, "a/b c");
    EXPECT_EQ(parsed, start);
  }
  absl::string_view job;
  int64_t parsed = 0;
  EXPECT_FALSE(ParseWindowKey("short", &job, &parsed));
}

TEST(WindowKey, RejectsEmptyJobsAndJobsWithNul) {
  EXPECT_TRUE(ValidateJobName("job-1").ok());
  EXPECT_EQ(ValidateJobName("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateJobName(absl::string_view("a\0b", 3)).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ProgressKey, OrdersPartitionsNumerically) {
  EXPECT_LT(ProgressKey("t", 2), ProgressKey("t", 10));
  EXPECT_LT(ProgressKey("t", 255), ProgressKey("t", 256));
  EXPECT_NE(ProgressKey("t", 1), ProgressKey("t1", 1));
}

}  // namespace
}  // namespace bubblewatch
