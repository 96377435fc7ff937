// End-to-end tests of `bubblewatch analyze`: exit codes, error lines, the
// JSON contract and the golden report of the seed's sample.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "simdjson.h"
#include "tests/cli/cli_runner.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::testing::ReadFile;
using ::bubblewatch::testing::RunBubblewatch;
using ::bubblewatch::testing::WriteTempFile;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kTestdata = BUBBLEWATCH_TESTDATA_DIR;

TEST(AnalyzeCommand, SeedSampleJsonMatchesTheGoldenReport) {
  auto r = RunBubblewatch("analyze --json --pretty timeline/seed_sample.json",
                          kTestdata);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, ReadFile(kTestdata + "/golden/seed_sample.analyze.json"));
}

TEST(AnalyzeCommand, SeedSampleJsonHasTheBriefsKeysAndNumbers) {
  auto r =
      RunBubblewatch("analyze --json timeline/seed_sample.json", kTestdata);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(r.out);
  EXPECT_EQ(double(doc["total_span_us"]), 130.0);
  EXPECT_EQ(double(doc["compute_time_us"]), 45.0);
  EXPECT_EQ(double(doc["bubble_time_us"]), 85.0);
  EXPECT_EQ(double(doc["largest_bubble_us"]), 80.0);
  EXPECT_EQ(std::string_view(doc["culprit_before_bubble"]), "conv2d_fwd");
  simdjson::dom::object attribution = doc["attribution_us"];
  EXPECT_EQ(attribution.size(), 8u);
  EXPECT_EQ(double(attribution["host_sync"]), 79.0);
  EXPECT_EQ(double(attribution["launch_overhead"]), 1.0);
  EXPECT_EQ(double(attribution["host_compute"]), 5.0);
  EXPECT_EQ(double(attribution["unattributed"]), 0.0);
  simdjson::dom::array devices = doc["devices"];
  EXPECT_EQ(devices.size(), 1u);
  simdjson::dom::array bubbles = doc["bubbles"];
  ASSERT_EQ(bubbles.size(), 2u);
  EXPECT_EQ(std::string_view(bubbles.at(0)["before"]), "conv2d_fwd");
  EXPECT_EQ(std::string_view(bubbles.at(0)["after"]), "batch_norm");
  EXPECT_EQ(std::string_view(bubbles.at(0)["cause"]), "host_sync");
  EXPECT_EQ(double(bubbles.at(0)["duration_us"]), 80.0);
  simdjson::dom::array advice = doc["advice"];
  ASSERT_GE(advice.size(), 1u);
  EXPECT_EQ(std::string_view(advice.at(0)["cause"]), "host_sync");
}

TEST(AnalyzeCommand, TextReportShowsSummaryAttributionAndAdvice) {
  auto r = RunBubblewatch("analyze timeline/seed_sample.json", kTestdata);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("130.000 us"));
  EXPECT_THAT(r.out, HasSubstr("after conv2d_fwd"));
  EXPECT_THAT(r.out, HasSubstr("host_sync"));
  EXPECT_THAT(r.out, HasSubstr("Advice"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("\033[")));  // Not a terminal.
}

TEST(AnalyzeCommand, TopLimitsTheBubbleList) {
  auto r = RunBubblewatch("analyze --json --top 1 timeline/seed_sample.json",
                          kTestdata);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  simdjson::dom::parser parser;
  simdjson::dom::array bubbles = parser.parse(r.out)["bubbles"];
  EXPECT_EQ(bubbles.size(), 1u);
}

TEST(AnalyzeCommand, WindowsAddUpToTheWholeTrace) {
  auto r = RunBubblewatch(
      "analyze --json --window 50us timeline/seed_sample.json", kTestdata);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(r.out);
  double bubble = 0, compute = 0;
  for (simdjson::dom::element w : doc["windows"].get_array()) {
    bubble += double(w["bubble_time_us"]);
    compute += double(w["compute_time_us"]);
  }
  EXPECT_EQ(bubble, 85.0);
  EXPECT_EQ(compute, 45.0);
}

struct BadInput {
  const char* name;
  const char* content;
  const char* expected;  // Substring of the one error line.
};

