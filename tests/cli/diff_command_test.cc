// End-to-end tests of `bubblewatch diff`: the real before/after pair, hand-
// made pairs for each --fail-if condition kind (passing and failing), exit
// codes, bad condition syntax, and the --json contract.
#include <unistd.h>

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "simdjson.h"
#include "tests/cli/cli_runner.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::testing::CliResult;
using ::bubblewatch::testing::RunBubblewatch;
using ::bubblewatch::testing::WriteTempFile;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kTestdata = BUBBLEWATCH_TESTDATA_DIR;

// A training loop of `steps` steps in the seed's timeline JSON: one `busy_us`
// kernel per step, launched `lead_us` before it starts, then `gap_us` of GPU
// idle time while the host waits in cudaStreamSynchronize (or, without
// `sync`, runs Python), optionally inside ProfilerStep#N ranges.
struct LoopSpec {
  int steps = 4;
  double busy_us = 10'000;
  double gap_us = 2'000;
  double lead_us = 5;
  bool sync = true;
  bool annotated = true;
  std::string kernel = "gemm";
};

std::string LoopTimeline(const LoopSpec& s) {
  std::vector<std::string> gpu, cpu;
  double k = 100;
  for (int i = 0; i < s.steps; ++i) {
    const double next = k + s.busy_us + s.gap_us;
    const double launch = k - s.lead_us;
    gpu.push_back(absl::StrFormat(
        R"({"name": "%s", "start_us": %.3f, "end_us": %.3f, "stream": 7, )"
        R"("correlation": %d})",
        s.kernel, k, k + s.busy_us, i + 1));
    cpu.push_back(absl::StrFormat(
        R"({"name": "cudaLaunchKernel", "start_us": %.3f, "end_us": %.3f, )"
        R"("correlation": %d})",
        launch, launch + 1, i + 1));
    cpu.push_back(
        absl::StrFormat(R"({"name": "%s", "start_us": %.3f, "end_us": %.3f})",
                        s.sync ? "cudaStreamSynchronize" : "python_work",
                        launch + 1, next - s.lead_us));
    if (s.annotated) {
      cpu.push_back(absl::StrFormat(
          R"({"name": "ProfilerStep#%d", "start_us": %.3f, "end_us": %.3f})",
          i + 1, launch, next - s.lead_us));
    }
    k = next;
  }
  return absl::StrCat("{\"gpu_kernels\": [", absl::StrJoin(gpu, ",\n"),
                      "],\n\"cpu_events\": [", absl::StrJoin(cpu, ",\n"),
                      "]}\n");
}

// Per-process names: ctest runs each test as its own process, in parallel.
std::string WriteLoop(const std::string& name, const LoopSpec& spec) {
  return WriteTempFile(absl::StrCat(name, "_", getpid(), ".json"),
                       LoopTimeline(spec));
}

