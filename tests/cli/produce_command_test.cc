// `bubblewatch produce --synthetic` against the embedded (in-process mock)
// cluster: what the scenarios send, without a real broker.
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ingest/batched_trace.h"
#include "ingest/synthetic/synthetic_fleet.h"
#include "tests/cli/cli_runner.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::testing::CliResult;
using ::bubblewatch::testing::RunBubblewatch;
using ::testing::HasSubstr;

// The straggler scenario (item 5) sends every event of its
// multi-rank jobs, collective records included, and writes one truth line
// per job.
TEST(ProduceCommand, StragglerScenarioProducesToTheEmbeddedCluster) {
  const std::string truth = ::testing::TempDir() + "/produce_straggler.truth";
  CliResult r = RunBubblewatch(
      "produce --brokers embedded --synthetic --scenario straggler --jobs 3 "
      "--gpus-per-job 4 --duration 2s --seed 7 --replay-speed max --truth " +
      truth);
  ASSERT_EQ(r.exit_code, 0) << r.err;

  // The same fleet in this process: how many events and batches to expect.
  SyntheticFleetOptions options;
  options.scenario = SyntheticScenario::kStraggler;
  options.jobs = 3;
  options.gpus_per_job = 4;
  options.duration = absl::Seconds(2);
  options.seed = 7;
  absl::StatusOr<std::vector<SyntheticJob>> jobs =
      GenerateSyntheticFleet(options);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  int64_t events = 0;
  int64_t batches = 0;
  size_t records = 0;
  for (const SyntheticJob& job : *jobs) {
    for (const Trace& rank : job.ranks) {
      records += rank.collectives.size();
      BatchedTrace batched(rank,
                           BatchHeader{.job = rank.job, .host = rank.host}, {});
      events += batched.num_events();
      // And the stream's end marker.
      batches += static_cast<int64_t>(batched.num_batches()) + 1;
    }
  }
  EXPECT_GT(records, 0u);
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat(events, " events in ", batches,
                                            " batches")));
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat(batches, " of ", batches,
                                            " batches acknowledged")));

  std::ifstream in(truth);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u);
  for (size_t j = 0; j < lines.size(); ++j) {
    EXPECT_EQ(lines[j] + "\n", StragglerTruthJsonLine((*jobs)[j]));
    EXPECT_THAT(lines[j], ::testing::HasSubstr("\"scope\":\"straggler\""));
  }
}

TEST(ProduceCommand, StragglerScenarioNeedsTwoGpusPerJob) {
  CliResult r = RunBubblewatch(
      "produce --brokers embedded --synthetic --scenario straggler "
      "--gpus-per-job 1 --duration 1s");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("at least 2 GPUs per job"));
}

}  // namespace
}  // namespace bubblewatch
