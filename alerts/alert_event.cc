#include "alerts/alert_event.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "base/human_duration.h"
#include "base/json_writer.h"
#include "base/status_macros.h"
#include "schemas/analysis_json.h"
#include "simdjson.h"

namespace bubblewatch {
namespace {

constexpr char kSchema[] = "bubblewatch.alert/v1";

std::string FormatWall(absl::Time t) {
  return absl::FormatTime("%Y-%m-%d%ET%H:%M:%E*SZ", t, absl::UTCTimeZone());
}

// An event time (ns since the epoch) as RFC 3339 UTC, with the fraction
// only when there is one.
std::string EventTimeRfc3339(int64_t ns) {
  return absl::FormatTime("%Y-%m-%d%ET%H:%M:%E*SZ", absl::FromUnixNanos(ns),
                          absl::UTCTimeZone());
}

std::string PercentText(double fraction) {
  return absl::StrFormat("%.3g%%", 100 * fraction);
}

int64_t SecondsToNs(double s) { return static_cast<int64_t>(s * 1e9 + 0.5); }

// Reads fields of one object, remembering the first failure.
class Fields {
 public:
  Fields(simdjson::dom::object obj, absl::Status* status)
      : obj_(obj), status_(status) {}
  bool Has(const char* key) {
    simdjson::dom::element e;
    return obj_[key].get(e) == simdjson::SUCCESS && !e.is_null();
  }
  simdjson::dom::element Get(const char* key) {
    simdjson::dom::element e;
    if (status_->ok() && obj_[key].get(e) != simdjson::SUCCESS) {
      *status_ = absl::InvalidArgumentError(
          absl::StrCat("alert JSON lacks \"", key, "\""));
    }
    return e;
  }
  std::string Str(const char* key) {
    simdjson::dom::element e = Get(key);
    std::string_view v;
    if (status_->ok() && e.get_string().get(v) != simdjson::SUCCESS) {
      Fail(key, "a string");
    }
    return std::string(v);
  }
  int64_t Int(const char* key) {
    simdjson::dom::element e = Get(key);
    int64_t v = 0;
    if (status_->ok() && e.get_int64().get(v) != simdjson::SUCCESS) {
      Fail(key, "an integer");
    }
    return v;
  }
  double Double(const char* key) {
    simdjson::dom::element e = Get(key);
    double v = 0;
    if (status_->ok() && e.get_double().get(v) != simdjson::SUCCESS) {
      Fail(key, "a number");
    }
    return v;
  }
  absl::Time Time(const char* key) {
    std::string text = Str(key);
    absl::Time t;
    std::string err;
    if (status_->ok() && !absl::ParseTime(absl::RFC3339_full, text, &t, &err)) {
      Fail(key, "an RFC 3339 time");
    }
    return t;
  }
  std::optional<simdjson::dom::object> Object(const char* key) {
    if (!Has(key)) return std::nullopt;
    simdjson::dom::object o;
    if (Get(key).get_object().get(o) != simdjson::SUCCESS) {
      Fail(key, "an object");
      return std::nullopt;
    }
    return o;
  }

