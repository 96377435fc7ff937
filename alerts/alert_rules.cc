#include "alerts/alert_rules.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "yaml-cpp/yaml.h"

namespace bubblewatch {
namespace {

constexpr absl::string_view kKindNames[] = {"utilization_below",
                                            "cause_share_above",
                                            "bubble_longer_than",
                                            "job_silent",
                                            "fleet",
                                            "straggler"};

// `text` with its control characters escaped (\n, \t, \xNN): messages quote
// keys and values from the file, and a multi-line YAML scalar must not break
// the one-line-per-problem promise.
std::string OneLine(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      absl::StrAppend(&out, "\\x", absl::Hex(u, absl::kZeroPad2));
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// Collects "SOURCE:LINE:COL: message" lines.
class Problems {
 public:
  explicit Problems(absl::string_view source) : source_(OneLine(source)) {}
  void Add(const YAML::Mark& mark, absl::string_view message) {
    lines_.push_back(absl::StrCat(source_, ":", mark.line + 1, ":",
                                  mark.column + 1, ": ", OneLine(message)));
  }
  void Add(const YAML::Node& node, absl::string_view message) {
    Add(node.Mark(), message);
  }
  void AddLine(int line, absl::string_view message) {
    lines_.push_back(absl::StrCat(source_, ":", line, ": ", OneLine(message)));
  }
  bool empty() const { return lines_.empty(); }
  std::string Joined() const { return absl::StrJoin(lines_, "\n"); }

 private:
  std::string source_;
  std::vector<std::string> lines_;
};

bool Scalar(const YAML::Node& node, std::string* out) {
  if (!node.IsScalar()) return false;
  *out = node.Scalar();
  return true;
}

// "30%" (0..100 %) or a fraction in [0, 1].
bool ParseShare(const YAML::Node& node, absl::string_view what, double* out,
                Problems& problems) {
  std::string text;
  if (!Scalar(node, &text)) {
    problems.Add(node, absl::StrCat(what, " must be a number or a percentage"));
    return false;
  }
  absl::string_view v = absl::StripAsciiWhitespace(text);
  const bool percent = absl::ConsumeSuffix(&v, "%");
  double d = 0;
  if (!absl::SimpleAtod(v, &d)) {
    problems.Add(node, absl::StrCat(what, " \"", text,
                                    "\" is not a number or a percentage"));
    return false;
  }
  if (percent) d /= 100.0;
  if (!(d >= 0.0 && d <= 1.0)) {
    problems.Add(node,
                 absl::StrCat(what, " ", text,
                              " is impossible: it must lie between 0 and 100% "
                              "(a bare number is a fraction: 0.3 = 30%)"));
    return false;
  }
  *out = d;
  return true;
}

bool ParsePositiveDuration(const YAML::Node& node, absl::string_view what,
                           absl::Duration* out, Problems& problems) {
  std::string text;
  absl::Duration d;
  if (!Scalar(node, &text) || !absl::ParseDuration(text, &d)) {
    problems.Add(node, absl::StrCat(what,
                                    " must be a duration like 500ms, "
                                    "30s, 5m or 1h"));
    return false;
  }
  if (d <= absl::ZeroDuration() || d == absl::InfiniteDuration()) {
    problems.Add(node, absl::StrCat(what, " ", text, " must be positive"));
    return false;
  }
  *out = d;
  return true;
}

bool ParseCount(const YAML::Node& node, absl::string_view what, int64_t min,
                int64_t* out, Problems& problems) {
  std::string text;
  int64_t n = 0;
  if (!Scalar(node, &text) || !absl::SimpleAtoi(text, &n)) {
    problems.Add(node, absl::StrCat(what, " must be a whole number"));
    return false;
  }
  if (n < min) {
    problems.Add(node,
                 absl::StrCat(what, " is ", n, "; it must be at least ", min));
    return false;
  }
  *out = n;
  return true;
}

bool ParseSelector(const YAML::Node& node, JobSelector* out,
                   Problems& problems) {
  if (!node.IsMap() || node.size() != 1) {
    problems.Add(node,
                 "jobs must be a map with exactly one of exact, prefix, regex "
                 "(e.g. jobs: {prefix: \"train-\"}); omit it for all jobs");
    return false;
  }
  const auto entry = *node.begin();
  const std::string mode = entry.first.Scalar();
  std::string pattern;
  if (!Scalar(entry.second, &pattern)) {
    problems.Add(entry.second,
                 absl::StrCat("jobs.", mode, " must be a string"));
    return false;
  }
  if (mode == "exact") {
    *out = JobSelector(JobSelector::Mode::kExact, pattern);
  } else if (mode == "prefix") {
    *out = JobSelector(JobSelector::Mode::kPrefix, pattern);
  } else if (mode == "regex") {
    try {
      std::regex check(pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      problems.Add(entry.second,
                   absl::StrCat("jobs.regex \"", pattern,
                                "\" does not compile: ", e.what()));
      return false;
    }
    *out = JobSelector(JobSelector::Mode::kRegex, pattern);
  } else {
    problems.Add(entry.first, absl::StrCat("unknown job selector \"", mode,
                                           "\" (known: exact, prefix, regex)"));
    return false;
  }
  return true;
}

bool ValidName(absl::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' &&
        c != '-' && c != '.' && c != ':') {
      return false;
    }
  }
  return true;
}

// Keys each kind accepts besides name, kind, severity, jobs, for, clear_for,
// repeat_interval, summary.
const absl::flat_hash_map<std::string, RuleKind>& KindsByName() {
  static const auto* kinds = new absl::flat_hash_map<std::string, RuleKind>{
      {"utilization_below", RuleKind::kUtilizationBelow},
      {"cause_share_above", RuleKind::kCauseShareAbove},
      {"bubble_longer_than", RuleKind::kBubbleLongerThan},
      {"job_silent", RuleKind::kJobSilent},
      {"fleet", RuleKind::kFleet},
      {"straggler", RuleKind::kStraggler},
  };
  return *kinds;
}

std::vector<std::string> KeysOf(RuleKind kind) {
  std::vector<std::string> keys = {"name", "kind",    "severity",
                                   "jobs", "summary", "repeat_interval"};
  switch (kind) {
    case RuleKind::kUtilizationBelow:
    case RuleKind::kStraggler:
      keys.insert(keys.end(), {"threshold", "for", "clear_for"});
      break;
    case RuleKind::kCauseShareAbove:
      keys.insert(keys.end(), {"cause", "threshold", "for", "clear_for"});
      break;
    case RuleKind::kBubbleLongerThan:
      keys.insert(keys.end(), {"duration", "for", "clear_for"});
      break;
    case RuleKind::kJobSilent:
      keys.insert(keys.end(), {"duration", "forget_after"});
      break;
    case RuleKind::kFleet:
      keys.insert(keys.end(), {"rule", "jobs_firing_more_than"});
      break;
  }
  return keys;
}

void ParseRule(const YAML::Node& node, absl::Duration default_repeat,
               AlertRuleSet& set, Problems& problems) {
  if (!node.IsMap()) {
    problems.Add(node, "a rule must be a map (name: ..., kind: ...)");
    return;
  }
  AlertRule rule;
  rule.line = node.Mark().line + 1;
  rule.repeat_interval = default_repeat;
  bool ok = true;
  std::string kind_name;
  if (!node["kind"] || !Scalar(node["kind"], &kind_name)) {
    problems.Add(node, absl::StrCat("rule without a kind (one of ",
                                    absl::StrJoin(kKindNames, ", "), ")"));
    return;
  }
  auto kind = KindsByName().find(kind_name);
  if (kind == KindsByName().end()) {
    problems.Add(node["kind"],
                 absl::StrCat("unknown kind \"", kind_name, "\" (known: ",
                              absl::StrJoin(kKindNames, ", "), ")"));
    return;
  }
  rule.kind = kind->second;
  const std::vector<std::string> allowed = KeysOf(rule.kind);
  for (const auto& entry : node) {
    const std::string key = entry.first.Scalar();
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      problems.Add(
          entry.first,
          absl::StrCat("unknown key \"", key, "\" for a ", kind_name,
                       " rule (allowed: ", absl::StrJoin(allowed, ", "), ")"));
      ok = false;
    }
  }
  if (!node["name"] || !Scalar(node["name"], &rule.name) ||
      !ValidName(rule.name)) {
    problems.Add(node["name"] ? node["name"].Mark() : node.Mark(),
                 "every rule needs a name of letters, digits, _ - . or :");
    ok = false;
  }
  if (const YAML::Node s = node["severity"]) {
    if (!Scalar(s, &rule.severity) ||
        (rule.severity != "critical" && rule.severity != "warning" &&
         rule.severity != "info")) {
      problems.Add(s, "severity must be critical, warning or info");
      ok = false;
    }
  }
  if (const YAML::Node j = node["jobs"]) {
    ok &= ParseSelector(j, &rule.jobs, problems);
  }
  if (const YAML::Node s = node["summary"]; s && !Scalar(s, &rule.summary)) {
    problems.Add(s, "summary must be a string");
    ok = false;
  }
  if (const YAML::Node r = node["repeat_interval"]) {
    ok &= ParsePositiveDuration(r, "repeat_interval", &rule.repeat_interval,
                                problems);
  }
  int64_t k = 1;
  if (const YAML::Node f = node["for"]) {
    ok &= ParseCount(f, "for (consecutive windows)", 1, &k, problems);
  }
  rule.for_windows = static_cast<int>(k);
  int64_t clear = k;
  if (const YAML::Node c = node["clear_for"]) {
    ok &= ParseCount(c, "clear_for (consecutive windows)", 1, &clear, problems);
  }
  rule.clear_windows = static_cast<int>(clear);

