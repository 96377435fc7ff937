#include "diff/diff_metrics.h"

#include <array>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace bubblewatch {
namespace {

struct PlainMetric {
  absl::string_view name;
  MetricKind kind;
  bool total;
};

constexpr std::array<PlainMetric, 12> kPlainMetrics = {{
    {"utilization", MetricKind::kRatio, false},
    {"bubble_ratio", MetricKind::kRatio, false},
    {"span", MetricKind::kTime, true},
    {"compute", MetricKind::kTime, true},
    {"bubble", MetricKind::kTime, true},
    {"comm_exposed", MetricKind::kTime, true},
    {"largest_bubble", MetricKind::kTime, false},
    {"lead_p50", MetricKind::kTime, false},
    {"lead_p90", MetricKind::kTime, false},
    // Collectives (docs/semantics.md#collectives); only for a trace that
    // holds several ranks (a node's Nsight Systems export).
    {"comm_wait", MetricKind::kTime, true},
    {"busy_useful_utilization", MetricKind::kRatio, false},
    {"straggler_wait", MetricKind::kTime, true},
}};

absl::Status NotAvailable(const DiffSide& side, absl::string_view what) {
  return absl::FailedPreconditionError(absl::StrCat(side.path, " ", what));
}

absl::StatusOr<double> RawValue(const Metric& m, const DiffSide& side) {
  const UtilizationStats& job = side.analysis.job;
  const DiagnosisFigures& d = side.diagnosis.job;
  if (m.name == "utilization") return job.utilization();
  if (m.name == "bubble_ratio") return job.bubble_ratio();
  if (m.name == "span") return static_cast<double>(job.span_ns);
  if (m.name == "compute") return static_cast<double>(job.compute_ns);
  if (m.name == "bubble") return static_cast<double>(job.bubble_ns);
  if (m.name == "comm_wait" || m.name == "busy_useful_utilization" ||
      m.name == "straggler_wait") {
    if (!side.collectives.has_value()) {
      return NotAvailable(
          side,
          "holds one rank: collective waits need every rank of the job in "
          "one trace");
    }
    int64_t wait = 0;
    int64_t busy = 0;
    int64_t span = 0;
    for (const RankCollectiveStats& r : side.collectives->ranks) {
      wait += r.comm_wait_ns;
      busy += r.stats.compute_ns;
      span += r.stats.span_ns;
    }
    if (m.name == "comm_wait") return static_cast<double>(wait);
    if (m.name == "straggler_wait") {
      return side.collectives->stragglers.empty()
                 ? 0.0
                 : static_cast<double>(
                       side.collectives->stragglers[0].wait_caused_ns);
    }
    return span > 0 ? static_cast<double>(busy - wait) / span : 0.0;
  }
  if (m.name == "comm_exposed") {
    return static_cast<double>(d.kernels.communication.exposed_ns());
  }
  if (m.name == "largest_bubble") {
    return static_cast<double>(job.largest_bubble_ns);
  }
  if (m.name == "lead_p50" || m.name == "lead_p90") {
    if (d.launch.lead.count == 0) {
      return NotAvailable(side, "has no kernel matched to its launch call");
    }
    return static_cast<double>(m.name == "lead_p50" ? d.launch.lead.p50_ns
                                                    : d.launch.lead.p90_ns);
  }
  if (m.name == "cause") {
    std::optional<BubbleCause> c = ParseBubbleCause(m.argument);
    return static_cast<double>(job.attribution[static_cast<int>(*c)]);
  }
  // kernel:<substring>
  int64_t ns = 0;
  for (const auto& [name, time] : side.kernel_time) {
    if (absl::StrContains(name, m.argument)) ns += time;
  }
  return static_cast<double>(ns);
}

}  // namespace

std::string Metric::Label() const {
  return argument.empty() ? name : absl::StrCat(name, ":", argument);
}

absl::StatusOr<Metric> ParseMetric(absl::string_view text) {
  Metric m;
  if (absl::ConsumePrefix(&text, "cause:")) {
    if (!ParseBubbleCause(text)) {
      std::vector<absl::string_view> causes;
      for (BubbleCause c : kAllBubbleCauses) {
        causes.push_back(BubbleCauseName(c));
      }
      return absl::InvalidArgumentError(
          absl::StrCat("unknown cause '", text,
                       "' (want one of: ", absl::StrJoin(causes, ", "), ")"));
    }
    m.name = "cause";
    m.argument = std::string(text);
    m.total = true;
    return m;
  }
  if (absl::ConsumePrefix(&text, "kernel:")) {
    if (text.empty()) {
      return absl::InvalidArgumentError(
          "kernel: needs a name substring, e.g. kernel:gemm");
    }
    m.name = "kernel";
    m.argument = std::string(text);
    m.total = true;
    return m;
  }
  for (const PlainMetric& p : kPlainMetrics) {
    if (p.name == text) {
      m.name = std::string(p.name);
      m.kind = p.kind;
      m.total = p.total;
      return m;
    }
  }
  std::vector<absl::string_view> names;
  for (const PlainMetric& p : kPlainMetrics) names.push_back(p.name);
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown metric '", text, "' (want one of: ", absl::StrJoin(names, ", "),
      ", cause:<cause>, kernel:<substring>; optionally with _drop or _rise)"));
}

absl::StatusOr<double> MetricValue(const Metric& metric, Normalization per,
                                   const DiffSide& side) {
  absl::StatusOr<double> v = RawValue(metric, side);
  if (!v.ok()) return v.status();
  switch (per) {
    case Normalization::kNone:
      return *v;
    case Normalization::kPerStep:
      if (side.diagnosis.steps == 0) {
        return NotAvailable(side,
                            "has no ProfilerStep annotations to count steps "
                            "by (use /s instead of /step)");
      }
      return *v / static_cast<double>(side.diagnosis.steps);
    case Normalization::kPerSecond:
      if (side.wall_span_ns <= 0) {
        return NotAvailable(side, "has an empty span: nothing to divide by");
      }
      return *v / (static_cast<double>(side.wall_span_ns) / 1e9);
  }
  return *v;
}

absl::string_view NormalizationSuffix(Normalization per) {
  switch (per) {
    case Normalization::kPerStep:
      return "/step";
    case Normalization::kPerSecond:
      return "/s";
    default:
      return "";
  }
}

}  // namespace bubblewatch
