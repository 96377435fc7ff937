// `bubblewatch analyze DIR` of NCCL Inspector logs
// (docs/analyze.md#inspector-logs): a generated TP × DP job's logs in a dump
// directory named as the plugin names it, detected by content; the multi-rank
// report names the planted process with its host and pid; mixing logs with
// traces, and bad lines, are clear outcomes.
#include <algorithm>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ingest/synthetic/synthetic_inspector_job.h"
#include "simdjson.h"
#include "tests/cli/cli_runner.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace {

using testing::RunBubblewatch;

// Writes the job's logs under dir/nccl-inspector-4242/ and returns that.
std::string WriteJob(const testing::TempDir& dir, const InspectorJobLogs& job) {
  const std::string logs = dir.Sub("nccl-inspector-4242");
  EXPECT_EQ(std::system(("mkdir -p '" + logs + "'").c_str()), 0);
  for (const InspectorJobFile& f : job.files) {
    testing::WriteFile(logs + "/" + f.name, f.text);
  }
  return logs;
}

TEST(AnalyzeInspector, ADumpDirectoryGivesTheMultiRankReport) {
  for (bool verbose : {true, false}) {
    InspectorJobSpec spec;
    spec.tp = 4;
    spec.dp = 2;
    spec.procs_per_host = 4;
    spec.plant = 6;
    spec.verbose = verbose;
    const InspectorJobLogs job = GenerateInspectorJob(spec);
    testing::TempDir dir;
    const std::string logs = WriteJob(dir, job);

    const testing::CliResult r =
        RunBubblewatch("analyze --json '" + logs + "'");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    simdjson::dom::parser parser;
    simdjson::dom::element doc = parser.parse(r.out);
    EXPECT_EQ(std::string_view(doc["format"]), "inspector");
    EXPECT_EQ(std::string_view(doc["job"]), "4242");
    EXPECT_EQ(std::string_view(doc["timing"]),
              verbose ? "kernel" : "exec_time");
    EXPECT_TRUE(bool(doc["job_ranks_known"]));
    EXPECT_EQ(int64_t(doc["inspector"]["coll_records"]),
              job.truth.coll_records);
    simdjson::dom::array processes = doc["processes"];
    EXPECT_EQ(processes.size(), 8u);
    simdjson::dom::array comms = doc["communicators"];
    EXPECT_EQ(comms.size(), 1u + 2u + 4u);  // World, TP groups, DP groups.
    EXPECT_EQ(int64_t(doc["collectives"]["unmatched"]), 0);
    simdjson::dom::array ranks = doc["ranks"];
    ASSERT_EQ(ranks.size(), 8u);
    for (simdjson::dom::element rank : ranks) {
      const int64_t r6 = int64_t(rank["rank"]);
      EXPECT_EQ(int64_t(rank["pid"]), job.truth.pids[r6]);
      EXPECT_EQ(std::string_view(rank["host"]), job.truth.hosts[r6]);
    }
    simdjson::dom::array stragglers = doc["stragglers"];
    ASSERT_GT(stragglers.size(), 0u);
    EXPECT_EQ(int64_t(stragglers.at(0)["rank"]), 6);
    EXPECT_EQ(int64_t(stragglers.at(0)["pid"]), job.truth.pids[6]);
    EXPECT_EQ(std::string_view(stragglers.at(0)["host"]), job.truth.hosts[6]);
    EXPECT_FALSE(doc["what_if"].is_null());

    const testing::CliResult text =
        RunBubblewatch("analyze --no-color '" + logs + "'");
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_NE(text.out.find(absl::StrCat("rank 6 on ", job.truth.hosts[6],
                                         " pid ", job.truth.pids[6])),
              std::string::npos)
        << text.out;
    EXPECT_NE(text.out.find("Communicators"), std::string::npos);
  }
}