  auto required = [&](const char* key) -> YAML::Node {
    YAML::Node n = node[key];
    if (!n) {
      problems.Add(node,
                   absl::StrCat("a ", kind_name, " rule needs \"", key, "\""));
      ok = false;
    }
    return n;
  };
  switch (rule.kind) {
    case RuleKind::kUtilizationBelow:
    case RuleKind::kStraggler:
      if (YAML::Node t = required("threshold")) {
        ok &= ParseShare(t, "threshold", &rule.threshold, problems);
      }
      break;
    case RuleKind::kCauseShareAbove: {
      if (YAML::Node c = required("cause")) {
        std::string name;
        std::optional<BubbleCause> cause;
        if (Scalar(c, &name)) cause = ParseBubbleCause(name);
        if (!cause) {
          std::vector<std::string> known;
          for (BubbleCause b : kAllBubbleCauses) {
            known.emplace_back(BubbleCauseName(b));
          }
          problems.Add(c, absl::StrCat("unknown cause \"", name, "\" (known: ",
                                       absl::StrJoin(known, ", "), ")"));
          ok = false;
        } else {
          rule.cause = *cause;
        }
      }
      if (YAML::Node t = required("threshold")) {
        ok &= ParseShare(t, "threshold", &rule.threshold, problems);
      }
      break;
    }
    case RuleKind::kBubbleLongerThan:
    case RuleKind::kJobSilent:
      if (YAML::Node d = required("duration")) {
        ok &= ParsePositiveDuration(d, "duration", &rule.duration, problems);
      }
      if (const YAML::Node f = node["forget_after"];
          f && rule.kind == RuleKind::kJobSilent) {
        bool parsed = ParsePositiveDuration(f, "forget_after",
                                            &rule.forget_after, problems);
        // Forgetting before the silence alert could fire would never page.
        if (parsed && rule.forget_after <= rule.duration) {
          problems.Add(f, "forget_after must be longer than duration");
          parsed = false;
        }
        ok &= parsed;
      }
      break;
    case RuleKind::kFleet:
      if (YAML::Node r = required("rule"); r && !Scalar(r, &rule.fleet_rule)) {
        problems.Add(r, "rule must name a per-job rule of this file");
        ok = false;
      }
      if (YAML::Node n = required("jobs_firing_more_than")) {
        ok &= ParseCount(n, "jobs_firing_more_than", 1, &rule.fleet_max_jobs,
                         problems);
      }
      break;
  }
  if (ok) set.rules.push_back(std::move(rule));
}

}  // namespace