 private:
  void Fail(const char* key, const char* what) {
    if (status_->ok()) {
      *status_ = absl::InvalidArgumentError(
          absl::StrCat("alert JSON field \"", key, "\" is not ", what));
    }
  }
  simdjson::dom::object obj_;
  absl::Status* status_;
};

std::optional<KernelRef> ReadKernel(Fields& f, const char* key,
                                    absl::Status* status) {
  std::optional<simdjson::dom::object> o = f.Object(key);
  if (!o) return std::nullopt;
  Fields k(*o, status);
  return KernelRef{.name = k.Str("name"),
                   .start_ns = k.Int("start_ns"),
                   .end_ns = k.Int("end_ns"),
                   .stream = static_cast<int32_t>(k.Int("stream"))};
}

}  // namespace

absl::string_view AlertStatusName(AlertStatus status) {
  switch (status) {
    case AlertStatus::kFiring:
      return "firing";
    case AlertStatus::kRepeat:
      return "repeat";
    case AlertStatus::kResolved:
      return "resolved";
  }
  return "firing";
}

std::string AlertEventToJson(const AlertEvent& e) {
  JsonWriter w;
  w.BeginObject();
  w.Key("schema").String(kSchema);
  w.Key("status").String(AlertStatusName(e.status));
  w.Key("rule").String(e.rule);
  w.Key("kind").String(RuleKindName(e.kind));
  w.Key("severity").String(e.severity);
  w.Key("summary").String(e.summary);
  w.Key("description").String(AlertDescription(e));
  w.Key("job").String(e.job);
  w.Key("cause").String(e.cause);
  w.Key("jobs").BeginArray();
  for (const std::string& j : e.jobs) w.String(j);
  w.EndArray();
  w.Key("starts_at").String(FormatWall(e.starts_at));
  e.ends_at == absl::InfiniteFuture()
      ? w.Key("ends_at").Null()
      : w.Key("ends_at").String(FormatWall(e.ends_at));
  w.Key("sent_at").String(FormatWall(e.sent_at));
  w.Key("measured").BeginObject();
  w.Key("name").String(e.measure);
  w.Key("value").Double(e.value);
  w.Key("threshold").Double(e.threshold);
  w.Key("window_start_ns").Int(e.window_start_ns);
  w.Key("window_end_ns").Int(e.window_end_ns);
  w.Key("utilization").Double(e.utilization);
  w.EndObject();
  w.Key("dominant_cause");
  if (e.dominant_cause) {
    w.BeginObject();
    w.Key("cause").String(BubbleCauseName(*e.dominant_cause));
    w.Key("share_of_bubble").Double(e.dominant_share);
    w.Key("advice").String(BubbleCauseAdvice(*e.dominant_cause));
    w.EndObject();
  } else {
    w.Null();
  }
  w.Key("largest_bubble");
  if (e.largest_bubble) {
    const BubbleReport& b = *e.largest_bubble;
    w.BeginObject();
    w.Key("device").Int(b.device);
    w.Key("start_ns").Int(b.start_ns);
    w.Key("end_ns").Int(b.end_ns);
    w.Key("duration_ns").Int(b.duration_ns());
    w.Key("cause").String(BubbleCauseName(b.cause));
    w.Key("blamed").String(b.blamed);
    w.Key("before");
    WriteKernelRefJson(w, b.before);
    w.Key("after");
    WriteKernelRefJson(w, b.after);
    w.EndObject();
  } else {
    w.Null();
  }
  // Only straggler alerts carry it: other kinds' events are as they were.
  if (e.straggler_rank) {
    w.Key("straggler").BeginObject();
    w.Key("rank").Int(*e.straggler_rank);
    w.Key("host").String(e.straggler_host);
    w.Key("cause").String(e.straggler_cause);
    w.Key("cost_ns").Int(e.straggler_cost_ns);
    w.Key("of_ns").Int(e.straggler_of_ns);
    w.EndObject();
  }
  // The `host` label: only when set, so other alerts' events are as they
  // were.
  if (!e.host.empty()) w.Key("host").String(e.host);
  w.Key("dashboard_url").String(e.dashboard_url);
  w.EndObject();
  return std::move(w).Take();
}

absl::StatusOr<AlertEvent> ParseAlertEventJson(absl::string_view json) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(json.data(), json.size()).get(root) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("alert JSON does not parse");
  }
  simdjson::dom::object obj;
  if (root.get_object().get(obj) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("alert JSON is not an object");
  }
  absl::Status status;
  Fields f(obj, &status);
  AlertEvent e;
  if (f.Str("schema") != kSchema && status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("alert JSON schema is not ", kSchema));
  }
  const std::string st = f.Str("status");
  e.status = st == "resolved" ? AlertStatus::kResolved
             : st == "repeat" ? AlertStatus::kRepeat
                              : AlertStatus::kFiring;
  e.rule = f.Str("rule");
  const std::string kind = f.Str("kind");
  for (int k = 0; k <= static_cast<int>(RuleKind::kStraggler); ++k) {
    if (RuleKindName(static_cast<RuleKind>(k)) == kind) {
      e.kind = static_cast<RuleKind>(k);
    }
  }
  e.severity = f.Str("severity");
  e.summary = f.Str("summary");
  e.job = f.Str("job");
  e.cause = f.Str("cause");
  simdjson::dom::array jobs;
  if (status.ok() && f.Get("jobs").get_array().get(jobs) == simdjson::SUCCESS) {
    for (simdjson::dom::element j : jobs) {
      std::string_view v;
      if (j.get_string().get(v) == simdjson::SUCCESS) e.jobs.emplace_back(v);
    }
  }
  e.starts_at = f.Time("starts_at");
  if (f.Has("ends_at")) e.ends_at = f.Time("ends_at");
  e.sent_at = f.Time("sent_at");
  if (std::optional<simdjson::dom::object> m = f.Object("measured")) {
    Fields mf(*m, &status);
    e.measure = mf.Str("name");
    e.value = mf.Double("value");
    e.threshold = mf.Double("threshold");
    e.window_start_ns = mf.Int("window_start_ns");
    e.window_end_ns = mf.Int("window_end_ns");
    e.utilization = mf.Double("utilization");
  }
  if (std::optional<simdjson::dom::object> d = f.Object("dominant_cause")) {
    Fields df(*d, &status);
    e.dominant_cause = ParseBubbleCause(df.Str("cause"));
    e.dominant_share = df.Double("share_of_bubble");
  }
  if (std::optional<simdjson::dom::object> b = f.Object("largest_bubble")) {
    Fields bf(*b, &status);
    BubbleReport r;
    r.device = static_cast<int32_t>(bf.Int("device"));
    r.start_ns = bf.Int("start_ns");
    r.end_ns = bf.Int("end_ns");
    r.cause =
        ParseBubbleCause(bf.Str("cause")).value_or(BubbleCause::kUnattributed);
    r.blamed = bf.Str("blamed");
    r.before = ReadKernel(bf, "before", &status);
    r.after = ReadKernel(bf, "after", &status);
    e.largest_bubble = std::move(r);
  }
  if (std::optional<simdjson::dom::object> st = f.Object("straggler")) {
    Fields sf(*st, &status);
    e.straggler_rank = static_cast<int32_t>(sf.Int("rank"));
    e.straggler_host = sf.Str("host");
    e.straggler_cause = sf.Str("cause");
    // Absent from events written before the cost.
    if (sf.Has("cost_ns")) e.straggler_cost_ns = sf.Int("cost_ns");
    if (sf.Has("of_ns")) e.straggler_of_ns = sf.Int("of_ns");
  }
  if (f.Has("host")) e.host = f.Str("host");
  e.dashboard_url = f.Str("dashboard_url");
  RETURN_IF_ERROR(status);
  return e;
}

