// The `--json` rendering of `bubblewatch diff`. Times are microseconds
// (doubles), ratios fractions, as in `analyze --json`.
#include "absl/strings/str_cat.h"
#include "base/json_writer.h"
#include "diff/diff_report.h"

namespace bubblewatch {
namespace {

// A metric in report units: fractions stay, nanoseconds become microseconds.
double InUnits(const Metric& m, double v) {
  return m.kind == MetricKind::kTime ? v / 1e3 : v;
}

void OptionalValue(JsonWriter& w, const Metric& m,
                   const absl::StatusOr<double>& v) {
  if (v.ok()) {
    w.Double(InUnits(m, *v));
  } else {
    w.Null();
  }
}

// {"before": b, "after": a, "change": a - b}; nulls where a trace cannot
// give the metric.
void WriteComparison(JsonWriter& w, absl::string_view metric_name,
                     Normalization per, const DiffSide& before,
                     const DiffSide& after) {
  Metric m = *ParseMetric(metric_name);
  absl::StatusOr<double> b = MetricValue(m, per, before);
  absl::StatusOr<double> a = MetricValue(m, per, after);
  w.BeginObject();
  w.Key("before");
  OptionalValue(w, m, b);
  w.Key("after");
  OptionalValue(w, m, a);
  w.Key("change");
  if (b.ok() && a.ok()) {
    w.Double(InUnits(m, *a - *b));
  } else {
    w.Null();
  }
  w.EndObject();
}

void WriteSide(JsonWriter& w, const DiffSide& s) {
  w.BeginObject();
  w.Key("file").String(s.path);
  w.Key("format").String(s.format);
  w.Key("devices").Int(static_cast<int64_t>(s.analysis.devices.size()));
  w.Key("kernels").Int(s.analysis.kernels);
  w.Key("steps").Int(s.diagnosis.steps);
  w.Key("wall_span_us").Double(JsonUs(s.wall_span_ns));
  w.Key("verdict").String(VerdictName(s.diagnosis.job.verdict.verdict));
  w.Key("verdict_reason").String(s.diagnosis.job.verdict.reason);
  w.EndObject();
}

void WriteBubbles(JsonWriter& w, const DiffSide& s, int top) {
  w.BeginArray();
  int n = 0;
  for (const BubbleReport& b : s.analysis.top_bubbles) {
    if (n++ == top) break;
    w.BeginObject();
    w.Key("device").Int(b.device);
    w.Key("start_us").Double(JsonUs(b.start_ns));
    w.Key("duration_us").Double(JsonUs(b.duration_ns()));
    w.Key("cause").String(BubbleCauseName(b.cause));
    w.Key("before");
    if (b.before) {
      w.String(b.before->name);
    } else {
      w.Null();
    }
    w.Key("after");
    if (b.after) {
      w.String(b.after->name);
    } else {
      w.Null();
    }
    w.EndObject();
  }
  w.EndArray();
}

}  // namespace

std::string RenderDiffJson(const DiffSide& before, const DiffSide& after,
                           const std::vector<EvaluatedCondition>& conditions,
                           int top, bool pretty) {
  const Normalization per = ReportNormalization(before, after);
  JsonWriter w(pretty ? 2 : 0);
  w.BeginObject();
  w.Key("before");
  WriteSide(w, before);
  w.Key("after");
  WriteSide(w, after);
  w.Key("normalized_per");
  switch (per) {
    case Normalization::kPerStep:
      w.String("step");
      break;
    case Normalization::kPerSecond:
      w.String("s");
      break;
    default:
      w.Null();
      break;
  }

  w.Key("metrics").BeginObject();
  w.Key("utilization");
  WriteComparison(w, "utilization", Normalization::kNone, before, after);
  w.Key("bubble_ratio");
  WriteComparison(w, "bubble_ratio", Normalization::kNone, before, after);
  for (absl::string_view name : {"span", "compute", "bubble", "largest_bubble",
                                 "lead_p50", "lead_p90", "comm_exposed"}) {
    w.Key(absl::StrCat(name, "_us"));
    WriteComparison(w, name, Normalization::kNone, before, after);
  }
  if (per != Normalization::kNone) {
    w.Key(absl::StrCat("bubble_us_per_",
                       per == Normalization::kPerStep ? "step" : "s"));
    WriteComparison(w, "bubble", per, before, after);
  }
  const double qb = before.diagnosis.job.queue.mean;
  const double qa = after.diagnosis.job.queue.mean;
  w.Key("queue_depth_mean").BeginObject();
  w.Key("before").Double(qb);
  w.Key("after").Double(qa);
  w.Key("change").Double(qa - qb);
  w.EndObject();
  w.EndObject();

  w.Key("causes_us").BeginObject();
  for (BubbleCause c : kAllBubbleCauses) {
    std::string metric = absl::StrCat("cause:", BubbleCauseName(c));
    w.Key(BubbleCauseName(c)).BeginObject();
    w.Key("total");
    WriteComparison(w, metric, Normalization::kNone, before, after);
    w.Key("normalized");
    if (per != Normalization::kNone) {
      WriteComparison(w, metric, per, before, after);
    } else {
      w.Null();
    }
    w.EndObject();
  }
  w.EndObject();

  w.Key("largest_bubbles").BeginObject();
  w.Key("before");
  WriteBubbles(w, before, top);
  w.Key("after");
  WriteBubbles(w, after, top);
  w.EndObject();

  w.Key("top_kernels").BeginArray();
  for (const KernelChange& k : TopKernelChanges(before, after, top)) {
    w.BeginObject();
    w.Key("name").String(k.name);
    w.Key("communication").Bool(k.communication);
    w.Key("before_us").Double(JsonUs(k.before_ns));
    w.Key("after_us").Double(JsonUs(k.after_ns));
    w.Key("change_us").Double(JsonUs(k.after_ns - k.before_ns));
    w.EndObject();
  }
  w.EndArray();

  bool passed = true;
  w.Key("conditions").BeginArray();
  for (const EvaluatedCondition& e : conditions) {
    passed = passed && !e.outcome.failed;
    const bool time = e.condition.metric.kind == MetricKind::kTime;
    auto units = [&](double v, bool relative) {
      return time && !relative ? v / 1e3 : v;
    };
    w.BeginObject();
    w.Key("condition").String(e.condition.text);
    w.Key("failed").Bool(e.outcome.failed);
    w.Key("before").Double(units(e.outcome.before, false));
    w.Key("after").Double(units(e.outcome.after, false));
    w.Key("observed").Double(units(e.outcome.observed, e.condition.relative));
    w.Key("threshold")
        .Double(units(e.condition.threshold, e.condition.relative));
    w.Key("summary").String(e.outcome.summary);
    w.EndObject();
  }
  w.EndArray();
  w.Key("passed").Bool(passed);
  w.EndObject();
  std::string out = std::move(w).Take();
  out.push_back('\n');
  return out;
}

}  // namespace bubblewatch