absl::string_view RuleKindName(RuleKind kind) {
  return kKindNames[static_cast<int>(kind)];
}

JobSelector::JobSelector(Mode mode, std::string pattern)
    : mode_(mode), pattern_(std::move(pattern)) {
  if (mode_ == Mode::kRegex) {
    regex_ =
        std::make_shared<const std::regex>(pattern_, std::regex::ECMAScript);
  }
}

bool JobSelector::Matches(absl::string_view job) const {
  switch (mode_) {
    case Mode::kAll:
      return true;
    case Mode::kExact:
      return job == pattern_;
    case Mode::kPrefix:
      return absl::StartsWith(job, pattern_);
    case Mode::kRegex:
      return std::regex_match(job.begin(), job.end(), *regex_);
  }
  return false;
}

std::string JobSelector::Describe() const {
  switch (mode_) {
    case Mode::kAll:
      return "all";
    case Mode::kExact:
      return absl::StrCat("exact:", pattern_);
    case Mode::kPrefix:
      return absl::StrCat("prefix:", pattern_);
    case Mode::kRegex:
      return absl::StrCat("regex:", pattern_);
  }
  return "";
}

absl::StatusOr<AlertRuleSet> ParseAlertRules(absl::string_view yaml,
                                             absl::string_view source) {
  AlertRuleSet set;
  set.source = std::string(source);
  Problems problems(source);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::ParserException& e) {
    problems.Add(e.mark, absl::StrCat("YAML syntax: ", e.msg));
    return absl::InvalidArgumentError(problems.Joined());
  }
  try {
    if (!root.IsMap()) {
      problems.Add(root.Mark(),
                   "the rules file must be a map with a \"rules\" list");
      return absl::InvalidArgumentError(problems.Joined());
    }
    absl::Duration default_repeat = absl::Hours(1);
    for (const auto& entry : root) {
      const std::string key = entry.first.Scalar();
      if (key != "rules" && key != "repeat_interval") {
        problems.Add(entry.first,
                     absl::StrCat("unknown top-level key \"", key,
                                  "\" (allowed: repeat_interval, rules)"));
      }
    }
    if (const YAML::Node r = root["repeat_interval"]) {
      ParsePositiveDuration(r, "repeat_interval", &default_repeat, problems);
    }
    const YAML::Node rules = root["rules"];
    if (!rules || !rules.IsSequence()) {
      problems.Add(rules ? rules.Mark() : root.Mark(),
                   "\"rules\" must be a list of rules");
    } else {
      for (const YAML::Node& r : rules) {
        ParseRule(r, default_repeat, set, problems);
      }
    }
    // Names are unique; fleet rules count a per-job rule of this file.
    absl::flat_hash_map<std::string, const AlertRule*> by_name;
    for (const AlertRule& r : set.rules) {
      if (!by_name.emplace(r.name, &r).second) {
        problems.AddLine(r.line,
                         absl::StrCat("duplicate rule name \"", r.name, "\""));
      }
    }
    for (const AlertRule& r : set.rules) {
      if (r.kind != RuleKind::kFleet) continue;
      auto it = by_name.find(r.fleet_rule);
      if (it == by_name.end() || it->second->kind == RuleKind::kFleet) {
        problems.AddLine(
            r.line, absl::StrCat("fleet rule \"", r.name, "\" counts rule \"",
                                 r.fleet_rule,
                                 "\", which is not a per-job rule of this "
                                 "file"));
      }
    }
  } catch (const YAML::Exception& e) {
    problems.Add(e.mark, e.msg);
  }
  if (!problems.empty()) return absl::InvalidArgumentError(problems.Joined());
  return set;
}

absl::StatusOr<AlertRuleSet> LoadAlertRulesFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": cannot read the rules file: ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParseAlertRules(text.str(), path);
}

}  // namespace bubblewatch
