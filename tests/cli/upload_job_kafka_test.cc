// A finished multi-rank job uploaded as users upload it, against a real
// Kafka broker (ctest label kafka): its rank files sent by one `produce`
// each, one after another, or by one `produce` of them all, then one
// `process`. Every rank lands in the stored windows and the planted
// straggler is named (docs/semantics.md#job-lifecycle, "Multi-rank jobs").
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "simdjson.h"
#include "tests/cli/cli_runner.h"
#include "tests/testing/kafka_broker.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_time.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::testing::RunBubblewatch;

// Writes a TP 2 × DP 2 job with rank 1 slow (rank-N.json), its truth
// moved out of the directory; returns the rank files.
std::vector<std::string> WriteJob(testing::TempDir& dir) {
  const std::string out = dir.Sub("job");
  const std::string cmd = std::string(MAKE_PARALLEL_JOB) + " --out '" + out +
                          "' --tp 2 --dp 2 --root 1:3:3000:compute";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::filesystem::rename(out + "/truth.json", dir.Sub("truth.json"));
  std::vector<std::string> files;
  for (int rank = 0; rank < 4; ++rank) {
    files.push_back(out + "/rank-" + std::to_string(rank) + ".json");
  }
  return files;
}

void ProcessAndCheck(const std::string& brokers, const std::string& topic,
                     testing::TempDir& dir, const std::string& job) {
  const std::string store = dir.Sub("store");
  auto process = RunBubblewatch(
      "process --brokers " + brokers + " --topic " + topic + " --group " +
      topic + " --windows-topic '' --dlq-topic " + topic + ".dlq --store '" +
      store + "' --lateness 3600s --idle-timeout " +
      testing::ScaledFlag(absl::Seconds(3)) + " --exit-when-idle " +
      testing::ScaledFlag(absl::Seconds(4)) + " --log-level info");
  ASSERT_EQ(process.exit_code, 0) << process.err;
  // The exit summary: "...; late N; duplicates ...".
  EXPECT_NE(process.err.find("; late 0;"), std::string::npos) << process.err;
  auto q =
      RunBubblewatch("query job " + job + " --json --store '" + store + "'");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(q.out);
  simdjson::dom::array ranks;
  ASSERT_EQ(doc["ranks"].get(ranks), simdjson::SUCCESS) << q.out;
  EXPECT_EQ(ranks.size(), 4u) << q.out;
  simdjson::dom::array stragglers;
  ASSERT_EQ(doc["stragglers"].get(stragglers), simdjson::SUCCESS) << q.out;
  ASSERT_GE(stragglers.size(), 1u) << q.out;
  EXPECT_EQ(int64_t(stragglers.at(0)["rank"]), 1) << q.out;
}

TEST(UploadJobKafka, RankFilesOneProduceEachEndTheJobTogether) {
  const std::string brokers = testing::Brokers();
  ASSERT_FALSE(HasFailure());
  const std::string topic = testing::Unique("it-upload-each");
  testing::TempDir dir;
  const std::vector<std::string> files = WriteJob(dir);
  for (int rank = 0; rank < 4; ++rank) {
    auto produce =
        RunBubblewatch("produce --brokers " + brokers + " --topic " + topic +
                       " --job up-each --rank " + std::to_string(rank) + " '" +
                       files[rank] + "' --log-level error");
    ASSERT_EQ(produce.exit_code, 0) << produce.err;
  }
  ProcessAndCheck(brokers, topic, dir, "up-each");
}

TEST(UploadJobKafka, RankFilesInOneProduceEndTheJobTogether) {
  const std::string brokers = testing::Brokers();
  ASSERT_FALSE(HasFailure());
  const std::string topic = testing::Unique("it-upload-all");
  testing::TempDir dir;
  const std::vector<std::string> files = WriteJob(dir);
  std::string args;
  for (const std::string& f : files) args += " '" + f + "'";
  auto produce =
      RunBubblewatch("produce --brokers " + brokers + " --topic " + topic +
                     " --job up-all" + args + " --log-level error");
  ASSERT_EQ(produce.exit_code, 0) << produce.err;
  ProcessAndCheck(brokers, topic, dir, "up-all");
}

}  // namespace
}  // namespace bubblewatch