class AnalyzeBadInput : public ::testing::TestWithParam<BadInput> {};

TEST_P(AnalyzeBadInput, ExitsThreeWithOneClearLine) {
  const BadInput& c = GetParam();
  std::string path = WriteTempFile(std::string(c.name) + ".json", c.content);
  auto r = RunBubblewatch("analyze --json '" + path + "'");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(r.out, "") << "no partial report on stdout";
  EXPECT_THAT(r.err, StartsWith("bubblewatch analyze: " + path + ": "));
  EXPECT_THAT(r.err, HasSubstr(c.expected));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AnalyzeBadInput,
    ::testing::Values(
        BadInput{
            "bad_json",
            R"({"gpu_kernels": [{"name": "a", "start_us": 1,, "end_us": 2}]})",
            "bad JSON at offset"},
        BadInput{
            "truncated_json",
            R"({"gpu_kernels": [{"name": "a", "start_us": 1, "end_us": 2,)",
            "bad JSON"},
        BadInput{
            "missing_field",
            R"({"gpu_kernels": [{"name": "a", "start_us": 1, "stream": 7}]})",
            "gpu_kernels[0]: missing field \"end_us\""},
        BadInput{
            "end_before_start",
            R"({"gpu_kernels": [{"name": "a", "start_us": 5, "end_us": 2, "stream": 7}]})",
            "gpu_kernels[0]: end_us 2 is before start_us 5"},
        BadInput{
            "non_finite",
            R"({"gpu_kernels": [{"name": "a", "start_us": NaN, "end_us": 2, "stream": 7}]})",
            "not a finite number"},
        BadInput{
            "too_large",
            R"({"gpu_kernels": [{"name": "a", "start_us": 1e300, "end_us": 2, "stream": 7}]})",
            "does not fit"},
        BadInput{
            "unknown_kind",
            R"({"gpu_kernels": [{"name": "a", "start_us": 1, "end_us": 2, "stream": 7, "kind": "dma"}]})",
            "unknown kind \"dma\""},
        BadInput{"unknown_format", R"(hello, I am not a trace)",
                 "unknown format"},
        // fits int64 ns, but no window arithmetic could use it.
        BadInput{
            "near_int64_max",
            R"({"gpu_kernels": [{"name": "a", "start_us": 9223372030000000, "end_us": 9223372031000000, "stream": 7}]})",
            "outside the accepted times"},
        BadInput{
            "kernel_of_584_years",
            R"({"gpu_kernels": [{"name": "a", "start_us": -9223372036854775, "end_us": 9223372036854775, "stream": 7}]})",
            "outside the accepted times"}),
    [](const ::testing::TestParamInfo<BadInput>& info) {
      return std::string(info.param.name);
    });

// Regression: `analyze --window 10s` on a one-kernel timeline at
// 9,223,372,030 s exited 134 (std::bad_alloc) instead of 3; kernels far
// apart exceed the window cap instead of allocating millions of windows.
TEST(AnalyzeCommand, WindowedAnalysisOfFarOffTimesExitsThree) {
  std::string near_max = WriteTempFile(
      "near_max.json",
      R"({"gpu_kernels": [{"name": "a", "start_us": 9223372030000000, "end_us": 9223372031000000, "stream": 7}]})");
  auto r = RunBubblewatch("analyze --window 10s '" + near_max + "'");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("outside the accepted times"));
  std::string far_apart = WriteTempFile(
      "far_apart.json",
      R"({"gpu_kernels": [{"name": "a", "start_us": 0, "end_us": 1, "stream": 7}, {"name": "b", "start_us": 4000000000000000, "end_us": 4000000000000001, "stream": 7}]})");
  r = RunBubblewatch("analyze --window 10s '" + far_apart + "'");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("windows of 10s"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  r = RunBubblewatch("analyze --window 10s --max-windows -1 '" + far_apart +
                     "'");
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

// Regression: `analyze` of a FIFO waited for a writer forever.
TEST(AnalyzeCommand, FifoIsRefusedAtOnce) {
  const std::string path =
      ::testing::TempDir() + "/fifo-" + std::to_string(getpid());
  std::filesystem::remove(path);
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  auto r = RunBubblewatch("analyze '" + path + "'");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("a FIFO"));
  std::filesystem::remove(path);
}

