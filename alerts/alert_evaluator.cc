#include "alerts/alert_evaluator.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "flatbuffers/flatbuffers.h"
#include "schemas/state_generated.h"
#include "schemas/state_record.h"

namespace bubblewatch {
namespace {

// The version tag of the text alert state written before schemas/state.fbs.
constexpr absl::string_view kLegacyStateVersion = "v1";

// The window's largest bubble: the longest of its top bubbles or, without
// them, the job's largest gap and its culprit.
std::optional<BubbleReport> LargestBubble(const WindowAnalysis& w) {
  const BubbleReport* best = nullptr;
  for (const BubbleReport& b : w.top_bubbles) {
    if (best == nullptr || b.duration_ns() > best->duration_ns()) best = &b;
  }
  if (best != nullptr) return *best;
  if (w.job.largest_bubble_ns <= 0) return std::nullopt;
  BubbleReport r;
  r.start_ns = w.job.largest_bubble_start_ns;
  r.end_ns = r.start_ns + w.job.largest_bubble_ns;
  r.before = w.job.culprit_before_bubble;
  r.cause =
      DominantCause(w.job.attribution).value_or(BubbleCause::kUnattributed);
  return r;
}

// The window's top straggler (stragglers come by wait caused, descending),
// or null.
const StragglerWindow* TopStraggler(const WindowSummary& window) {
  if (!window.collectives || window.collectives->stragglers.empty()) {
    return nullptr;
  }
  return &window.collectives->stragglers.front();
}

}  // namespace

std::string JobAlertStateKey(absl::string_view job) {
  return absl::StrCat("j/", job);
}
std::string FleetAlertStateKey(absl::string_view rule) {
  return absl::StrCat("f/", rule);
}

AlertEvaluator::AlertEvaluator(AlertRuleSet rules,
                               AlertEvaluatorOptions options)
    : rules_(std::move(rules)), options_(std::move(options)) {}

const AlertRule* AlertEvaluator::FindRule(absl::string_view name) const {
  for (const AlertRule& r : rules_.rules) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

void AlertEvaluator::Fill(const AlertRule& rule, absl::string_view job,
                          AlertEvent& e) const {
  e.rule = rule.name;
  e.kind = rule.kind;
  e.severity = rule.severity;
  e.job = std::string(job);
  e.summary = rule.summary;
  if (rule.kind == RuleKind::kCauseShareAbove) {
    e.cause = std::string(BubbleCauseName(rule.cause));
  }
  if (!options_.dashboard_url.empty()) {
    e.dashboard_url = job.empty()
                          ? absl::StrCat(options_.dashboard_url, "/")
                          : absl::StrCat(options_.dashboard_url, "/?job=", job);
  }
}

void AlertEvaluator::Emit(RuleState& s, AlertStatus status, absl::Time now,
                          std::vector<AlertEvent>& out) {
  s.last.status = status;
  s.last.sent_at = now;
  if (status == AlertStatus::kFiring) {
    s.last.starts_at = now;
    s.last.ends_at = absl::InfiniteFuture();
    if (s.last.cause.empty() && s.last.dominant_cause) {
      s.last.cause = std::string(BubbleCauseName(*s.last.dominant_cause));
    }
  }
  if (status == AlertStatus::kResolved) s.last.ends_at = now;
  s.last_sent = now;
  if (s.last.summary.empty()) {
    s.last.summary = absl::StrCat(s.last.rule, " of ",
                                  s.last.job.empty() ? "the fleet" : s.last.job,
                                  ": ", AlertMeasureText(s.last));
  }
  s.undelivered = s.last;
  out.push_back(s.last);
}

std::vector<AlertEvent> AlertEvaluator::OnWindow(const WindowSummary& window,
                                                 absl::Time now) {
  std::vector<AlertEvent> out;
  JobAlerts& job = jobs_[window.job];
  job.forgotten = false;
  const WindowAnalysis& w = window.window;
  if (w.start_ns <= job.last_window_start_ns) return out;  // A replay.
  job.last_window_start_ns = w.start_ns;
  dirty_.insert(JobAlertStateKey(window.job));
  // An ended job's alerts are resolved; its last windows do not fire again.
  if (job.ended) return out;
  const UtilizationStats& s = w.job;
  for (const AlertRule& rule : rules_.rules) {
    if (rule.kind == RuleKind::kJobSilent || rule.kind == RuleKind::kFleet ||
        !rule.jobs.Matches(window.job)) {
      continue;
    }
    bool holds = false;
    double value = 0;
    std::string measure;
    switch (rule.kind) {
      case RuleKind::kUtilizationBelow:
        if (s.span_ns == 0) continue;
        value = s.utilization();
        holds = value < rule.threshold;
        measure = "utilization";
        break;
      case RuleKind::kCauseShareAbove:
        if (s.span_ns == 0) continue;
        value =
            static_cast<double>(s.attribution[static_cast<int>(rule.cause)]) /
            static_cast<double>(s.span_ns);
        holds = value > rule.threshold;
        measure = absl::StrCat(BubbleCauseName(rule.cause), "_share");
        break;
      case RuleKind::kBubbleLongerThan:
        value = static_cast<double>(s.largest_bubble_ns) / 1e9;
        holds = s.largest_bubble_ns > absl::ToInt64Nanoseconds(rule.duration);
        measure = "largest_bubble_s";
        break;
      case RuleKind::kStraggler: {
        if (s.span_ns == 0) continue;
        // A window without a collective analysis says nothing of a job that
        // never had one (single-rank jobs keep no state for the rule); for
        // one that had, it is a window without a straggler.
        if (!window.collectives && !job.rules.contains(rule.name)) continue;
        const StragglerWindow* top = TopStraggler(window);
        value = top == nullptr ? 0
                               : static_cast<double>(top->wait_caused_ns) /
                                     static_cast<double>(s.span_ns);
        holds = value > rule.threshold;
        measure = "straggler_wait_share";
        // `for` counts windows of one rank: another rank over the threshold
        // starts the count again (once firing, any rank keeps it firing).
        if (RuleState& st = job.rules[rule.name];
            holds && !st.firing && st.hold > 0 &&
            st.last.straggler_rank != top->rank) {
          st.hold = 0;
        }
        break;
      }
      default:
        continue;
    }
    RuleState& st = job.rules[rule.name];
    if (holds) {
      ++st.hold;
      st.clear = 0;
    } else {
      ++st.clear;
      st.hold = 0;
    }
    // The details always follow the latest window that held (or, once
    // resolving, the one that cleared it).
    if (holds || st.firing) {
      const absl::Time starts_at = st.last.starts_at;
      std::string cause = std::move(st.last.cause);
      std::string host = std::move(st.last.host);
      st.last = AlertEvent{};
      Fill(rule, window.job, st.last);
      st.last.starts_at = starts_at;
      if (st.firing) {
        st.last.cause = std::move(cause);
        st.last.host = std::move(host);
      }
      st.last.measure = measure;
      st.last.value = value;
      st.last.threshold = rule.kind == RuleKind::kBubbleLongerThan
                              ? absl::ToDoubleSeconds(rule.duration)
                              : rule.threshold;
      st.last.window_start_ns = w.start_ns;
      st.last.window_end_ns = w.end_ns;
      st.last.utilization = s.utilization();
      st.last.dominant_cause = DominantCause(s.attribution);
      if (st.last.dominant_cause && s.bubble_ns > 0) {
        st.last.dominant_share =
            static_cast<double>(
                s.attribution[static_cast<int>(*st.last.dominant_cause)]) /
            static_cast<double>(s.bubble_ns);
      }
      st.last.largest_bubble = LargestBubble(w);
      if (rule.kind == RuleKind::kStraggler) {
        if (const StragglerWindow* top = TopStraggler(window)) {
          const WindowCollectives& c = *window.collectives;
          st.last.straggler_rank = top->rank;
          st.last.straggler_cause = StragglerCauseName(*top);
          st.last.straggler_host = top->host;
          if (st.last.straggler_host.empty()) {
            for (const RankWindow& r : c.ranks) {
              if (r.rank == top->rank) st.last.straggler_host = r.host.str();
            }
          }
          if (top->saved_ns >= 0) {
            st.last.straggler_cost_ns = top->saved_ns;
          } else if (c.job_ns >= 0) {
            st.last.straggler_cost_ns =
                std::max<int64_t>(0, c.job_ns - c.job_ns_without_stragglers);
          }
          st.last.straggler_of_ns = w.end_ns - w.start_ns;
          // The alert's cause and host (labels, fixed while it fires): what
          // made the straggler late, not the window's dominant bubble
          // cause, and where it ran.
          if (!st.firing) {
            st.last.cause = st.last.straggler_cause;
            st.last.host = st.last.straggler_host;
          }
        }
      }
    }
    if (!st.firing && st.hold >= rule.for_windows) {
      st.firing = true;
      Emit(st, AlertStatus::kFiring, now, out);
    } else if (st.firing && st.clear >= rule.clear_windows) {
      st.firing = false;
      Emit(st, AlertStatus::kResolved, now, out);
      st.hold = 0;
    }
  }
  EvaluateFleet(now, out);
  Repeats(now, out);
  return out;
}

std::vector<AlertEvent> AlertEvaluator::OnJobActivity(absl::string_view job_id,
                                                      absl::Time now) {
  std::vector<AlertEvent> out;
  JobAlerts& job = jobs_[job_id];
  job.last_activity = now;
  job.forgotten = false;
  // Only silence rules need the activity time to survive a restart; other
  // jobs' state is not rewritten on every commit for it.
  for (const AlertRule& rule : rules_.rules) {
    if (rule.kind == RuleKind::kJobSilent && rule.jobs.Matches(job_id)) {
      dirty_.insert(JobAlertStateKey(job_id));
      break;
    }
  }
  for (auto& [name, st] : job.rules) {
    const AlertRule* rule = FindRule(name);
    if (rule == nullptr || rule->kind != RuleKind::kJobSilent || !st.firing) {
      continue;
    }
    st.firing = false;
    st.last.value = 0;
    Emit(st, AlertStatus::kResolved, now, out);
  }
  EvaluateFleet(now, out);
  return out;
}

std::vector<AlertEvent> AlertEvaluator::OnJobLifecycle(
    absl::string_view job_id, const JobLifecycle& lifecycle, absl::Time now) {
  std::vector<AlertEvent> out;
  JobAlerts& job = jobs_[job_id];
  if (job.lifecycle != lifecycle) {
    job.lifecycle = lifecycle;
    dirty_.insert(JobAlertStateKey(job_id));
  }
  if (!lifecycle.ended && job.ended) {
    job.ended = false;  // A new run: its windows count again.
    dirty_.insert(JobAlertStateKey(job_id));
  }
  CheckEnded(job_id, job, now, out);
  EvaluateFleet(now, out);
  return out;
}

void AlertEvaluator::CheckEnded(absl::string_view job_id, JobAlerts& job,
                                absl::Time now, std::vector<AlertEvent>& out) {
  if (job.ended || !job.lifecycle.ended) return;
  const absl::Duration silence = job.last_activity == absl::InfinitePast()
                                     ? absl::InfiniteDuration()
                                     : now - job.last_activity;
  if (PhaseAt(job.lifecycle, silence) != JobPhase::kEnded) return;
  job.ended = true;
  dirty_.insert(JobAlertStateKey(job_id));
  for (auto& [name, st] : job.rules) {
    if (!st.firing) continue;
    st.firing = false;
    st.hold = 0;
    st.clear = 0;
    Emit(st, AlertStatus::kResolved, now, out);
  }
}

std::vector<AlertEvent> AlertEvaluator::OnTick(absl::Time now) {
  std::vector<AlertEvent> out;
  for (auto& [job_id, job] : jobs_) CheckEnded(job_id, job, now, out);
  // Finished jobs first: a job past forget_after does not fire silence.
  std::vector<std::string> gone;
  for (auto& [job_id, job] : jobs_) {
    if (job.forgotten || job.last_activity == absl::InfinitePast()) continue;
    for (const AlertRule& rule : rules_.rules) {
      if (rule.kind == RuleKind::kJobSilent &&
          rule.forget_after != absl::InfiniteDuration() &&
          now - job.last_activity > rule.forget_after &&
          rule.jobs.Matches(job_id)) {
        if (Forget(job_id, job, now, out)) gone.push_back(job_id);
        break;
      }
    }
  }
  for (const std::string& job_id : gone) jobs_.erase(job_id);
  for (const AlertRule& rule : rules_.rules) {
    if (rule.kind != RuleKind::kJobSilent) continue;
    for (auto& [job_id, job] : jobs_) {
      if (job.forgotten || job.last_activity == absl::InfinitePast() ||
          !rule.jobs.Matches(job_id)) {
        continue;
      }
      const absl::Duration silent = now - job.last_activity;
      // Only an active job is silent: an ended one said it was done, a
      // paused one is between the snapshots of its duty cycle, a waiting
      // one is a multi-rank job whose other ranks' files are expected
      // (--rank-grace ends it).
      if (job.ended || PhaseAt(job.lifecycle, silent) != JobPhase::kActive) {
        continue;
      }
      RuleState& st = job.rules[rule.name];
      if (st.firing || silent <= rule.duration) continue;
      st.last = AlertEvent{};
      Fill(rule, job_id, st.last);
      st.last.measure = "silent_s";
      st.last.value = absl::ToDoubleSeconds(silent);
      st.last.threshold = absl::ToDoubleSeconds(rule.duration);
      st.firing = true;
      dirty_.insert(JobAlertStateKey(job_id));
      Emit(st, AlertStatus::kFiring, now, out);
    }
  }
  EvaluateFleet(now, out);
  Repeats(now, out);
  return out;
}

bool AlertEvaluator::Forget(absl::string_view job_id, JobAlerts& job,
                            absl::Time now, std::vector<AlertEvent>& out) {
  job.forgotten = true;
  dirty_.insert(JobAlertStateKey(job_id));
  for (auto it = job.rules.begin(); it != job.rules.end();) {
    RuleState& st = it->second;
    if (st.firing) {
      st.firing = false;
      if (st.last.kind == RuleKind::kJobSilent) {
        st.last.value = absl::ToDoubleSeconds(now - job.last_activity);
      }
      Emit(st, AlertStatus::kResolved, now, out);
    }
    if (st.undelivered.has_value()) {
      ++it;
    } else {
      job.rules.erase(it++);
    }
  }
  return job.rules.empty();
}

void AlertEvaluator::MarkDelivered(const AlertEvent& e) {
  RuleState* st = nullptr;
  JobAlerts* job = nullptr;
  if (e.job.empty()) {
    auto it = fleet_.find(e.rule);
    if (it != fleet_.end()) st = &it->second;
  } else if (auto j = jobs_.find(e.job); j != jobs_.end()) {
    job = &j->second;
    auto it = job->rules.find(e.rule);
    if (it != job->rules.end()) st = &it->second;
  }
  if (st == nullptr || !st->undelivered.has_value() ||
      st->undelivered->sent_at != e.sent_at ||
      st->undelivered->status != e.status) {
    return;
  }
  st->undelivered.reset();
  const AlertRule* rule = FindRule(e.rule);
  if (job == nullptr) {
    dirty_.insert(FleetAlertStateKey(e.rule));
    // The resolution of a removed rule was all that was kept of it.
    if (rule == nullptr || rule->kind != RuleKind::kFleet) fleet_.erase(e.rule);
    return;
  }
  dirty_.insert(JobAlertStateKey(e.job));
  if (rule == nullptr || rule->kind == RuleKind::kFleet ||
      !rule->jobs.Matches(e.job)) {
    job->rules.erase(e.rule);
  }
  if (!job->forgotten) return;
  // A finished job is dropped once its last resolutions are delivered.
  for (auto it = job->rules.begin(); it != job->rules.end();) {
    if (it->second.undelivered.has_value()) {
      ++it;
    } else {
      job->rules.erase(it++);
    }
  }
  if (job->rules.empty()) jobs_.erase(e.job);
}

std::vector<AlertEvent> AlertEvaluator::ToDeliver() const {
  std::vector<AlertEvent> out = Active();
  auto add = [&out](const RuleState& st) {
    if (!st.firing && st.undelivered.has_value() &&
        st.undelivered->status == AlertStatus::kResolved) {
      out.push_back(*st.undelivered);
    }
  };
  for (const auto& [job_id, job] : jobs_) {
    for (const auto& [name, st] : job.rules) add(st);
  }
  for (const auto& [name, st] : fleet_) add(st);
  std::sort(out.begin(), out.end(),
            [](const AlertEvent& a, const AlertEvent& b) {
              return a.key() < b.key();
            });
  return out;
}

void AlertEvaluator::EvaluateFleet(absl::Time now,
                                   std::vector<AlertEvent>& out) {
  EvaluateFleetOver(
      [this](const AlertRule& rule) {
        std::vector<std::string> firing;
        for (const auto& [job_id, job] : jobs_) {
          auto it = job.rules.find(rule.fleet_rule);
          if (it != job.rules.end() && it->second.firing &&
              rule.jobs.Matches(job_id)) {
            firing.push_back(job_id);
          }
        }
        return firing;
      },
      now, out);
}

std::vector<AlertEvent> AlertEvaluator::OnFleetTick(
    const std::vector<AlertEvent>& firing, absl::Time now) {
  // Rule name -> the jobs firing it, each once.
  absl::flat_hash_map<std::string, absl::flat_hash_set<std::string>> by_rule;
  for (const AlertEvent& e : firing) {
    if (e.job.empty() || e.status == AlertStatus::kResolved) continue;
    by_rule[e.rule].insert(e.job);
  }
  std::vector<AlertEvent> out;
  EvaluateFleetOver(
      [&by_rule](const AlertRule& rule) {
        std::vector<std::string> jobs;
        if (auto it = by_rule.find(rule.fleet_rule); it != by_rule.end()) {
          for (const std::string& job : it->second) {
            if (rule.jobs.Matches(job)) jobs.push_back(job);
          }
        }
        return jobs;
      },
      now, out);
  // Repeats of the fleet rules only: job rules are the processors'.
  FleetRepeats(now, out);
  return out;
}

void AlertEvaluator::EvaluateFleetOver(
    const std::function<std::vector<std::string>(const AlertRule&)>&
        jobs_firing,
    absl::Time now, std::vector<AlertEvent>& out) {
  for (const AlertRule& rule : rules_.rules) {
    if (rule.kind != RuleKind::kFleet) continue;
    std::vector<std::string> firing = jobs_firing(rule);
    std::sort(firing.begin(), firing.end());
    RuleState& st = fleet_[rule.name];
    const bool holds =
        static_cast<int64_t>(firing.size()) > rule.fleet_max_jobs;
    if (!holds && !st.firing) continue;
    if (st.firing && st.last.jobs == firing) continue;
    const absl::Time starts_at = st.last.starts_at;
    st.last = AlertEvent{};
    Fill(rule, "", st.last);
    st.last.starts_at = starts_at;
    st.last.jobs = firing;
    st.last.measure = "jobs_firing";
    st.last.value = static_cast<double>(firing.size());
    st.last.threshold = static_cast<double>(rule.fleet_max_jobs);
    dirty_.insert(FleetAlertStateKey(rule.name));
    if (holds && !st.firing) {
      st.firing = true;
      Emit(st, AlertStatus::kFiring, now, out);
    } else if (!holds && st.firing) {
      st.firing = false;
      Emit(st, AlertStatus::kResolved, now, out);
    } else {
      st.last.status = AlertStatus::kRepeat;  // Details changed; sent later.
    }
  }
}

void AlertEvaluator::Repeats(absl::Time now, std::vector<AlertEvent>& out) {
  for (auto& [job_id, job] : jobs_) {
    for (auto& [name, st] : job.rules) {
      const AlertRule* rule = FindRule(name);
      if (rule == nullptr || !st.firing ||
          now - st.last_sent < rule->repeat_interval) {
        continue;
      }
      dirty_.insert(JobAlertStateKey(job_id));
      Emit(st, AlertStatus::kRepeat, now, out);
    }
  }
  FleetRepeats(now, out);
}

void AlertEvaluator::FleetRepeats(absl::Time now,
                                  std::vector<AlertEvent>& out) {
  for (auto& [name, st] : fleet_) {
    const AlertRule* rule = FindRule(name);
    if (rule == nullptr || !st.firing ||
        now - st.last_sent < rule->repeat_interval) {
      continue;
    }
    dirty_.insert(FleetAlertStateKey(name));
    Emit(st, AlertStatus::kRepeat, now, out);
  }
}

std::vector<AlertEvent> AlertEvaluator::SetRules(AlertRuleSet rules,
                                                 absl::Time now) {
  rules_ = std::move(rules);
  std::vector<AlertEvent> out;
  for (auto& [job_id, job] : jobs_) {
    for (auto it = job.rules.begin(); it != job.rules.end();) {
      const AlertRule* rule = FindRule(it->first);
      if (rule != nullptr && rule->jobs.Matches(job_id) &&
          rule->kind != RuleKind::kFleet) {
        ++it;
        continue;
      }
      // The rule no longer applies: its alert resolves; the state stays
      // (with nothing but that resolution) until the resolution is delivered.
      RuleState& st = it->second;
      if (st.firing) {
        st.firing = false;
        Emit(st, AlertStatus::kResolved, now, out);
        dirty_.insert(JobAlertStateKey(job_id));
      }
      if (st.undelivered.has_value()) {
        ++it;
      } else {
        job.rules.erase(it++);
        dirty_.insert(JobAlertStateKey(job_id));
      }
    }
  }
  for (auto it = fleet_.begin(); it != fleet_.end();) {
    const AlertRule* rule = FindRule(it->first);
    if (rule != nullptr && rule->kind == RuleKind::kFleet) {
      ++it;
      continue;
    }
    RuleState& st = it->second;
    if (st.firing) {
      st.firing = false;
      Emit(st, AlertStatus::kResolved, now, out);
      dirty_.insert(FleetAlertStateKey(it->first));
    }
    if (st.undelivered.has_value()) {
      ++it;
    } else {
      dirty_.insert(FleetAlertStateKey(it->first));
      fleet_.erase(it++);
    }
  }
  EvaluateFleet(now, out);
  return out;
}

std::vector<AlertEvent> AlertEvaluator::Active() const {
  std::vector<AlertEvent> out;
  for (const auto& [job_id, job] : jobs_) {
    for (const auto& [name, st] : job.rules) {
      if (st.firing) out.push_back(st.last);
    }
  }
  for (const auto& [name, st] : fleet_) {
    if (st.firing) out.push_back(st.last);
  }
  std::sort(out.begin(), out.end(),
            [](const AlertEvent& a, const AlertEvent& b) {
              return a.key() < b.key();
            });
  return out;
}

// State blobs are StateRecords with an AlertStateRecord body
// (schemas/state.fbs, docs/state.md). Before that schema they were text (still
// read, DecodeLegacyAlertState): a header line "v1 TAB last_activity_ns TAB
// last_window_start [TAB forgotten]", then per rule "name TAB firing TAB hold
// TAB clear TAB last_sent_ns TAB details JSON [TAB undelivered event JSON or
// -]". The bracketed fields came later: states without them read as not
// forgotten, all delivered.
namespace {
int64_t TimeToNs(absl::Time t) {
  return t == absl::InfinitePast() ? INT64_MIN : absl::ToUnixNanos(t);
}
absl::Time NsToTime(int64_t ns) {
  return ns == INT64_MIN ? absl::InfinitePast() : absl::FromUnixNanos(ns);
}
}  // namespace

std::string AlertEvaluator::SerializeJob(const JobAlerts& j) const {
  // Rules in name order, so that equal states give equal bytes.
  std::vector<const std::pair<const std::string, RuleState>*> rules;
  rules.reserve(j.rules.size());
  for (const auto& entry : j.rules) rules.push_back(&entry);
  std::sort(rules.begin(), rules.end(),
            [](const auto* a, const auto* b) { return a->first < b->first; });
  flatbuffers::FlatBufferBuilder builder(256 + 1024 * rules.size());
  std::vector<flatbuffers::Offset<fb::AlertRuleStateRecord>> records;
  records.reserve(rules.size());
  for (const auto* entry : rules) {
    const RuleState& st = entry->second;
    auto rule = builder.CreateString(entry->first);
    auto last = st.last.rule.empty()
                    ? flatbuffers::Offset<flatbuffers::String>()
                    : builder.CreateString(AlertEventToJson(st.last));
    auto undelivered =
        st.undelivered ? builder.CreateString(AlertEventToJson(*st.undelivered))
                       : flatbuffers::Offset<flatbuffers::String>();
    records.push_back(fb::CreateAlertRuleStateRecord(
        builder, rule, st.firing, st.hold, st.clear, TimeToNs(st.last_sent),
        last, undelivered));
  }
  auto rules_vec = builder.CreateVector(records);
  // The lifecycle fields only when set: a state without them keeps the
  // bytes it had before they existed.
  flatbuffers::Offset<flatbuffers::Vector<int64_t>> gaps;
  if (!j.lifecycle.gaps_ns.empty()) {
    gaps = builder.CreateVector(j.lifecycle.gaps_ns);
  }
  fb::AlertStateRecordBuilder record(builder);
  // In the order CreateAlertStateRecord adds them (the bytes as before).
  record.add_last_window_start_ns(j.last_window_start_ns);
  record.add_last_activity_wall_ns(TimeToNs(j.last_activity));
  record.add_rules(rules_vec);
  if (!gaps.IsNull()) record.add_lifecycle_gaps_ns(gaps);
  record.add_forgotten(j.forgotten);
  if (j.lifecycle.ended) record.add_lifecycle_ended(true);
  if (j.lifecycle.expired) record.add_lifecycle_expired(true);
  if (j.ended) record.add_ended(true);
  if (j.lifecycle.awaiting_ranks()) {
    record.add_lifecycle_awaiting_ranks_since_ns(
        ToWire(j.lifecycle.awaiting_ranks_since_ns));
  }
  auto body = record.Finish();
  return FinishStateRecord(builder, fb::StateBody::AlertStateRecord,
                           body.Union());
}

std::string AlertEvaluator::SerializeFleet(const RuleState& st) const {
  JobAlerts j;
  j.rules.emplace("fleet", st);
  return SerializeJob(j);
}

absl::StatusOr<AlertEvaluator::JobAlerts> AlertEvaluator::DecodeAlertState(
    absl::string_view blob, absl::string_view key) {
  ASSIGN_OR_RETURN(const fb::StateRecord* record,
                   ReadStateRecord(blob, fb::StateBody::AlertStateRecord,
                                   absl::StrCat("alert state ", key)));
  const fb::AlertStateRecord* body = record->body_as_AlertStateRecord();
  JobAlerts j;
  j.last_activity = NsToTime(body->last_activity_wall_ns());
  j.last_window_start_ns = body->last_window_start_ns();
  j.forgotten = body->forgotten();
  j.lifecycle.ended = body->lifecycle_ended();
  j.lifecycle.expired = body->lifecycle_expired();
  j.lifecycle.awaiting_ranks_since_ns =
      FromWire(body->lifecycle_awaiting_ranks_since_ns());
  if (body->lifecycle_gaps_ns() != nullptr) {
    j.lifecycle.gaps_ns.assign(body->lifecycle_gaps_ns()->begin(),
                               body->lifecycle_gaps_ns()->end());
  }
  j.ended = body->ended();
  if (body->rules() == nullptr) return j;
  for (const fb::AlertRuleStateRecord* r : *body->rules()) {
    RuleState st;
    st.firing = r->firing();
    st.hold = r->hold();
    st.clear = r->clear();
    st.last_sent = NsToTime(r->last_sent_wall_ns());
    if (r->last_event() != nullptr) {
      ASSIGN_OR_RETURN(st.last, ParseAlertEventJson(r->last_event()->str()));
    }
    if (r->undelivered_event() != nullptr) {
      ASSIGN_OR_RETURN(st.undelivered,
                       ParseAlertEventJson(r->undelivered_event()->str()));
    }
    if (!j.rules.emplace(r->rule()->str(), std::move(st)).second) {
      return absl::DataLossError(absl::StrCat("alert state ", key, ": rule ",
                                              r->rule()->str(), " twice"));
    }
  }
  return j;
}

absl::StatusOr<AlertEvaluator::JobAlerts>
AlertEvaluator::DecodeLegacyAlertState(absl::string_view blob) {
  JobAlerts j;
  bool ok = true;
  std::vector<absl::string_view> lines =
      absl::StrSplit(blob, '\n', absl::SkipEmpty());
  for (size_t i = 0; i < lines.size() && ok; ++i) {
    std::vector<absl::string_view> f = absl::StrSplit(lines[i], '\t');
    if (i == 0) {
      int64_t activity = 0;
      ok = (f.size() == 3 || f.size() == 4) && f[0] == kLegacyStateVersion &&
           absl::SimpleAtoi(f[1], &activity) &&
           absl::SimpleAtoi(f[2], &j.last_window_start_ns);
      j.last_activity = NsToTime(activity);
      j.forgotten = f.size() == 4 && f[3] == "1";
      continue;
    }
    RuleState st;
    int64_t sent = 0;
    ok = (f.size() == 6 || f.size() == 7) && absl::SimpleAtoi(f[2], &st.hold) &&
         absl::SimpleAtoi(f[3], &st.clear) && absl::SimpleAtoi(f[4], &sent);
    if (!ok) break;
    st.firing = f[1] == "1";
    st.last_sent = NsToTime(sent);
    if (f[5] != "-") {
      absl::StatusOr<AlertEvent> e = ParseAlertEventJson(f[5]);
      ok = e.ok();
      if (ok) st.last = *std::move(e);
    }
    if (ok && f.size() == 7 && f[6] != "-") {
      absl::StatusOr<AlertEvent> e = ParseAlertEventJson(f[6]);
      ok = e.ok();
      if (ok) st.undelivered = *std::move(e);
    }
    j.rules.emplace(std::string(f[0]), std::move(st));
  }
  if (!ok || lines.empty()) {
    return absl::DataLossError("not an alert state in the old text format");
  }
  return j;
}

std::vector<AlertStateUpdate> AlertEvaluator::TakeStateUpdates() {
  std::vector<AlertStateUpdate> out;
  for (const std::string& key : dirty_) {
    absl::string_view rest = key;
    if (absl::ConsumePrefix(&rest, "j/")) {
      auto it = jobs_.find(rest);
      if (it == jobs_.end()) {
        out.push_back(
            {.key = key, .job = std::string(rest), .state = std::nullopt});
      } else {
        out.push_back({.key = key,
                       .job = std::string(rest),
                       .state = SerializeJob(it->second)});
      }
    } else if (absl::ConsumePrefix(&rest, "f/")) {
      auto it = fleet_.find(rest);
      if (it == fleet_.end()) {
        out.push_back({.key = key, .job = {}, .state = std::nullopt});
      } else {
        out.push_back(
            {.key = key, .job = {}, .state = SerializeFleet(it->second)});
      }
    }
  }
  dirty_.clear();
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.key < b.key; });
  return out;
}