TEST(AnalyzeInspector, BadLinesAndDropsAreCountedInTheReport) {
  InspectorJobSpec spec;
  spec.steps = 10;
  InspectorJobLogs job = GenerateInspectorJob(spec);
  // A cut line in the middle of one log, and a ring that dropped 7.
  std::string& text = job.files[0].text;
  const size_t mid = text.find('\n', text.size() / 2);
  text.insert(mid + 1, "{\"coll_perf\":{\"coll\":\"AllG\n");
  const std::string marker = "\"coll_dropped_total\":0";
  text.replace(text.find(marker), marker.size(), "\"coll_dropped_total\":7");
  testing::TempDir dir;
  const std::string logs = WriteJob(dir, job);
  const testing::CliResult r = RunBubblewatch("analyze --json '" + logs + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(r.out);
  EXPECT_EQ(int64_t(doc["inspector"]["coll_dropped"]), 7);
  EXPECT_EQ(int64_t(doc["inspector"]["skipped"]["bad JSON line (line "
                                                "skipped)"]),
            1);
  const testing::CliResult t =
      RunBubblewatch("analyze --no-color '" + logs + "'");
  EXPECT_NE(t.out.find("7 records dropped by the plugin's ring buffers"),
            std::string::npos)
      << t.out;
}

// More records in the job's logs than --max-inspector-records (lowered
// here; the default bounds a 10 GB log's memory): one line naming the
// limit, exit 3. At the limit, or with 0 (no cap), the report.
TEST(AnalyzeInspector, MoreRecordsThanTheLimitIsOneClearLine) {
  InspectorJobSpec spec;
  spec.steps = 4;
  const InspectorJobLogs job = GenerateInspectorJob(spec);
  testing::TempDir dir;
  const std::string logs = WriteJob(dir, job);
  const int64_t records = job.truth.coll_records;
  ASSERT_GT(records, 10);
  for (int64_t limit : {records, int64_t{0}}) {
    const testing::CliResult ok = RunBubblewatch(absl::StrCat(
        "analyze --json --max-inspector-records ", limit, " '", logs, "'"));
    EXPECT_EQ(ok.exit_code, 0) << limit << ": " << ok.err;
  }
  const testing::CliResult over = RunBubblewatch(absl::StrCat(
      "analyze --json --max-inspector-records ", records - 1, " '", logs, "'"));
  EXPECT_EQ(over.exit_code, 3);
  EXPECT_TRUE(over.out.empty()) << over.out;
  EXPECT_NE(
      over.err.find(absl::StrCat("Inspector logs hold more than ", records - 1,
                                 " records (--max-inspector-records")),
      std::string::npos)
      << over.err;
  EXPECT_EQ(std::count(over.err.begin(), over.err.end(), '\n'), 1) << over.err;
  const testing::CliResult negative = RunBubblewatch(
      absl::StrCat("analyze --max-inspector-records -1 '", logs, "'"));
  EXPECT_EQ(negative.exit_code, 2) << negative.err;
}

TEST(AnalyzeInspector, LogsMixedWithTracesAreRefused) {
  InspectorJobSpec spec;
  spec.steps = 2;
  const InspectorJobLogs job = GenerateInspectorJob(spec);
  testing::TempDir dir;
  const std::string logs = WriteJob(dir, job);
  testing::WriteFile(logs + "/trace.json",
                     "{\"gpu_kernels\": [{\"name\": \"k\", \"start\": 0, "
                     "\"end\": 1}]}");
  const testing::CliResult r = RunBubblewatch("analyze '" + logs + "'");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("trace.json: not an NCCL Inspector log"),
            std::string::npos)
      << r.err;
}

TEST(AnalyzeInspector, ProduceRefusesOneLogWithOneLine) {
  const testing::CliResult r =
      RunBubblewatch(absl::StrCat("produce --brokers 127.0.0.1:1 --job j '",
                                  BUBBLEWATCH_TESTDATA_DIR,
                                  "/inspector/readme_v4_3-pid1639453.log'"),
                     ".", 60);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("an NCCL Inspector log: produce does not send these"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace bubblewatch
