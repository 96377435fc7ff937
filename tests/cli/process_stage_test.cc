// `bubblewatch process --stage` (docs/process.md#stage-2): the stage's
// flags are checked before anything starts, one clear error line each.
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

TEST(ProcessStage, HelpNamesTheMergeStageAndItsDefaults) {
  CliResult r = RunBubblewatch("process --help");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("--stage STAGE"));
  EXPECT_THAT(r.out, HasSubstr("bubblewatch.window-parts"));
  EXPECT_THAT(r.out, HasSubstr("bubblewatch-merge"));
  EXPECT_THAT(r.out, HasSubstr("bubblewatch.window-parts.state"));
}

TEST(ProcessStage, WhatTheMergeStageDoesNotRunIsAUsageError) {
  TempDir dir;
  const std::string base =
      "process --brokers 127.0.0.1:1 --store " + dir.Sub("store") + " ";
  struct Case {
    std::string args;
    std::string error;
  };
  for (const Case& c : std::vector<Case>{
           {"--stage bogus", "--stage must be events or merge, not \"bogus\""},
           {"--stage merge --rules r.yaml", "--stage merge runs no --rules"},
       }) {
    SCOPED_TRACE(c.args);
    CliResult r = RunBubblewatch(base + c.args);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("bubblewatch process: " + c.error));
  }
}

}  // namespace
}  // namespace bubblewatch
