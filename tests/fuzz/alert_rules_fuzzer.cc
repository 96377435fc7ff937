// libFuzzer target: the on-call rules file (alerts/alert_rules.h), the one
// input of `process --rules` that people edit by hand. Every input is either
// a rule set that keeps the parser's promises or a kInvalidArgument whose
// every line names the file ("rules.yaml:..."); nothing throws or crashes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "alerts/alert_rules.h"

namespace {

using bubblewatch::AlertRule;
using bubblewatch::AlertRuleSet;
using bubblewatch::RuleKind;

bool ShareKind(RuleKind kind) {
  return kind == RuleKind::kUtilizationBelow ||
         kind == RuleKind::kCauseShareAbove;
}

// The promises of ParseAlertRules for a rule set it accepted.
void CheckAccepted(const AlertRuleSet& set) {
  absl::flat_hash_set<std::string> names;
  for (const AlertRule& rule : set.rules) {
    if (rule.name.empty() || !names.insert(rule.name).second) __builtin_trap();
    if (rule.for_windows < 1 || rule.clear_windows < 1) __builtin_trap();
    if (ShareKind(rule.kind) &&
        !(rule.threshold >= 0.0 && rule.threshold <= 1.0)) {
      __builtin_trap();
    }
    if ((rule.kind == RuleKind::kBubbleLongerThan ||
         rule.kind == RuleKind::kJobSilent) &&
        rule.duration <= absl::ZeroDuration()) {
      __builtin_trap();
    }
    if (rule.repeat_interval <= absl::ZeroDuration()) __builtin_trap();
    if (rule.line < 1) __builtin_trap();
    (void)bubblewatch::RuleKindName(rule.kind);
    (void)rule.jobs.Describe();
    // A short job id only: a hostile regex may backtrack exponentially on a
    // long one, and the rules file is trusted operator input.
    (void)rule.jobs.Matches("train-7");
  }
  for (const AlertRule& rule : set.rules) {
    if (rule.kind != RuleKind::kFleet) continue;
    if (!names.contains(rule.fleet_rule)) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view yaml(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<AlertRuleSet> set =
      bubblewatch::ParseAlertRules(yaml, "rules.yaml");
  if (set.ok()) {
    CheckAccepted(*set);
    return 0;
  }
  if (!absl::IsInvalidArgument(set.status())) __builtin_trap();
  for (absl::string_view line : absl::StrSplit(set.status().message(), '\n')) {
    if (!absl::StartsWith(line, "rules.yaml:")) __builtin_trap();
  }
  return 0;
}
