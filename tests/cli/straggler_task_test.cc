// Stragglers live, without a broker: a synthetic fleet of multi-rank jobs
// with planted stragglers (what `produce --synthetic --scenario straggler
// --truth` sends) goes through the partition task over the in-memory Kafka
// (tests/processor/task_driver.h), as `process` runs it, and `query job
// --json` names each job's planted rank, with the planted cause carrying at
// least 95 % of the planted wait over the fleet
// (docs/semantics.md#streaming-collectives). This was a broker test
// (StragglerKafka.QueryJobNamesThePlantedRankAndCause, ctest label kafka)
// with the same assertions; what it checks is the collective analysis in
// the stream, not Kafka (docs/architecture.md#testing-the-partition-task).
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ingest/synthetic/synthetic_fleet.h"
#include "simdjson.h"
#include "tests/cli/cli_runner.h"
#include "tests/processor/task_driver.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::testing::RunBubblewatch;

struct Truth {
  std::string job;
  int64_t rank = -1;
  std::string cause;
  int64_t planted_wait_ns = 0;
};

std::vector<Truth> ReadTruth(const std::string& path) {
  std::vector<Truth> out;
  std::ifstream in(path);
  simdjson::dom::parser parser;
  for (std::string line; std::getline(in, line);) {
    simdjson::dom::element e = parser.parse(line);
    out.push_back(Truth{.job = std::string(std::string_view(e["job"])),
                        .rank = int64_t(e["rank"]),
                        .cause = std::string(std::string_view(e["cause"])),
                        .planted_wait_ns = int64_t(e["planted_wait_ns"])});
  }
  return out;
}

TEST(StragglerTask, QueryJobNamesThePlantedRankAndCause) {
  testing::TempDir dir;
  // `produce --synthetic --scenario straggler --jobs 3 --gpus-per-job 4
  // --duration 35s --seed 7 --truth FILE` (end markers, default batching).
  SyntheticFleetOptions fleet;
  fleet.scenario = SyntheticScenario::kStraggler;
  fleet.jobs = 3;
  fleet.gpus_per_job = 4;
  fleet.duration = absl::Seconds(35);
  fleet.seed = 7;
  const std::string truth_file = dir.Sub("truth.jsonl");
  {
    absl::StatusOr<std::vector<SyntheticJob>> jobs =
        GenerateSyntheticFleet(fleet);
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    ASSERT_TRUE(WriteSyntheticTruthFile(*jobs, truth_file).ok());
  }
  const std::vector<Truth> truth = ReadTruth(truth_file);
  ASSERT_EQ(truth.size(), 3u);

  // `process --windows-topic '' --idle-timeout 3s --exit-when-idle 4s`
  // (its default lateness, 2 s).
  StreamProcessorOptions options = testing::ProcessOptions();
  options.windows_topic = "";
  options.windower.lateness_ns = 2'000'000'000;
  const std::string store = dir.Sub("store");
  {
    testing::TaskDriver driver(options, store);
    ASSERT_TRUE(driver.SendFleet(fleet, {}).ok());
    const absl::Status processed = driver.RunUntilIdle();
    ASSERT_TRUE(processed.ok()) << processed;
    driver.Kill();  // After the last commit: the store closed, for `query`.
  }

  double planted = 0;
  double attributed = 0;
  simdjson::dom::parser parser;
  for (const Truth& t : truth) {
    SCOPED_TRACE(t.job + " rank " + std::to_string(t.rank) + " " + t.cause);
    auto q = RunBubblewatch("query job " + t.job + " --json --store '" + store +
                            "'");
    ASSERT_EQ(q.exit_code, 0) << q.err;
    simdjson::dom::element doc = parser.parse(q.out);
    simdjson::dom::array stragglers;
    ASSERT_EQ(doc["stragglers"].get(stragglers), simdjson::SUCCESS) << q.out;
    ASSERT_GE(stragglers.size(), 1u);
    // The planted rank caused the most wait.
    EXPECT_EQ(int64_t(stragglers.at(0)["rank"]), t.rank);
    simdjson::dom::array ranks = doc["ranks"];
    EXPECT_EQ(ranks.size(), 4u);
    planted += static_cast<double>(t.planted_wait_ns);
    for (simdjson::dom::element s : stragglers) {
      if (int64_t(s["rank"]) != t.rank) continue;
      // causes_us names the bubble causes as the truth does; a slower GPU
      // is `compute`.
      attributed += double(s["causes_us"][t.cause]) * 1e3;
    }
    // Healthy ranks cause next to nothing: all but the planted rank together
    // under 5 % of its wait.
    double others = 0;
    for (simdjson::dom::element s : stragglers) {
      if (int64_t(s["rank"]) != t.rank) others += double(s["wait_caused_us"]);
    }
    EXPECT_LT(others, 0.05 * double(stragglers.at(0)["wait_caused_us"]));
  }
  EXPECT_GT(planted, 0);
  EXPECT_GE(attributed, 0.95 * planted)
      << "attributed " << attributed << " of " << planted << " ns planted";
  std::printf(
      "planted straggler wait attributed to the planted rank and "
      "cause: %.4f of %.0f ms\n",
      attributed / planted, planted / 1e6);
}

}  // namespace
}  // namespace bubblewatch
