// Options report every problem at once.
#include <algorithm>
#include <iterator>
#include <string>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "processor/stream_processor.h"

namespace bubblewatch {
namespace {

using ::testing::HasSubstr;

TEST(StreamProcessorOptions, DefaultsWithBrokersAreValid) {
  StreamProcessorOptions options;
  EXPECT_EQ(options.Validate().code(), absl::StatusCode::kInvalidArgument);
  options.brokers = "localhost:9092";
  EXPECT_TRUE(options.Validate().ok()) << options.Validate();
}

TEST(StreamProcessorOptions, ReportsEveryProblemInOneMessage) {
  StreamProcessorOptions options;  // No brokers.
  options.topic = "";
  options.windower.window_ns = 0;
  options.windower.lateness_ns = -1;
  options.limits.max_events = 0;
  options.state_limits.max_open_windows = 0;
  options.state_limits.max_jobs_per_partition = -3;
  options.job_expiry = absl::ZeroDuration();
  options.skew_warning = absl::Seconds(-1);
  options.log_interval = absl::ZeroDuration();
  absl::Status s = options.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  const std::string message(s.message());
  const std::string expected[] = {
      "brokers is required",
      "topic is required",
      "windower.window_ns must be within 1 and",
      "windower.lateness_ns must be >= 0, not -1",
      "limits.max_events must be >= 1, not 0",
      "state_limits.max_open_windows must be >= 1, not 0",
      "state_limits.max_jobs_per_partition must be >= 1, not -3",
      "job_expiry must be > 0, not 0",
      "skew_warning must be >= 0, not -1s",
      "log_interval must be > 0, not 0",
  };
  for (const std::string& problem : expected) {
    EXPECT_THAT(message, HasSubstr(problem));
  }
  // One message, problems separated by "; ", nothing else listed.
  EXPECT_THAT(message, ::testing::StartsWith(
                           "invalid StreamProcessorOptions: brokers is "
                           "required; topic is required; "));
  EXPECT_EQ(std::count(message.begin(), message.end(), ';'),
            static_cast<std::ptrdiff_t>(std::size(expected) - 1));
}

TEST(StreamProcessorOptions, CreateRefusesInvalidOptionsBeforeTouchingKafka) {
  StreamProcessorOptions options;
  options.brokers = "localhost:1";  // Never reached.
  options.windower.window_ns = -5;
  options.retention = absl::ZeroDuration();
  absl::StatusOr<std::unique_ptr<StreamProcessor>> p =
      StreamProcessor::Create(options, /*store=*/nullptr);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("windower.window_ns"));
  EXPECT_THAT(p.status().message(), HasSubstr("retention must be > 0"));
}

TEST(ProcessorLimits, ValidateNamesEachLimit) {
  ProcessorLimits limits;
  EXPECT_TRUE(limits.Validate().ok());
  limits.max_sequence_step = 0;
  limits.max_open_windows = 0;
  EXPECT_EQ(limits.Validate().message(),
            "invalid ProcessorLimits: max_open_windows must be >= 1, not 0; "
            "max_sequence_step must be >= 1, not 0");
}

}  // namespace
}  // namespace bubblewatch