std::string AlertMeasureText(const AlertEvent& e) {
  absl::string_view m = e.measure;
  if (m == "utilization") {
    return absl::StrCat("utilization ", PercentText(e.value), " (threshold ",
                        PercentText(e.threshold), ")");
  }
  if (m == "straggler_wait_share") {
    if (!e.straggler_rank) {
      return absl::StrCat("no rank caused waits over the threshold (",
                          PercentText(e.threshold), ")");
    }
    return absl::StrCat(AlertStragglerText(e), " (its waits ",
                        PercentText(e.value), " of GPU time, threshold ",
                        PercentText(e.threshold), ")");
  }
  if (absl::EndsWith(m, "_share")) {
    m.remove_suffix(6);
    return absl::StrCat(m, " ", PercentText(e.value),
                        " of GPU time (threshold ", PercentText(e.threshold),
                        ")");
  }
  if (m == "largest_bubble_s") {
    return absl::StrCat(
        "largest bubble ", HumanDurationWords(SecondsToNs(e.value)),
        " (threshold ", HumanDurationWords(SecondsToNs(e.threshold)), ")");
  }
  if (m == "silent_s") {
    return absl::StrCat("silent for ", HumanDurationWords(SecondsToNs(e.value)),
                        " (threshold ",
                        HumanDurationWords(SecondsToNs(e.threshold)), ")");
  }
  if (m == "jobs_firing") {
    return absl::StrFormat("%.0f jobs firing (threshold %.0f)", e.value,
                           e.threshold);
  }
  return absl::StrFormat("%s %.4g (threshold %.4g)", e.measure, e.value,
                         e.threshold);
}

