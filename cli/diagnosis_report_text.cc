// The "Diagnosis" section of the text report: verdicts, launch lead and
// queue depth, top kernels and communication.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/analysis_report.h"
#include "cli/diagnosis_report.h"
#include "cli/text_style.h"

namespace bubblewatch {
namespace {

std::string Bold(absl::string_view s, bool color) {
  return color ? absl::StrCat("\033[1m", s, "\033[0m") : std::string(s);
}

// The queue-depth series as one line of block characters, scaled to its
// maximum.
std::string Sparkline(const std::vector<double>& series) {
  static constexpr const char* kBlocks[] = {" ",      "\u2581", "\u2582",
                                            "\u2583", "\u2584", "\u2585",
                                            "\u2586", "\u2587", "\u2588"};
  double max = 0.0;
  for (double d : series) max = std::max(max, d);
  std::string out;
  for (double d : series) {
    int level = max > 0 ? static_cast<int>(d / max * 8.0 + 0.5) : 0;
    out += kBlocks[std::clamp(level, 0, 8)];
  }
  return out;
}

std::string LeadLine(const DiagnosisFigures& f) {
  const DurationPercentiles& p = f.launch.lead;
  if (p.count == 0) return "no kernel matched to its launch call";
  std::string line = absl::StrFormat(
      "p10 %s  p50 %s  p90 %s  (%d kernels", HumanDuration(p.p10_ns),
      HumanDuration(p.p50_ns), HumanDuration(p.p90_ns), p.count);
  if (f.launch.graph_kernels > 0) {
    absl::StrAppend(&line, ", ", f.launch.graph_kernels, " from CUDA graphs");
  }
  absl::StrAppend(&line, ")");
  return line;
}

void AppendKernelTable(std::string& out, const std::vector<KernelStat>& list) {
  absl::StrAppend(
      &out, absl::StrFormat("  %12s %7s %7s %12s %12s  %s\n", "total", "busy",
                            "count", "mean", "p90", "kernel"));
  for (const KernelStat& s : list) {
    absl::StrAppend(
        &out, absl::StrFormat(
                  "  %12s %7s %7d %12s %12s  %s\n", HumanDuration(s.total_ns),
                  Percent(s.busy_share), s.count, HumanDuration(s.mean_ns),
                  HumanDuration(s.p90_ns), ShortenName(s.name, 60)));
  }
}

}  // namespace

std::string ShortenName(absl::string_view s, size_t max) {
  if (s.size() <= max) return std::string(s);
  size_t head = (max - 3) * 2 / 3;
  size_t tail = max - 3 - head;
  return absl::StrCat(s.substr(0, head), "...", s.substr(s.size() - tail));
}

std::string RenderDiagnosisText(const Diagnosis& d, bool color) {
  std::string out;
  const DiagnosisFigures& job = d.job;
  absl::StrAppend(&out, "\n", Bold("Diagnosis", color), "\n");
  absl::StrAppend(&out,
                  "  verdict: ", Bold(VerdictName(job.verdict.verdict), color),
                  " \u2014 ", job.verdict.reason, "\n");
  if (!job.verdict.advice.empty()) {
    absl::StrAppend(&out, "  advice: ", job.verdict.advice, "\n");
  }
  absl::StrAppend(
      &out, absl::StrFormat("  %-14s %s\n", "launch lead", LeadLine(job)));
  if (job.launch.lead.count > 0) {
    absl::StrAppend(
        &out, absl::StrFormat("  %-14s mean %.2f  max %d kernels\n",
                              "queue depth", job.queue.mean, job.queue.max));
  }
  absl::StrAppend(&out,
                  absl::StrFormat("  %-14s %d non-empty, %s shorter than %s, "
                                  "median %s\n",
                                  "kernels", job.kernels.kernels,
                                  Percent(job.kernels.tiny_share()),
                                  HumanDuration(kTinyKernelNs),
                                  HumanDuration(job.kernels.median_kernel_ns)));
  if (d.steps > 0) {
    absl::StrAppend(
        &out, absl::StrFormat("  %-14s %d (ProfilerStep)\n", "steps", d.steps));
  }

  if (!d.devices.empty()) {
    absl::StrAppend(&out, "\n  ", Bold("Per device", color), "\n");
    absl::StrAppend(
        &out, absl::StrFormat("  %6s %-12s %10s %10s %10s %6s %5s "
                              " %s\n",
                              "device", "verdict", "lead p10", "p50", "p90",
                              "queue", "max", "queue over time"));
    for (const DeviceDiagnosis& dd : d.devices) {
      const DiagnosisFigures& f = dd.figures;
      const DurationPercentiles& p = f.launch.lead;
      auto lead = [&](int64_t ns) {
        return p.count > 0 ? HumanDuration(ns) : std::string("-");
      };
      // Without a known launch the queue is unknown, not empty.
      const bool known = p.count > 0;
      absl::StrAppend(
          &out, absl::StrFormat(
                    "  %6d %-12s %10s %10s %10s %6s %5s  %s\n", dd.device,
                    VerdictName(f.verdict.verdict), lead(p.p10_ns),
                    lead(p.p50_ns), lead(p.p90_ns),
                    known ? absl::StrFormat("%.2f", f.queue.mean) : "-",
                    known ? absl::StrCat(f.queue.max) : "-",
                    known ? absl::StrCat("|", Sparkline(f.queue.series), "|")
                          : std::string()));
    }
    if (d.devices.size() > 1) {
      for (const DeviceDiagnosis& dd : d.devices) {
        absl::StrAppend(&out, "  device ", dd.device, ": ",
                        dd.figures.verdict.reason, "\n");
      }
    }
  }

  if (!job.kernels.top_compute.empty()) {
    absl::StrAppend(&out, "\n  ", Bold("Top kernels", color),
                    " (by total GPU time; busy = share of busy time)\n");
    AppendKernelTable(out, job.kernels.top_compute);
  }
  const CommunicationStats& c = job.kernels.communication;
  if (c.kernels > 0) {
    absl::StrAppend(&out, "\n  ", Bold("Communication (NCCL)", color), "\n");
    absl::StrAppend(
        &out,
        absl::StrFormat("  %d kernels, busy %s; overlapped with compute "
                        "%s (%s), exposed %s\n",
                        c.kernels, HumanDuration(c.busy_ns),
                        HumanDuration(c.overlap_ns), Percent(c.overlap_ratio()),
                        HumanDuration(c.exposed_ns())));
    AppendKernelTable(out, job.kernels.top_communication);
  }
  return out;
}

}  // namespace bubblewatch
