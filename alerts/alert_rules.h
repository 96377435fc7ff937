// AlertRules: the on-call rules of `bubblewatch process --rules FILE`, read
// from a YAML file people edit by hand (ops/alerts/rules.example.yaml is the
// commented reference).
//
// Each rule has a kind, a job selector and a severity:
//   utilization_below   the window's utilization (compute / span, GPU-time
//                       summed over devices) < threshold, for K windows;
//   cause_share_above   one cause's bubble time / the window's GPU-time
//                       (span) > threshold, for K windows;
//   bubble_longer_than  the window's largest bubble > duration (K windows,
//                       default 1);
//   job_silent          the job's latest event time has not advanced for
//                       longer than duration (wall time);
//   fleet               more than `jobs` jobs firing rule `rule` at once:
//                       one grouped alert for the fleet;
//   straggler           multi-rank jobs: one rank caused waits (the wait
//                       it caused, docs/semantics.md#stragglers) > threshold
//                       of the window's GPU-time (span), for K consecutive
//                       windows (the same rank each time); names the root
//                       rank (docs/semantics.md#root-cause), its host (also
//                       the `host` label), its dominant cause and its cost.
// Validation collects every problem, one line each, as
// "FILE:LINE:COL: what is wrong", so a bad file is fixed in one pass.
#ifndef BUBBLEWATCH_ALERTS_ALERT_RULES_H_
#define BUBBLEWATCH_ALERTS_ALERT_RULES_H_

#include <cstdint>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "schemas/bubble_cause.h"

namespace bubblewatch {

enum class RuleKind : uint8_t {
  kUtilizationBelow = 0,
  kCauseShareAbove = 1,
  kBubbleLongerThan = 2,
  kJobSilent = 3,
  kFleet = 4,
  kStraggler = 5,
};

// "utilization_below", "cause_share_above", ...
absl::string_view RuleKindName(RuleKind kind);

// Which jobs a rule watches: all, or the job id matched exactly, by prefix
// or by a whole-string ECMAScript regex. (Windows carry no labels today, so
// selectors match the job id only.)
class JobSelector {
 public:
  enum class Mode : uint8_t { kAll, kExact, kPrefix, kRegex };
  JobSelector() = default;
  // REQUIRES for kRegex: `pattern` compiles (the parser checks it).
  JobSelector(Mode mode, std::string pattern);

  bool Matches(absl::string_view job) const;
  Mode mode() const { return mode_; }
  const std::string& pattern() const { return pattern_; }
  // "all", "exact:J", "prefix:P", "regex:R".
  std::string Describe() const;

 private:
  Mode mode_ = Mode::kAll;
  std::string pattern_;
  std::shared_ptr<const std::regex> regex_;  // Shared by copies of the rule.
};

struct AlertRule {
  std::string name;  // Unique in the file; [A-Za-z0-9_.:-]+.
  RuleKind kind = RuleKind::kUtilizationBelow;
  std::string severity = "warning";  // critical, warning or info.
  JobSelector jobs;
  // utilization_below / cause_share_above / straggler: a fraction in
  // [0, 1].
  double threshold = 0.0;
  BubbleCause cause = BubbleCause::kHostSync;  // cause_share_above only.
  // bubble_longer_than and job_silent.
  absl::Duration duration = absl::ZeroDuration();
  // job_silent only: a job silent for longer than this has finished: the
  // silence alert (and every other alert of the job) resolves and the job's
  // alert state is dropped. Infinite (the default): never forgotten.
  absl::Duration forget_after = absl::InfiniteDuration();
  // Consecutive windows the condition must hold to fire (`for`), and be
  // clear to resolve (`clear_for`, default: the same K). Both >= 1.
  int for_windows = 1;
  int clear_windows = 1;
  // While firing, the alert is sent again this often (`repeat_interval`,
  // default the file's top-level one, itself default 1h).
  absl::Duration repeat_interval = absl::Hours(1);
  // fleet: the rule counted and the most jobs that may fire it at once.
  std::string fleet_rule;
  int64_t fleet_max_jobs = 0;
  std::string summary;  // Optional free text for the alert's annotations.
  int line = 0;         // 1-based line of the rule in its file.
};

struct AlertRuleSet {
  std::string source;  // The file name (or what the caller passed).
  std::vector<AlertRule> rules;
};

// Parses `yaml`, naming `source` in errors.
// Errors: kInvalidArgument with one "SOURCE:LINE:COL: problem" line per
// problem (YAML syntax, unknown key, unknown kind/cause/severity, share
// outside [0, 100 %], K < 1, a duration <= 0, a bad regex, duplicate or
// dangling rule names).
absl::StatusOr<AlertRuleSet> ParseAlertRules(absl::string_view yaml,
                                             absl::string_view source);

// Reads and parses the file at `path`.
// Errors: kNotFound / kPermissionDenied style failures to read as
// kInvalidArgument "PATH: cannot read: why"; parse errors as above.
absl::StatusOr<AlertRuleSet> LoadAlertRulesFile(const std::string& path);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ALERTS_ALERT_RULES_H_