// Regression: a 2 GB sparse file was read whole (11 s, 4.2 GB)
// before failing; it stops at the first bytes that cannot be JSON.
TEST(AnalyzeCommand, SparseFileStopsAtTheFirstNulByte) {
  const std::string path =
      ::testing::TempDir() + "/sparse-" + std::to_string(getpid()) + ".json";
  { std::ofstream(path, std::ios::binary) << "{\"gpu_kernels\": ["; }
  std::filesystem::resize_file(path, uint64_t{1} << 30);  // 1 GiB, sparse.
  auto r = RunBubblewatch("analyze '" + path + "'");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("a NUL byte at offset 17"));
  std::filesystem::remove(path);
}

TEST(AnalyzeCommand, TimelineWithoutGpuKernelsNamesTheMissingField) {
  std::string path = WriteTempFile("no_gpu.json", R"({"cpu_events": []})");
  auto r = RunBubblewatch("analyze --format timeline " + path);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THAT(r.err, HasSubstr("missing field \"gpu_kernels\""));
}

// The Chrome reader parses blocks on --threads threads and merges them in
// file order: the report is the same byte for byte, windows included.
TEST(AnalyzeCommand, ThreadsDoNotChangeTheReport) {
  const std::string args =
      "--json --window 100ms --top 20 real/hta/rank0.json.gz";
  auto alone = RunBubblewatch("analyze --threads 0 " + args, kTestdata);
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  EXPECT_THAT(alone.out, HasSubstr("\"kernels\":6080"));
  for (const char* threads : {"1", "3", "-1"}) {
    auto r = RunBubblewatch(
        std::string("analyze --threads ") + threads + " " + args, kTestdata);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, alone.out) << "--threads " << threads;
  }
}

TEST(AnalyzeCommand, MissingFileExitsThree) {
  auto r = RunBubblewatch("analyze /nonexistent/trace.json");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THAT(r.err, HasSubstr("No such file"));
}

TEST(AnalyzeCommand, UsageErrorsExitTwo) {
  EXPECT_EQ(RunBubblewatch("analyze").exit_code, 2);
  EXPECT_EQ(RunBubblewatch("analyze --bogus x.json").exit_code, 2);
  EXPECT_EQ(RunBubblewatch("analyze --format xml x.json").exit_code, 2);
  EXPECT_EQ(RunBubblewatch("analyze --top notanumber x.json").exit_code, 2);
  EXPECT_EQ(RunBubblewatch("analyze --threads -2 x.json").exit_code, 2);
  EXPECT_EQ(RunBubblewatch("frobnicate").exit_code, 2);
  EXPECT_EQ(RunBubblewatch("").exit_code, 2);
}

TEST(AnalyzeCommand, HelpDescribesEveryOption) {
  auto r = RunBubblewatch("analyze --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* option : {"--format", "--json", "--top", "--window",
                             "--rank", "--device", "--threads"}) {
    EXPECT_THAT(r.out, HasSubstr(option));
  }
}

