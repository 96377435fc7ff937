#include "alerts/alert_rules.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bubblewatch {
namespace {

using ::testing::HasSubstr;

std::string ErrorOf(const std::string& yaml) {
  absl::StatusOr<AlertRuleSet> set = ParseAlertRules(yaml, "rules.yaml");
  EXPECT_FALSE(set.ok()) << "parsed: " << yaml;
  return set.ok() ? "" : std::string(set.status().message());
}

TEST(AlertRules, ParsesEveryKindWithItsFields) {
  absl::StatusOr<AlertRuleSet> set = ParseAlertRules(R"(
repeat_interval: 30m
rules:
  - name: low-util
    kind: utilization_below
    threshold: 50%
    for: 3
    clear_for: 2
    severity: warning
    jobs: {prefix: "train-"}
  - name: sync-stall
    kind: cause_share_above
    cause: host_sync
    threshold: 0.3
    severity: critical
    jobs: {regex: "train-[0-9]+"}
  - name: long-bubble
    kind: bubble_longer_than
    duration: 500ms
    jobs: {exact: train-7}
  - name: silent
    kind: job_silent
    duration: 5m
    repeat_interval: 2h
  - name: many-stalls
    kind: fleet
    rule: sync-stall
    jobs_firing_more_than: 10
)",
                                                     "r.yaml");
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_EQ(set->rules.size(), 5u);
  const AlertRule& low = set->rules[0];
  EXPECT_EQ(low.kind, RuleKind::kUtilizationBelow);
  EXPECT_DOUBLE_EQ(low.threshold, 0.5);
  EXPECT_EQ(low.for_windows, 3);
  EXPECT_EQ(low.clear_windows, 2);
  EXPECT_EQ(low.repeat_interval, absl::Minutes(30));
  EXPECT_EQ(low.line, 4);
  EXPECT_TRUE(low.jobs.Matches("train-1"));
  EXPECT_FALSE(low.jobs.Matches("eval-1"));
  const AlertRule& sync = set->rules[1];
  EXPECT_EQ(sync.cause, BubbleCause::kHostSync);
  EXPECT_DOUBLE_EQ(sync.threshold, 0.3);
  EXPECT_EQ(sync.clear_windows, 1);  // Defaults to `for`.
  EXPECT_TRUE(sync.jobs.Matches("train-42"));
  EXPECT_FALSE(sync.jobs.Matches("train-42x"));  // Whole-string match.
  EXPECT_EQ(set->rules[2].duration, absl::Milliseconds(500));
  EXPECT_TRUE(set->rules[2].jobs.Matches("train-7"));
  EXPECT_FALSE(set->rules[2].jobs.Matches("train-70"));
  EXPECT_EQ(set->rules[3].repeat_interval, absl::Hours(2));
  EXPECT_TRUE(set->rules[3].jobs.Matches("anything"));
  EXPECT_EQ(set->rules[4].fleet_rule, "sync-stall");
  EXPECT_EQ(set->rules[4].fleet_max_jobs, 10);
}

TEST(AlertRules, UnknownCauseNamesFileLineAndTheKnownCauses) {
  std::string e = ErrorOf(R"(rules:
  - name: x
    kind: cause_share_above
    cause: host_synk
    threshold: 30%
)");
  EXPECT_THAT(e, HasSubstr("rules.yaml:4:12: unknown cause \"host_synk\""));
  EXPECT_THAT(e, HasSubstr("host_sync, launch_overhead"));
}

TEST(AlertRules, ImpossibleThresholdsAreRejected) {
  EXPECT_THAT(ErrorOf(R"(rules:
  - {name: x, kind: cause_share_above, cause: memcpy, threshold: 130%}
)"),
              HasSubstr("rules.yaml:2:66: threshold 130% is impossible"));
  EXPECT_THAT(ErrorOf(R"(rules:
  - {name: x, kind: utilization_below, threshold: 2}
)"),
              HasSubstr("threshold 2 is impossible"));
  EXPECT_THAT(
      ErrorOf(R"(rules:
  - {name: x, kind: utilization_below, threshold: 10%, for: 0}
)"),
      HasSubstr("for (consecutive windows) is 0; it must be at least 1"));
  EXPECT_THAT(ErrorOf(R"(rules:
  - {name: x, kind: bubble_longer_than, duration: -1s}
)"),
              HasSubstr("duration -1s must be positive"));
  EXPECT_THAT(ErrorOf(R"(rules:
  - {name: x, kind: fleet, rule: y, jobs_firing_more_than: 0}
)"),
              HasSubstr("jobs_firing_more_than is 0"));
}

TEST(AlertRules, UnknownKeysKindsAndSelectorsAreNamed) {
  std::string e = ErrorOf(R"(rules:
  - name: x
    kind: utilization_below
    threshold: 10%
    treshold: 20%
  - name: y
    kind: utilisation
  - name: z
    kind: job_silent
    duration: 1m
    jobs: {glob: "a*"}
)");
  EXPECT_THAT(e, HasSubstr("rules.yaml:5:5: unknown key \"treshold\""));
  EXPECT_THAT(e, HasSubstr("rules.yaml:7:11: unknown kind \"utilisation\""));
  EXPECT_THAT(e, HasSubstr("rules.yaml:11:12: unknown job selector \"glob\""));
}