absl::Status AlertEvaluator::Restore(
    const std::vector<std::pair<std::string, std::string>>& states) {
  std::vector<std::string> bad;
  for (const auto& [key, blob] : states) {
    absl::StatusOr<JobAlerts> j = IsStateRecord(blob)
                                      ? DecodeAlertState(blob, key)
                                      : DecodeLegacyAlertState(blob);
    absl::string_view rest = key;
    if (!j.ok()) {
      bad.push_back(key);
    } else if (absl::ConsumePrefix(&rest, "j/")) {
      jobs_[rest] = *std::move(j);
    } else if (absl::ConsumePrefix(&rest, "f/") && j->rules.contains("fleet")) {
      fleet_[rest] = std::move(j->rules["fleet"]);
    } else {
      bad.push_back(key);
    }
  }
  if (!bad.empty()) {
    return absl::DataLossError(
        absl::StrCat("alert states that do not parse (ignored): ",
                     absl::StrJoin(bad, ", ")));
  }
  return absl::OkStatus();
}

absl::Status AlertEvaluator::AdoptJob(absl::string_view job,
                                      std::optional<absl::string_view> blob) {
  const std::string key = JobAlertStateKey(job);
  // Written back (or deleted) at the next commit: the store's copy becomes
  // the adopted state.
  dirty_.insert(key);
  jobs_.erase(job);
  if (!blob) return absl::OkStatus();
  return Restore({{key, std::string(*blob)}});
}

void AlertEvaluator::DropJob(absl::string_view job) {
  // Deleted from this instance's store at the next commit: it holds the
  // alert state of the jobs it owns.
  dirty_.insert(JobAlertStateKey(job));
  jobs_.erase(job);
}

StoredAlerts ReadStoredAlerts(
    const std::vector<std::pair<std::string, std::string>>& states) {
  StoredAlerts out;
  // No rules: Restore and Active read the state as committed, and nothing
  // is evaluated again. One key at a time, so that a bad blob is named.
  AlertEvaluator ev(AlertRuleSet{}, AlertEvaluatorOptions{});
  for (const auto& state : states) {
    if (!ev.Restore({state}).ok()) {
      out.unreadable_keys.push_back(state.first);
      continue;
    }
    absl::string_view job = state.first;
    if (absl::ConsumePrefix(&job, "j/")) out.evaluated_jobs.emplace_back(job);
  }
  std::sort(out.evaluated_jobs.begin(), out.evaluated_jobs.end());
  out.firing = ev.Active();
  return out;
}

}  // namespace bubblewatch