// The pairs the condition tests use. Figures (4 steps, 3 gaps; host_sync =
// gap - lead per gap, the lead being launch overhead):
//   base:      2 ms gaps; utilization 40/46 = 87.0%, bubble ratio 0.130,
//              host_sync 3 x 1.995 ms = 5.985 ms (1.496 ms/step).
//   regressed: 9 ms gaps; utilization 40/67 = 59.7%, bubble ratio 0.403,
//              host_sync 26.985 ms (6.746 ms/step: +5.25 ms/step).
//   mild:      6 ms gaps; host_sync 4.496 ms/step (+3.0 ms/step).
//   slower:    12 ms kernels: kernel:gemm +20%.
//   ahead:     the CPU launches 200 us ahead instead of 5 us.
class DiffPairs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    base_ = new std::string(WriteLoop("diff_base", {}));
    regressed_ = new std::string(WriteLoop("diff_regressed", {.gap_us = 9000}));
    mild_ = new std::string(WriteLoop("diff_mild", {.gap_us = 6000}));
    slower_ = new std::string(WriteLoop("diff_slower", {.busy_us = 12'000}));
    ahead_ = new std::string(WriteLoop("diff_ahead", {.lead_us = 200}));
    unannotated_ =
        new std::string(WriteLoop("diff_unannotated", {.annotated = false}));
  }

  static CliResult Diff(const std::string& before, const std::string& after,
                        const std::string& condition,
                        const std::string& extra = "") {
    return RunBubblewatch(absl::StrCat("diff ", extra, " --fail-if '",
                                       condition, "' '", before, "' '", after,
                                       "'"));
  }

  static std::string* base_;
  static std::string* regressed_;
  static std::string* mild_;
  static std::string* slower_;
  static std::string* ahead_;
  static std::string* unannotated_;
};

std::string* DiffPairs::base_;
std::string* DiffPairs::regressed_;
std::string* DiffPairs::mild_;
std::string* DiffPairs::slower_;
std::string* DiffPairs::ahead_;
std::string* DiffPairs::unannotated_;

TEST_F(DiffPairs, DropForm) {
  // utilization 87.0% -> 59.7%: a drop of 27.3 points.
  CliResult fail = Diff(*base_, *regressed_, "utilization_drop>2%");
  EXPECT_EQ(fail.exit_code, 1) << fail.err;
  EXPECT_THAT(fail.out, HasSubstr("FAIL  utilization_drop>2%"));
  EXPECT_THAT(fail.out, HasSubstr("87.0% -> 59.7%: drop 27.3 pts > 2.0 pts"));
  EXPECT_THAT(fail.err, HasSubstr("FAIL utilization_drop>2%"));
  // The other way round utilization rose: no drop.
  CliResult pass = Diff(*regressed_, *base_, "utilization_drop>2%");
  EXPECT_EQ(pass.exit_code, 0) << pass.out;
  EXPECT_THAT(pass.out, HasSubstr("passed"));
}

TEST_F(DiffPairs, RiseForm) {
  EXPECT_EQ(Diff(*base_, *regressed_, "bubble_rise>10ms").exit_code, 1);
  EXPECT_EQ(Diff(*base_, *mild_, "bubble_rise>20ms").exit_code, 0);
}

TEST_F(DiffPairs, SignedChangeOfARatio) {
  // bubble ratio 0.130 -> 0.403.
  EXPECT_EQ(Diff(*base_, *regressed_, "bubble_ratio>+0.05").exit_code, 1);
  EXPECT_EQ(Diff(*base_, *base_, "bubble_ratio>+0.05").exit_code, 0);
  EXPECT_EQ(Diff(*base_, *regressed_, "bubble_ratio>+30%").exit_code, 0);
}

TEST_F(DiffPairs, SignedChangePerStep) {
  CliResult fail = Diff(*base_, *regressed_, "cause:host_sync>+5ms/step");
  EXPECT_EQ(fail.exit_code, 1) << fail.out;
  EXPECT_THAT(fail.out, HasSubstr("1.496 ms/step -> 6.746 ms/step: change "
                                  "+5.250 ms/step > +5.000 ms/step"));
  EXPECT_EQ(Diff(*base_, *mild_, "cause:host_sync>+5ms/step").exit_code, 0);
}

TEST_F(DiffPairs, SignedChangePerSecond) {
  // Bubble per second of wall span: 6/46 -> 27/67, i.e. 130 -> 403 ms/s.
  EXPECT_EQ(Diff(*base_, *regressed_, "bubble>+100ms/s").exit_code, 1);
  EXPECT_EQ(Diff(*base_, *regressed_, "bubble>+500ms/s").exit_code, 0);
}

TEST_F(DiffPairs, NegativeChange) {
  // The CPU is 195 us less far ahead when going from `ahead` to `base`.
  EXPECT_EQ(Diff(*ahead_, *base_, "lead_p50<-20us").exit_code, 1);
  EXPECT_EQ(Diff(*base_, *ahead_, "lead_p50<-20us").exit_code, 0);
}

TEST_F(DiffPairs, RelativeChange) {
  // host_sync 5.985 -> 26.985 ms: +351%.
  EXPECT_EQ(Diff(*base_, *regressed_, "cause:host_sync>+100%").exit_code, 1);
  EXPECT_EQ(Diff(*base_, *regressed_, "cause:host_sync>+400%").exit_code, 0);
  // kernel:gemm 40 -> 48 ms: +20%.
  CliResult k = Diff(*base_, *slower_, "kernel:gemm>+10%");
  EXPECT_EQ(k.exit_code, 1);
  EXPECT_THAT(k.out, HasSubstr("change +20.0% > +10.0%"));
  EXPECT_EQ(Diff(*base_, *slower_, "compute_rise>25%").exit_code, 0);
}

TEST_F(DiffPairs, AfterValue) {
  EXPECT_EQ(Diff(*base_, *regressed_, "utilization<0.7").exit_code, 1);
  EXPECT_EQ(Diff(*base_, *regressed_, "utilization<50%").exit_code, 0);
  EXPECT_EQ(Diff(*base_, *regressed_, "largest_bubble>=9ms").exit_code, 1);
  EXPECT_EQ(Diff(*base_, *regressed_, "largest_bubble>9ms").exit_code, 0);
}

TEST_F(DiffPairs, ExitCodeSummarizesAllConditions) {
  CliResult r = RunBubblewatch(absl::StrCat(
      "diff --fail-if 'utilization_drop>2%' --fail-if 'bubble_ratio>0.9' "
      "--fail-if 'cause:host_sync>+5ms/step' '",
      *base_, "' '", *regressed_, "'"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, HasSubstr("FAILED: 2 of 3 condition(s) hold"));
  EXPECT_THAT(r.out, HasSubstr("ok    bubble_ratio>0.9"));
  EXPECT_THAT(r.err, Not(HasSubstr("bubble_ratio>0.9")));
  CliResult none =
      RunBubblewatch(absl::StrCat("diff '", *base_, "' '", *regressed_, "'"));
  EXPECT_EQ(none.exit_code, 0) << none.err;
  EXPECT_THAT(none.out, Not(HasSubstr("Conditions")));
}

TEST_F(DiffPairs, TextReportShowsBothSidesAndPerStepFigures) {
  CliResult r =
      RunBubblewatch(absl::StrCat("diff '", *base_, "' '", *regressed_, "'"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("4 steps"));
  EXPECT_THAT(r.out, HasSubstr("bubble /step"));
  EXPECT_THAT(r.out, HasSubstr("host_sync"));
  EXPECT_THAT(r.out, HasSubstr("Largest bubbles"));
  EXPECT_THAT(r.out, HasSubstr("Top kernels"));
  EXPECT_THAT(r.out, HasSubstr("launch lead p50"));
  EXPECT_THAT(r.out, HasSubstr("sync_bound"));
}

TEST_F(DiffPairs, JsonForPipelines) {
  CliResult r = Diff(*base_, *regressed_, "utilization_drop>2%", "--json");
  EXPECT_EQ(r.exit_code, 1);
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(r.out);
  EXPECT_FALSE(bool(doc["passed"]));
  EXPECT_EQ(std::string_view(doc["normalized_per"]), "step");
  EXPECT_EQ(int64_t(doc["before"]["steps"]), 4);
  EXPECT_NEAR(double(doc["metrics"]["utilization"]["before"]), 40.0 / 46.0,
              1e-9);
  EXPECT_NEAR(double(doc["metrics"]["utilization"]["after"]), 40.0 / 67.0,
              1e-9);
  EXPECT_NEAR(double(doc["causes_us"]["host_sync"]["normalized"]["change"]),
              5250.0, 1e-6);
  simdjson::dom::array conditions = doc["conditions"];
  ASSERT_EQ(conditions.size(), 1u);
  EXPECT_TRUE(bool(conditions.at(0)["failed"]));
  EXPECT_NEAR(double(conditions.at(0)["observed"]), 40.0 / 46 - 40.0 / 67,
              1e-9);
  EXPECT_DOUBLE_EQ(double(conditions.at(0)["threshold"]), 0.02);
  EXPECT_EQ(std::string_view(doc["before"]["verdict"]), "sync_bound");
  simdjson::dom::array kernels = doc["top_kernels"];
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(std::string_view(kernels.at(0)["name"]), "gemm");
}

TEST_F(DiffPairs, PerStepWithoutProfilerStepsIsAUsageError) {
  CliResult r = Diff(*base_, *unannotated_, "cause:host_sync>+5ms/step");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("cannot be evaluated"));
  EXPECT_THAT(r.err, HasSubstr("no ProfilerStep annotations"));
  // Per second works on any pair.
  EXPECT_EQ(Diff(*base_, *unannotated_, "cause:host_sync>+5ms/s").exit_code, 0);
}

TEST_F(DiffPairs, BadConditionSyntaxIsAUsageErrorWithAClearMessage) {
  struct Case {
    const char* condition;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {"utilization=2%", "no comparison operator"},
           {"utilisation_drop>2%", "unknown metric 'utilisation'"},
           {"cause:host_sink>+1ms", "unknown cause 'host_sink'"},
           {"bubble>+5", "bubble is a time: give a unit"},
           {"utilization>5ms", "utilization is a ratio"},
           {"bubble>10%", "% on a time compares the relative change"},
           {"utilization_drop>+2%", "_drop and _rise take an unsigned value"},
           {"lead_p50>+1ms/step", "/step and /s apply to totals"},
           {"bubble>+1e3ms", "'1e3' is not a number"},
           {">2%", "no metric before the operator"},
           {"bubble>", "no value after the operator"},
       }) {
    SCOPED_TRACE(c.condition);
    // The inputs need not exist: conditions are checked first.
    CliResult r = RunBubblewatch(absl::StrCat("diff --fail-if '", c.condition,
                                              "' missing1.json missing2.json"));
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr(c.message));
    EXPECT_THAT(r.err, HasSubstr("Try 'bubblewatch diff --help'"));
  }
}