TEST(AlertRules, BadRegexIsRejectedWithItsLine) {
  EXPECT_THAT(ErrorOf(R"(rules:
  - name: x
    kind: job_silent
    duration: 1m
    jobs:
      regex: "train-[0-9"
)"),
              HasSubstr("rules.yaml:6:14: jobs.regex \"train-[0-9\" does not "
                        "compile"));
}

TEST(AlertRules, DuplicateNamesAndDanglingFleetRulesAreRejected) {
  std::string e = ErrorOf(R"(rules:
  - {name: x, kind: job_silent, duration: 1m}
  - {name: x, kind: job_silent, duration: 2m}
  - {name: f, kind: fleet, rule: nope, jobs_firing_more_than: 2}
)");
  EXPECT_THAT(e, HasSubstr("rules.yaml:3: duplicate rule name \"x\""));
  EXPECT_THAT(e, HasSubstr("rules.yaml:4: fleet rule \"f\" counts rule "
                           "\"nope\""));
}

TEST(AlertRules, YamlSyntaxErrorsAndMissingFieldsAreReported) {
  EXPECT_THAT(ErrorOf("rules: [\n  - {name: x\n"), HasSubstr("YAML syntax"));
  EXPECT_THAT(ErrorOf("rules:\n  - {name: x, kind: cause_share_above}\n"),
              HasSubstr("needs \"cause\""));
  EXPECT_THAT(ErrorOf("rulez: []\n"),
              HasSubstr("unknown top-level key \"rulez\""));
  EXPECT_THAT(ErrorOf("rules:\n  - {name: x, kind: job_silent, duration: 1m, "
                      "severity: urgent}\n"),
              HasSubstr("severity must be critical, warning or info"));
}

TEST(AlertRules, MissingFileIsOneClearError) {
  absl::StatusOr<AlertRuleSet> set =
      LoadAlertRulesFile("/nonexistent/rules.yaml");
  ASSERT_FALSE(set.ok());
  EXPECT_THAT(set.status().message(),
              HasSubstr("/nonexistent/rules.yaml: cannot read"));
}

TEST(AlertRules, ExampleFileInOpsIsValid) {
  absl::StatusOr<AlertRuleSet> set =
      LoadAlertRulesFile(std::string(BUBBLEWATCH_TESTDATA_DIR) +
                         "/../../ops/alerts/rules.example.yaml");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_GE(set->rules.size(), 5u);
}

}  // namespace
}  // namespace bubblewatch

namespace bubblewatch {
namespace {

TEST(AlertRules, NonScalarFieldsAreNamedNotDropped) {
  EXPECT_THAT(ErrorOf("rules:\n  - {name: x, kind: job_silent, duration: 1m, "
                      "summary: [a, b]}\n"),
              HasSubstr("summary must be a string"));
  EXPECT_THAT(ErrorOf("rules:\n  - {name: y, kind: job_silent, duration: 1m}\n"
                      "  - {name: x, kind: fleet, rule: {a: b}, "
                      "jobs_firing_more_than: 2}\n"),
              HasSubstr("rule must name a per-job rule"));
}

// Found by the alert_rules fuzzer: a multi-line key was quoted into its
// message as is, so one problem spanned several lines.
TEST(AlertRules, EveryProblemStaysOnOneLineWhateverTheFileQuotes) {
  const std::string e = ErrorOf(
      "rules:\n  - name: x\n    kind: job_silent\n    duration: 1m\n"
      "    \"a\\nb\\tc\\x01\": 1\n\"top\\nkey\": 2\n");
  EXPECT_THAT(e, HasSubstr("unknown key \"a\\nb\\tc\\x01\""));
  EXPECT_THAT(e, HasSubstr("unknown top-level key \"top\\nkey\""));
  for (absl::string_view line : absl::StrSplit(e, '\n')) {
    EXPECT_TRUE(absl::StartsWith(line, "rules.yaml:")) << line;
  }
}

TEST(AlertRules, ForgetAfterBelongsToSilenceRulesAndOutlastsDuration) {
  absl::StatusOr<AlertRuleSet> ok = ParseAlertRules(
      "rules:\n  - {name: x, kind: job_silent, duration: 5m, "
      "forget_after: 24h}\n",
      "r.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->rules[0].forget_after, absl::Hours(24));
  absl::StatusOr<AlertRuleSet> never = ParseAlertRules(
      "rules:\n  - {name: x, kind: job_silent, duration: 5m}\n", "r.yaml");
  ASSERT_TRUE(never.ok());
  EXPECT_EQ(never->rules[0].forget_after, absl::InfiniteDuration());
  EXPECT_THAT(ErrorOf("rules:\n  - {name: x, kind: job_silent, duration: 5m, "
                      "forget_after: 5m}\n"),
              HasSubstr("forget_after must be longer than duration"));
  EXPECT_THAT(ErrorOf("rules:\n  - {name: x, kind: job_silent, duration: 5m, "
                      "forget_after: soon}\n"),
              HasSubstr("forget_after"));
  EXPECT_THAT(ErrorOf("rules:\n  - {name: x, kind: bubble_longer_than, "
                      "duration: 5s, forget_after: 1h}\n"),
              HasSubstr("unknown key \"forget_after\""));
}

}  // namespace
}  // namespace bubblewatch
