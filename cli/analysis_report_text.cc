// The human-readable rendering of an Analysis: summary, per-device table,
// attribution bars, top bubbles and advice.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/analysis_report.h"
#include "cli/text_style.h"

namespace bubblewatch {
namespace {

std::string Name(const std::optional<KernelRef>& k) {
  return k ? k->name : "-";
}

}  // namespace

std::string RenderAnalysisText(const Analysis& a, const InputSummary& in,
                               bool color) {
  Styler st(color);
  std::string out;
  absl::StrAppend(&out, st.Bold("bubblewatch analyze"), "  ", in.path, "  (",
                  in.format, ")\n");
  std::string rank = in.rank >= 0 ? absl::StrCat("rank ", in.rank) : "rank ?";
  if (in.world_size >= 0) absl::StrAppend(&rank, " of ", in.world_size);
  absl::StrAppend(&out, "  ", rank, "; ", a.devices.size(), " device(s); ",
                  a.kernels, " kernels, ", in.memcpys, " memcpys, ", in.memsets,
                  " memsets; ", a.cpu_events, " CPU events (", in.cpu_api_calls,
                  " CUDA API calls)\n");
  if (a.kernels > 0) {
    absl::StrAppend(
        &out, "  ", a.kernels_with_launch, " of ", a.kernels,
        " kernels matched to their launch call (",
        Percent(static_cast<double>(a.kernels_with_launch) / a.kernels), ")\n");
  }
  if (in.max_time_ns > in.min_time_ns) {
    absl::StrAppend(&out, "  events span ",
                    HumanDuration(in.max_time_ns - in.min_time_ns), "\n");
  }
  if (in.skipped > 0) {
    absl::StrAppend(&out, "  ", in.skipped,
                    " trace entries skipped (not GPU/CPU activity; see "
                    "--json input.skipped)\n");
  }
  if (a.kernels == 0) {
    absl::StrAppend(&out, "\n", st.Bold("No GPU kernels in this trace"),
                    ": nothing to analyze (is it a CUDA trace, and was "
                    "CUDA activity profiled?).\n");
    return out;
  }

  const UtilizationStats& j = a.job;
  absl::StrAppend(&out, "\n", st.Bold("Summary"),
                  a.devices.size() > 1 ? " (GPU-time summed over devices)" : "",
                  "\n");
  absl::StrAppend(&out, absl::StrFormat("  %-16s %s\n", "GPU span",
                                        HumanDuration(j.span_ns)));
  absl::StrAppend(&out, absl::StrFormat("  %-16s %s   utilization %s\n",
                                        "compute", HumanDuration(j.compute_ns),
                                        st.Bold(Percent(j.utilization()))));
  absl::StrAppend(&out, absl::StrFormat("  %-16s %s   %s of span\n", "bubble",
                                        HumanDuration(j.bubble_ns),
                                        Percent(j.bubble_ratio())));
  absl::StrAppend(&out,
                  absl::StrFormat("  %-16s %s   after %s\n", "largest bubble",
                                  HumanDuration(j.largest_bubble_ns),
                                  Shorten(Name(j.culprit_before_bubble), 60)));

  absl::StrAppend(&out, "\n", st.Bold("Devices"), "\n");
  absl::StrAppend(&out, absl::StrFormat("  %6s %12s %12s %12s %7s %12s  %s\n",
                                        "device", "span", "compute", "bubble",
                                        "util", "largest", "culprit"));
  for (const DeviceAnalysis& d : a.devices) {
    const UtilizationStats& s = d.stats;
    absl::StrAppend(
        &out,
        absl::StrFormat("  %6d %12s %12s %12s %7s %12s  %s\n", d.device,
                        HumanDuration(s.span_ns), HumanDuration(s.compute_ns),
                        HumanDuration(s.bubble_ns), Percent(s.utilization()),
                        HumanDuration(s.largest_bubble_ns),
                        Shorten(Name(s.culprit_before_bubble), 48)));
  }

  if (j.bubble_ns > 0) {
    absl::StrAppend(&out, "\n", st.Bold("Bubble attribution"), " (",
                    HumanDuration(j.bubble_ns), ")\n");
    for (BubbleCause c : kAllBubbleCauses) {
      int64_t ns = j.attribution[static_cast<int>(c)];
      if (ns == 0) continue;
      double share = static_cast<double>(ns) / j.bubble_ns;
      absl::StrAppend(
          &out,
          absl::StrFormat("  %-16s %12s %6s  %s\n", BubbleCauseName(c),
                          HumanDuration(ns), Percent(share), Bar(share, 30)));
    }
  }

  if (!a.top_bubbles.empty()) {
    absl::StrAppend(&out, "\n", st.Bold("Top bubbles"), "\n");
    int64_t origin = a.first_kernel_start_ns;
    int rank_no = 1;
    for (const BubbleReport& b : a.top_bubbles) {
      absl::StrAppend(
          &out, absl::StrFormat("  %2d. %12s  device %d at +%s  %s\n",
                                rank_no++, HumanDuration(b.duration_ns()),
                                b.device, HumanDuration(b.start_ns - origin),
                                st.Bold(BubbleCauseName(b.cause))));
      absl::StrAppend(&out, "      ", Shorten(Name(b.before), 50), " -> ",
                      Shorten(Name(b.after), 50), "\n");
      if (!b.blamed.empty()) {
        absl::StrAppend(&out, "      blamed: ", Shorten(b.blamed, 80), "\n");
      }
    }
  }

  if (j.bubble_ns > 0) {
    absl::StrAppend(&out, "\n", st.Bold("Advice"), "\n");
    std::vector<BubbleCause> causes(kAllBubbleCauses.begin(),
                                    kAllBubbleCauses.end());
    std::stable_sort(causes.begin(), causes.end(),
                     [&](BubbleCause x, BubbleCause y) {
                       return j.attribution[static_cast<int>(x)] >
                              j.attribution[static_cast<int>(y)];
                     });
    int shown = 0;
    for (BubbleCause c : causes) {
      int64_t ns = j.attribution[static_cast<int>(c)];
      if (ns <= 0 || ns * 20 < j.bubble_ns || shown == 3) continue;
      ++shown;
      absl::StrAppend(&out, "  ", st.Bold(BubbleCauseName(c)), " (",
                      Percent(static_cast<double>(ns) / j.bubble_ns),
                      " of bubble time): ", BubbleCauseAdvice(c), "\n");
    }
  }

  if (!a.windows.empty()) {
    absl::StrAppend(&out, "\n", st.Bold("Windows"), "\n");
    absl::StrAppend(
        &out, absl::StrFormat("  %14s %12s %7s %12s  %s\n", "start", "bubble",
                              "util", "largest", "dominant cause"));
    for (const WindowAnalysis& w : a.windows) {
      auto dominant = DominantCause(w.job.attribution);
      absl::StrAppend(
          &out,
          absl::StrFormat(
              "  %14s %12s %7s %12s  %s\n",
              absl::StrCat("+",
                           HumanDuration(w.start_ns - a.first_kernel_start_ns)),
              HumanDuration(w.job.bubble_ns), Percent(w.job.utilization()),
              HumanDuration(w.job.largest_bubble_ns),
              dominant ? BubbleCauseName(*dominant) : "-"));
    }
  }
  return out;
}

InputSummary SummarizeInput(const Trace& trace, std::string path,
                            std::string format) {
  InputSummary s;
  s.path = std::move(path);
  s.format = std::move(format);
  s.rank = trace.rank;
  s.world_size = trace.world_size;
  bool any = false;
  auto extend = [&](int64_t start, int64_t end) {
    if (!any || start < s.min_time_ns) s.min_time_ns = start;
    if (!any || end > s.max_time_ns) s.max_time_ns = end;
    any = true;
  };
  for (const GpuActivity& g : trace.gpu) {
    if (g.kind == GpuActivityKind::kMemcpy) ++s.memcpys;
    if (g.kind == GpuActivityKind::kMemset) ++s.memsets;
    extend(g.start_ns, g.end_ns);
  }
  for (const CpuEvent& e : trace.cpu) {
    if (e.category == CpuEventCategory::kCudaRuntime ||
        e.category == CpuEventCategory::kCudaDriver) {
      ++s.cpu_api_calls;
    } else {
      ++s.cpu_context;
    }
    extend(e.start_ns, e.end_ns);
  }
  for (const auto& [reason, count] : trace.skipped) s.skipped += count;
  s.skipped_by_reason = trace.skipped;
  return s;
}

}  // namespace bubblewatch