TEST_F(DiffPairs, SpacesAroundTheOperatorAreAllowed) {
  EXPECT_EQ(Diff(*base_, *regressed_, " utilization_drop >= 2% ").exit_code, 1);
}

TEST(DiffCommand, UsageAndInputErrors) {
  EXPECT_EQ(RunBubblewatch("diff").exit_code, 2);
  EXPECT_EQ(RunBubblewatch("diff only_one.json").exit_code, 2);
  EXPECT_EQ(RunBubblewatch("diff --top -1 a b").exit_code, 2);
  EXPECT_EQ(RunBubblewatch("diff --format xml a b").exit_code, 2);
  CliResult missing = RunBubblewatch(
      "diff timeline/seed_sample.json does_not_exist.json", kTestdata);
  EXPECT_EQ(missing.exit_code, 3);
  EXPECT_THAT(missing.err, HasSubstr("does_not_exist.json"));
  std::string garbage = WriteTempFile(
      absl::StrCat("diff_garbage_", getpid(), ".json"), "{not json");
  EXPECT_EQ(RunBubblewatch(
                absl::StrCat("diff '", garbage, "' timeline/seed_sample.json"),
                kTestdata)
                .exit_code,
            3);
  CliResult help = RunBubblewatch("diff --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("--fail-if"));
  EXPECT_THAT(RunBubblewatch("--help").out, HasSubstr("diff"));
}

// The real pair: the same 2-GPU job (Nsight Systems, ~300 ms of wall time
// each) before and after a change. Measured: the GPU did the same work per
// kernel (flash_fwd_kernel averages 4.005 ms before, 4.013 ms after) but
// fewer kernels fit in the window after (3,587 vs 4,010; flash_fwd_kernel 60
// vs 68 calls, NCCL SendRecv 62 vs 66): utilization fell from 89.4% to 81.7%,
// bubble time rose from 63.3 to 109.6 ms (host_compute 37.1 -> 64.2 ms,
// launch_overhead 11.5 -> 30.7 ms), the CPU ran less far ahead (launch lead
// p50 260.6 -> 87.8 us) and exposed NCCL time grew 25.4 -> 33.7 ms. Both
// are cpu_bound. So the "after" trace is a regression by these gates.
TEST(DiffCommand, RealMfuPairRegressesUtilization) {
  const std::string pair =
      "real/nsys/mfu_2gpu_before.sqlite real/nsys/mfu_2gpu_after.sqlite";
  CliResult fail = RunBubblewatch(
      absl::StrCat("diff --fail-if 'utilization_drop>2%' ", pair), kTestdata);
  EXPECT_EQ(fail.exit_code, 1) << fail.err;
  EXPECT_THAT(fail.out, HasSubstr("89.4% -> 81.7%: drop 7.7 pts > 2.0 pts"));
  EXPECT_THAT(fail.out, HasSubstr("per second of wall-clock span"));

  CliResult pass =
      RunBubblewatch(absl::StrCat("diff --fail-if 'utilization_drop>10%' "
                                  "--fail-if 'kernel:flash_fwd>+5%' ",
                                  pair),
                     kTestdata);
  EXPECT_EQ(pass.exit_code, 0) << pass.out;

  CliResult json =
      RunBubblewatch(absl::StrCat("diff --json --fail-if 'lead_p50<-100us' "
                                  "--fail-if 'cause:host_compute>+50ms/s' ",
                                  pair),
                     kTestdata);
  EXPECT_EQ(json.exit_code, 1);
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(json.out);
  EXPECT_EQ(std::string_view(doc["normalized_per"]), "s");
  EXPECT_EQ(std::string_view(doc["before"]["verdict"]), "cpu_bound");
  EXPECT_EQ(std::string_view(doc["after"]["verdict"]), "cpu_bound");
  EXPECT_EQ(int64_t(doc["before"]["kernels"]), 4010);
  EXPECT_EQ(int64_t(doc["after"]["kernels"]), 3587);
  EXPECT_NEAR(double(doc["metrics"]["utilization"]["change"]), -0.077, 0.001);
  EXPECT_NEAR(double(doc["metrics"]["bubble_us"]["before"]), 63322, 1);
  EXPECT_NEAR(double(doc["metrics"]["bubble_us"]["after"]), 109623, 1);
  EXPECT_LT(double(doc["metrics"]["lead_p50_us"]["change"]), -150);
  simdjson::dom::array conditions = doc["conditions"];
  ASSERT_EQ(conditions.size(), 2u);
  EXPECT_TRUE(bool(conditions.at(0)["failed"]));
  EXPECT_TRUE(bool(conditions.at(1)["failed"]));
  simdjson::dom::array kernels = doc["top_kernels"];
  ASSERT_GE(kernels.size(), 1u);
  EXPECT_EQ(std::string_view(kernels.at(0)["name"]), "flash_fwd_kernel");
}

// Collective metrics: only a trace that holds several ranks.
TEST(DiffCollectives, CommWaitOfTwoGpuExportsIsCompared) {
  const std::string real = std::string(BUBBLEWATCH_TESTDATA_DIR) + "/real/";
  CliResult rise = RunBubblewatch(absl::StrCat(
      "diff --json --fail-if 'comm_wait>+1ms' --fail-if "
      "'busy_useful_utilization<0.5' --fail-if 'straggler_wait>+1ms' '",
      real, "nsys/mfu_2gpu_before.sqlite' '", real,
      "nsys/mfu_2gpu_after.sqlite'"));
  EXPECT_EQ(rise.exit_code, 1) << rise.err;
  EXPECT_THAT(rise.out, HasSubstr("comm_wait"));
  CliResult same = RunBubblewatch(absl::StrCat(
      "diff --fail-if 'comm_wait>+1ms' '", real,
      "nsys/mfu_2gpu_before.sqlite' '", real, "nsys/mfu_2gpu_before.sqlite'"));
  EXPECT_EQ(same.exit_code, 0) << same.out;
}

TEST(DiffCollectives, OneRankCannotGiveWaits) {
  const std::string real = std::string(BUBBLEWATCH_TESTDATA_DIR) + "/real/";
  CliResult r = RunBubblewatch(
      absl::StrCat("diff --fail-if 'straggler_wait>1ms' '", real,
                   "hta/nccl_data.json.gz' '", real, "hta/nccl_data.json.gz'"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("holds one rank"));
}

}  // namespace
}  // namespace bubblewatch