// Several ranks of one job (docs/analyze.md).
TEST(AnalyzeCommand, TwoSampledRanksGiveCollectivesAndTheStraggler) {
  auto r = RunBubblewatch(
      "analyze --json real/hta/sampled_rank-0.json.gz "
      "real/hta/sampled_rank-1.json.gz",
      kTestdata);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(r.out);
  simdjson::dom::array files = doc["files"];
  EXPECT_EQ(files.size(), 2u);
  EXPECT_EQ(int64_t(files.at(1)["input"]["rank"]), 1);
  simdjson::dom::element c = doc["collectives"];
  EXPECT_EQ(int64_t(c["matched"]), 10);
  EXPECT_EQ(int64_t(c["unsynchronized"]), 6);
  EXPECT_EQ(int64_t(c["used"]), 4);
  EXPECT_EQ(std::string_view(c["key"]), "stream_order");
  EXPECT_EQ(int64_t(c["world_size"]), 128);
  simdjson::dom::array ranks = doc["ranks"];
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_GT(double(ranks.at(0)["comm_wait_us"]), 0.0);
  EXPECT_TRUE(ranks.at(1)["clock_offset_us"].is_null());
  // No 3 instances agree on the files' clocks (docs/semantics.md#clocks).
  EXPECT_FALSE(bool(ranks.at(1)["clock_connected"]));
  EXPECT_TRUE(ranks.at(1)["clock_drift_us_per_s"].is_null());
  EXPECT_TRUE(ranks.at(1)["clock_residual_us"].is_null());
  EXPECT_TRUE(bool(ranks.at(0)["clock_connected"]));
  simdjson::dom::array stragglers = doc["stragglers"];
  ASSERT_EQ(stragglers.size(), 1u);
  EXPECT_EQ(int64_t(stragglers.at(0)["rank"]), 1);
  EXPECT_EQ(double(stragglers.at(0)["wait_caused_us"]),
            double(ranks.at(0)["comm_wait_us"]));
  EXPECT_EQ(simdjson::dom::object(stragglers.at(0)["causes_us"]).size(), 10u);
}

TEST(AnalyzeCommand, ADirectoryIsItsFilesAsRanks) {
  const std::string dir = ::testing::TempDir() + "/ranks-dir";
  std::filesystem::create_directories(dir);
  for (const char* f : {"sampled_rank-0.json.gz", "sampled_rank-1.json.gz"}) {
    std::filesystem::copy_file(
        kTestdata + "/real/hta/" + f, dir + "/" + f,
        std::filesystem::copy_options::overwrite_existing);
  }
  auto r = RunBubblewatch("analyze --no-color " + dir, kTestdata);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("2 ranks of 128"));
  EXPECT_THAT(r.out, HasSubstr("10 matched"));
  EXPECT_THAT(r.out, HasSubstr("6 unsynchronized"));
  EXPECT_THAT(r.out, HasSubstr("not connected (uncorrected): rank 1"));
  EXPECT_THAT(r.out, HasSubstr("rank 1: compute, "));
  EXPECT_THAT(r.out, HasSubstr("caused 5.283 ms of waits (100.0%)"));
}

TEST(AnalyzeCommand, OneExportOfTwoGpusIsTwoRanks) {
  auto r = RunBubblewatch("analyze --json real/nsys/mfu_2gpu_before.sqlite",
                          kTestdata);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(r.out);
  EXPECT_EQ(int64_t(doc["collectives"]["matched"]), 33);
  EXPECT_EQ(int64_t(doc["collectives"]["unsynchronized"]), 0);
  EXPECT_EQ(int64_t(doc["stragglers"].at(0)["rank"]), 1);
  // The report of the file itself is still there, unchanged in its keys.
  EXPECT_EQ(simdjson::dom::array(doc["devices"]).size(), 2u);
}

TEST(AnalyzeCommand, OneRankAloneSaysItsWaitsAreUnknown) {
  auto r = RunBubblewatch("analyze --no-color real/hta/nccl_data.json.gz",
                          kTestdata);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("21 collective kernels"));
  EXPECT_THAT(r.out, HasSubstr("unknown from one rank"));
}

TEST(AnalyzeCommand, TheSameRankTwiceIsBadInput) {
  auto r = RunBubblewatch(
      "analyze real/hta/sampled_rank-0.json.gz "
      "real/hta/sampled_rank-0.json.gz",
      kTestdata);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THAT(r.err, HasSubstr("rank 0 appears twice"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1);
}

TEST(AnalyzeCommand, BadOptionsAreAllNamedByTheirFlags) {
  auto r = RunBubblewatch(
      "analyze --top=-2 --window=-1s timeline/seed_sample.json", kTestdata);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("invalid options: --top must be >= 0"));
  EXPECT_THAT(r.err, HasSubstr("--window must be within"));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("window_ns")));
}

TEST(AnalyzeCommand, RankWithSeveralFilesIsAUsageError) {
  auto r = RunBubblewatch(
      "analyze --rank 0 real/hta/sampled_rank-0.json.gz "
      "real/hta/sampled_rank-1.json.gz",
      kTestdata);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--rank"));
}

}  // namespace
}  // namespace bubblewatch
