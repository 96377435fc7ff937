// The --fail-if grammar of `bubblewatch diff` (diff/diff_condition.h), in
// process: parsing, units, forms, errors, and evaluation on hand-made sides.
#include "diff/diff_condition.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bubblewatch {
namespace {

using ::testing::HasSubstr;

FailCondition Parse(absl::string_view text) {
  absl::StatusOr<FailCondition> c = ParseFailCondition(text);
  EXPECT_TRUE(c.ok()) << text << ": " << c.status();
  return c.ok() ? *c : FailCondition{};
}

TEST(FailCondition, AnUnsignedValueComparesAftersFigure) {
  FailCondition c = Parse("bubble_ratio>0.3");
  EXPECT_EQ(c.metric.name, "bubble_ratio");
  EXPECT_EQ(c.op, Comparison::kGreater);
  EXPECT_EQ(c.form, FailCondition::Form::kAfter);
  EXPECT_DOUBLE_EQ(c.threshold, 0.3);
  EXPECT_FALSE(c.relative);
}

TEST(FailCondition, ASignedValueComparesTheChange) {
  FailCondition c = Parse("lead_p50<-20us");
  EXPECT_EQ(c.form, FailCondition::Form::kChange);
  EXPECT_EQ(c.op, Comparison::kLess);
  EXPECT_DOUBLE_EQ(c.threshold, -20'000.0);
}

TEST(FailCondition, DropAndRiseSuffixesAndPercentagePoints) {
  FailCondition drop = Parse("utilization_drop>2%");
  EXPECT_EQ(drop.metric.name, "utilization");
  EXPECT_EQ(drop.form, FailCondition::Form::kDrop);
  EXPECT_DOUBLE_EQ(drop.threshold, 0.02);
  FailCondition rise = Parse("compute_rise>5%");
  EXPECT_EQ(rise.form, FailCondition::Form::kRise);
  EXPECT_TRUE(rise.relative);
  EXPECT_DOUBLE_EQ(rise.threshold, 0.05);
}

TEST(FailCondition, UnitsOperatorsAndNormalization) {
  EXPECT_DOUBLE_EQ(Parse("largest_bubble>=5ms").threshold, 5e6);
  EXPECT_EQ(Parse("largest_bubble>=5ms").op, Comparison::kGreaterOrEqual);
  EXPECT_EQ(Parse("utilization <= 0.5").op, Comparison::kLessOrEqual);
  FailCondition per_step = Parse("cause:host_sync>+5ms/step");
  EXPECT_EQ(per_step.metric.name, "cause");
  EXPECT_EQ(per_step.metric.argument, "host_sync");
  EXPECT_EQ(per_step.per, Normalization::kPerStep);
  EXPECT_EQ(Parse("bubble>+100ms/s").per, Normalization::kPerSecond);
  EXPECT_EQ(Parse("kernel:gemm>1s").metric.argument, "gemm");
  EXPECT_DOUBLE_EQ(Parse("comm_wait>250ns").threshold, 250.0);
  EXPECT_EQ(Parse("busy_useful_utilization<0.8").metric.kind,
            MetricKind::kRatio);
}

TEST(FailCondition, MistakesAreExplained) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c : {
           Case{"utilisation>0.5", "unknown metric 'utilisation'"},
           Case{"cause:sync>1ms", "unknown cause 'sync'"},
           Case{"kernel:>1ms", "kernel: needs a name substring"},
           Case{"bubble>5", ""},          // A time without a unit.
           Case{"bubble>5%", ""},         // Unsigned % on a time.
           Case{"bubble_ratio 0.3", ""},  // No operator.
           Case{"", ""},
       }) {
    absl::StatusOr<FailCondition> r = ParseFailCondition(c.text);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
        << "'" << c.text << "' parsed";
    if (!r.ok() && *c.says != '\0') {
      EXPECT_THAT(r.status().message(), HasSubstr(c.says)) << c.text;
    }
  }
}

DiffSide Side(int64_t span, int64_t compute, int64_t host_sync) {
  DiffSide s;
  s.path = "side";
  s.analysis.job.span_ns = span;
  s.analysis.job.compute_ns = compute;
  s.analysis.job.bubble_ns = span - compute;
  s.analysis.job.attribution[static_cast<int>(BubbleCause::kHostSync)] =
      host_sync;
  s.wall_span_ns = span;
  return s;
}

TEST(FailCondition, EvaluationComparesWhatTheFormSays) {
  const DiffSide before = Side(1'000'000, 900'000, 50'000);
  const DiffSide after = Side(1'000'000, 800'000, 150'000);
  absl::StatusOr<ConditionOutcome> drop =
      EvaluateFailCondition(Parse("utilization_drop>5%"), before, after);
  ASSERT_TRUE(drop.ok()) << drop.status();
  EXPECT_TRUE(drop->failed);
  EXPECT_NEAR(drop->observed, 0.1, 1e-12);
  absl::StatusOr<ConditionOutcome> small =
      EvaluateFailCondition(Parse("utilization_drop>20%"), before, after);
  ASSERT_TRUE(small.ok());
  EXPECT_FALSE(small->failed);
  absl::StatusOr<ConditionOutcome> relative =
      EvaluateFailCondition(Parse("cause:host_sync>+100%"), before, after);
  ASSERT_TRUE(relative.ok());
  EXPECT_TRUE(relative->failed);  // +200 %.
  // Collective metrics need several ranks in the trace.
  absl::StatusOr<ConditionOutcome> waits =
      EvaluateFailCondition(Parse("comm_wait>1ms"), before, after);
  EXPECT_EQ(waits.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(waits.status().message(), HasSubstr("holds one rank"));
}

}  // namespace
}  // namespace bubblewatch
