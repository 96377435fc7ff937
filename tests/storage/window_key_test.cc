#include "storage/window_key.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/units.h"

namespace bubblewatch {
namespace {

using testing::kMaxNs;
using testing::kMinNs;

TEST(WindowKey, BytewiseOrderIsSignedStartOrder) {
  const std::vector<int64_t> starts = {
      kMinNs, kMinNs + 1, -10'000'000'000, -1,         0,     1,
      255,    256,        10'000'000'000,  kMaxNs - 1, kMaxNs};
  for (size_t i = 1; i < starts.size(); ++i) {
    EXPECT_LT(WindowKey("job", starts[i - 1]), WindowKey("job", starts[i]))
        << starts[i - 1] << " vs " << starts[i];
  }
}

TEST(WindowKey, JobsThatArePrefixesOfEachOtherDoNotInterleave) {
  // Every key of "job1" sorts before every key of "job10".
  EXPECT_LT(WindowKey("job1", kMaxNs), WindowKey("job10", kMinNs));
  EXPECT_LT(WindowKeyLimit("job1"), WindowKey("job10", kMinNs));
  EXPECT_LT(WindowKey("job1", kMaxNs), WindowKeyLimit("job1"));
  EXPECT_LT(WindowKeyPrefix("job1"), WindowKey("job1", kMinNs));
}

TEST(WindowKey, ParsesWhatItBuilds) {
  for (int64_t start : {kMinNs, int64_t{-5}, int64_t{0}, kMaxNs}) {
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
