// `--brokers embedded` on the commands that take --brokers:
// `produce` runs librdkafka's mock cluster in its own process; `process`
// refuses it at once (exit 2), since a mock cluster lives inside one process
// and a lone processor on it would never see an event. Before, `process`
// took "embedded" for a host name and waited forever for "embedded:9092".
#include <filesystem>
#include <regex>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cli/cli_runner.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::testing::CliResult;
using ::bubblewatch::testing::RunBubblewatch;
using ::bubblewatch::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

// Generous for a usage error, which takes milliseconds; the command is
// killed after it (exit 137), so a hang fails the test instead of the suite.
constexpr int kKillAfterS = 30;

TEST(BrokersFlag, ProcessRefusesEmbeddedAtOnce) {
  TempDir dir;
  CliResult r = RunBubblewatch(
      "process --brokers embedded --store '" + dir.Sub("store") + "'", ".",
      kKillAfterS);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("bubblewatch process: --brokers embedded"));
  EXPECT_THAT(r.err, HasSubstr("bubblewatch demo"));
  EXPECT_THAT(r.err, Not(HasSubstr("Failed to resolve")));
  EXPECT_EQ(r.out, "");
  // Refused before anything was opened.
  EXPECT_FALSE(std::filesystem::exists(dir.Sub("store")));
}

TEST(BrokersFlag, ProcessRefusesEmbeddedWithOtherUsageErrors) {
  // All usage errors in one message, as for every other flag.
  CliResult r = RunBubblewatch("process --brokers embedded --window 0s", ".",
                               kKillAfterS);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--brokers embedded"));
  EXPECT_THAT(r.err, HasSubstr("--store is required"));
}

TEST(BrokersFlag, ProduceRunsTheEmbeddedCluster) {
  CliResult r = RunBubblewatch(
      "produce --brokers embedded --synthetic --jobs 1 --gpus-per-job 1 "
      "--duration 2s --log-level warn",
      ".", kKillAfterS);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // The summary line: events went out and every batch was acknowledged.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.err, m,
      std::regex(R"((\d+) events in (\d+) batches .* (\d+) of (\d+) )"
                 R"(batches acknowledged)")))
      << r.err;
  EXPECT_GT(std::stoll(m[1]), 0);
  EXPECT_EQ(m[3], m[2]);
  EXPECT_EQ(m[4], m[2]);
}

TEST(BrokersFlag, ProduceWatchRefusesEmbeddedAtOnce) {
  TempDir dir;
  CliResult r =
      RunBubblewatch("produce --brokers embedded --watch '" + dir.path() + "'",
                     ".", kKillAfterS);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--watch needs a real broker, not 'embedded'"));
}

}  // namespace
}  // namespace bubblewatch
