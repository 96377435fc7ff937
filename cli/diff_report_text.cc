// The text rendering of `bubblewatch diff`.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/analysis_report.h"
#include "cli/diagnosis_report.h"
#include "diff/diff_report.h"

namespace bubblewatch {
namespace {

std::string Bold(absl::string_view s, bool color) {
  return color ? absl::StrCat("\033[1m", s, "\033[0m") : std::string(s);
}

// "+46.300 ms (+73.1%)" for times, "+7.7 pts" for ratios.
std::string Change(MetricKind kind, double before, double after,
                   absl::string_view suffix) {
  std::string text =
      absl::StrCat(FormatMetric(kind, after - before, true), suffix);
  if (kind == MetricKind::kTime && before != 0.0) {
    absl::StrAppend(
        &text, absl::StrFormat(" (%+.1f%%)", (after - before) / before * 100));
  }
  return text;
}

void Row(std::string& out, absl::string_view label, absl::string_view before,
         absl::string_view after, absl::string_view change) {
  absl::StrAppend(&out, absl::StrFormat("  %-22s %18s %18s   %s\n", label,
                                        before, after, change));
}

// A row for `metric` when both traces give it, "-" where one does not.
void MetricRow(std::string& out, absl::string_view label,
               absl::string_view metric_name, Normalization per,
               const DiffSide& before, const DiffSide& after) {
  Metric m = *ParseMetric(metric_name);
  absl::StatusOr<double> b = MetricValue(m, per, before);
  absl::StatusOr<double> a = MetricValue(m, per, after);
  absl::string_view suffix = NormalizationSuffix(per);
  auto text = [&](const absl::StatusOr<double>& v) {
    return v.ok() ? absl::StrCat(FormatMetric(m.kind, *v, false), suffix)
                  : std::string("-");
  };
  Row(out, label, text(b), text(a),
      b.ok() && a.ok() ? Change(m.kind, *b, *a, suffix) : "");
}

std::string SideLine(const DiffSide& s) {
  std::string line =
      absl::StrCat(s.path, " (", s.format, "): ", s.analysis.devices.size(),
                   " device(s), ", s.analysis.kernels, " kernels, wall span ",
                   HumanDuration(s.wall_span_ns));
  if (s.diagnosis.steps > 0) {
    absl::StrAppend(&line, ", ", s.diagnosis.steps, " steps");
  }
  return line;
}

void AppendBubbles(std::string& out, absl::string_view which,
                   const DiffSide& side, int top) {
  absl::StrAppend(&out, "  ", which, ":\n");
  int n = 0;
  for (const BubbleReport& b : side.analysis.top_bubbles) {
    if (n == top) break;
    ++n;
    absl::StrAppend(
        &out, absl::StrFormat("    %d. %12s  device %d  %-15s %s -> %s\n", n,
                              HumanDuration(b.duration_ns()), b.device,
                              BubbleCauseName(b.cause),
                              ShortenName(b.before ? b.before->name : "-", 36),
                              ShortenName(b.after ? b.after->name : "-", 36)));
  }
  if (n == 0) absl::StrAppend(&out, "    (no bubbles)\n");
}

}  // namespace

std::string RenderDiffText(const DiffSide& before, const DiffSide& after,
                           const std::vector<EvaluatedCondition>& conditions,
                           int top, bool color) {
  const Normalization per = ReportNormalization(before, after);
  std::string out;
  absl::StrAppend(&out, Bold("bubblewatch diff", color), "\n");
  absl::StrAppend(&out, "  before: ", SideLine(before), "\n");
  absl::StrAppend(&out, "  after:  ", SideLine(after), "\n");
  if (per == Normalization::kPerSecond) {
    absl::StrAppend(&out,
                    "  (no ProfilerStep annotations in both: totals are also "
                    "shown per second of wall-clock span)\n");
  }

  absl::StrAppend(&out, "\n", Bold("Summary", color), "\n");
  Row(out, "", "before", "after", "change");
  MetricRow(out, "utilization", "utilization", Normalization::kNone, before,
            after);
  MetricRow(out, "bubble ratio", "bubble_ratio", Normalization::kNone, before,
            after);
  MetricRow(out, "GPU span", "span", Normalization::kNone, before, after);
  MetricRow(out, "compute", "compute", Normalization::kNone, before, after);
  MetricRow(out, "bubble", "bubble", Normalization::kNone, before, after);
  if (per != Normalization::kNone) {
    MetricRow(out, absl::StrCat("bubble ", NormalizationSuffix(per)), "bubble",
              per, before, after);
  }
  MetricRow(out, "largest bubble", "largest_bubble", Normalization::kNone,
            before, after);
  MetricRow(out, "launch lead p50", "lead_p50", Normalization::kNone, before,
            after);
  MetricRow(out, "launch lead p90", "lead_p90", Normalization::kNone, before,
            after);
  MetricRow(out, "exposed NCCL", "comm_exposed", Normalization::kNone, before,
            after);
  const double qb = before.diagnosis.job.queue.mean;
  const double qa = after.diagnosis.job.queue.mean;
  Row(out, "queue depth mean", absl::StrFormat("%.2f", qb),
      absl::StrFormat("%.2f", qa), absl::StrFormat("%+.2f", qa - qb));
  Row(out, "verdict", VerdictName(before.diagnosis.job.verdict.verdict),
      VerdictName(after.diagnosis.job.verdict.verdict), "");

  absl::StrAppend(&out, "\n", Bold("Bubble time by cause", color), "\n");
  Row(out, "", "before", "after", "change");
  for (BubbleCause c : kAllBubbleCauses) {
    Metric m = *ParseMetric(absl::StrCat("cause:", BubbleCauseName(c)));
    double b = *MetricValue(m, Normalization::kNone, before);
    double a = *MetricValue(m, Normalization::kNone, after);
    if (b == 0.0 && a == 0.0) continue;
    MetricRow(out, BubbleCauseName(c), m.Label(), Normalization::kNone, before,
              after);
    if (per != Normalization::kNone) {
      MetricRow(out, absl::StrCat("  ", NormalizationSuffix(per)), m.Label(),
                per, before, after);
    }
  }

  absl::StrAppend(&out, "\n", Bold("Largest bubbles", color), "\n");
  AppendBubbles(out, "before", before, top);
  AppendBubbles(out, "after", after, top);

  std::vector<KernelChange> kernels = TopKernelChanges(before, after, top);
  if (!kernels.empty()) {
    absl::StrAppend(&out, "\n", Bold("Top kernels", color),
                    " (total GPU time)\n");
    absl::StrAppend(&out, absl::StrFormat("  %12s %12s  %-24s %s\n", "before",
                                          "after", "change", "kernel"));
    for (const KernelChange& k : kernels) {
      absl::StrAppend(
          &out,
          absl::StrFormat(
              "  %12s %12s  %-24s %s%s\n", HumanDuration(k.before_ns),
              HumanDuration(k.after_ns),
              Change(MetricKind::kTime, static_cast<double>(k.before_ns),
                     static_cast<double>(k.after_ns), ""),
              ShortenName(k.name, 60), k.communication ? "  [NCCL]" : ""));
    }
  }

  if (!conditions.empty()) {
    int failed = 0;
    absl::StrAppend(&out, "\n", Bold("Conditions", color), "\n");
    for (const EvaluatedCondition& e : conditions) {
      if (e.outcome.failed) ++failed;
      absl::StrAppend(&out, "  ",
                      e.outcome.failed ? Bold("FAIL", color) : "ok  ", "  ",
                      e.condition.text, "   ", e.outcome.summary, "\n");
    }
    absl::StrAppend(
        &out, "\n",
        failed > 0 ? Bold(absl::StrCat("FAILED: ", failed, " of ",
                                       conditions.size(), " condition(s) hold"),
                          color)
                   : absl::StrCat("passed: none of ", conditions.size(),
                                  " condition(s) holds"),
        "\n");
  }
  return out;
}

}  // namespace bubblewatch