std::string AlertDescription(const AlertEvent& e) {
  std::string d = AlertMeasureText(e);
  if (e.window_end_ns > e.window_start_ns) {
    absl::StrAppend(&d, " in the window of ",
                    HumanDurationWords(e.window_end_ns - e.window_start_ns),
                    " from ", EventTimeRfc3339(e.window_start_ns),
                    ", utilization ",
                    absl::StrFormat("%.1f%%", 100 * e.utilization));
  }
  if (!e.jobs.empty()) {
    absl::StrAppend(&d, "; jobs: ", absl::StrJoin(e.jobs, ", "));
  }
  return d;
}

std::string AlertStragglerText(const AlertEvent& e) {
  if (!e.straggler_rank) return "";
  std::string text;
  if (!e.job.empty()) absl::StrAppend(&text, "job ", e.job, ": ");
  absl::StrAppend(&text, "rank ", *e.straggler_rank);
  if (!e.straggler_host.empty()) {
    absl::StrAppend(&text, " on host ", e.straggler_host);
  }
  if (!e.straggler_cause.empty()) {
    // "data_loading" reads "late by data loading".
    absl::StrAppend(&text, " late by ",
                    absl::StrReplaceAll(e.straggler_cause, {{"_", " "}}));
  }
  if (e.straggler_cost_ns >= 0 && e.straggler_of_ns > 0) {
    absl::StrAppend(&text, "; cost the job ",
                    HumanDurationWords(e.straggler_cost_ns), " of every ",
                    HumanDurationWords(e.straggler_of_ns), " window");
  }
  return text;
}

std::string AlertLargestBubbleText(const BubbleReport& b) {
  std::string s = absl::StrCat(
      HumanDurationWords(b.duration_ns()), " on device ", b.device, " at ",
      EventTimeRfc3339(b.start_ns), ", cause ", BubbleCauseName(b.cause),
      ", blamed on ", b.blamed.empty() ? "-" : b.blamed);
  if (b.before) absl::StrAppend(&s, "; after kernel ", b.before->name);
  if (b.after) absl::StrAppend(&s, "; before kernel ", b.after->name);
  return s;
}

std::string DescribeAlertEvent(const AlertEvent& e) {
  std::string line =
      absl::StrFormat("%s %s %s [%s]: %s %.3g (threshold %.3g)",
                      absl::AsciiStrToUpper(AlertStatusName(e.status)), e.rule,
                      e.job.empty() ? "fleet" : e.job, e.severity, e.measure,
                      e.value, e.threshold);
  if (e.dominant_cause) {
    absl::StrAppend(
        &line, "; dominant cause ", BubbleCauseName(*e.dominant_cause), " ",
        absl::StrFormat("%.0f%%", 100 * e.dominant_share), " of bubble time");
  }
  if (e.largest_bubble) {
    absl::StrAppendFormat(&line, "; largest bubble %.1f ms blamed on %s",
                          e.largest_bubble->duration_ns() / 1e6,
                          e.largest_bubble->blamed);
  }
  if (!e.jobs.empty()) absl::StrAppend(&line, "; jobs ", e.jobs.size());
  if (e.straggler_rank) {
    absl::StrAppend(&line, "; straggler ", AlertStragglerText(e));
  }
  return line;
}

}  // namespace bubblewatch
