// Golden reports: `analyze --json --window 10s` of every real
// trace in tests/testdata/real/ equals the committed report byte for byte.
// A failure is a change in behaviour: if it is intended, `ops/golden
// --update` rewrites the reports and the diff shows every figure that moved.
#include <cctype>
#include <string>

#include "gtest/gtest.h"
#include "tests/cli/cli_runner.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::testing::ReadFile;
using ::bubblewatch::testing::RunBubblewatch;

const std::string kReal = std::string(BUBBLEWATCH_TESTDATA_DIR) + "/real";
const std::string kGolden = std::string(BUBBLEWATCH_TESTDATA_DIR) + "/golden";

class GoldenReports : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenReports, AnalyzeJsonEqualsTheCommittedReport) {
  const std::string& trace = GetParam();  // e.g. "hta/rank0.json.gz".
  std::string golden_name = trace;
  for (char& c : golden_name) {
    if (c == '/') c = '_';
  }
  const std::string want =
      ReadFile(kGolden + "/" + golden_name + ".analyze.json");
  ASSERT_FALSE(want.empty()) << "no golden report; run ops/golden --update";
  // Relative to tests/testdata/real, as ops/golden writes them.
  auto r = RunBubblewatch(
      "analyze --json --pretty --window 10s --threads 0 '" + trace + "'",
      kReal);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.out == want)
      << trace << ": the report differs from tests/testdata/golden/"
      << golden_name
      << ".analyze.json; if the change is intended, run ops/golden --update";
}

INSTANTIATE_TEST_SUITE_P(
    RealTraces, GoldenReports,
    ::testing::Values("hta/benchmark_result_2869224_1695835535_trace.json.gz",
                      "hta/mtia_rank_0.json.gz", "hta/nccl_data.json.gz",
                      "hta/rank0.json.gz", "hta/sampled_rank-0.json.gz",
                      "hta/sampled_rank-1.json.gz", "nsys/h100_2gpu_1s.sqlite",
                      "nsys/healthy_1pct.sqlite", "nsys/mfu_2gpu_after.sqlite",
                      "nsys/mfu_2gpu_before.sqlite"),
    [](const ::testing::TestParamInfo<std::string>& info) {
      std::string name;
      for (char c : info.param) {
        name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      }
      return name;
    });

}  // namespace
}  // namespace bubblewatch
