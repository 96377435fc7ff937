#include "analysis/diagnosis.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "analysis/bound_verdict.h"
#include "analysis/device_timeline.h"
#include "analysis/duration_percentiles.h"
#include "analysis/interval_set.h"
#include "analysis/kernel_stats.h"
#include "analysis/launch_index.h"
#include "analysis/launch_lead.h"

namespace bubblewatch {
namespace {

constexpr std::array<absl::string_view, 7> kVerdictNames = {
    "unknown",     "gpu_bound", "cpu_bound", "sync_bound",
    "input_bound", "balanced",  "copy_bound"};

constexpr std::array<absl::string_view, kNumCopyKinds> kCopyKindNames = {
    "h2d_pageable", "h2d_pinned", "d2h_pageable", "d2h_pinned",
    "d2d",          "memset",     "other"};

std::optional<int64_t> MedianIfAny(std::vector<int64_t>& values) {
  if (values.empty()) return std::nullopt;
  return SummarizeDurations(values).p50_ns;
}

int64_t CountSteps(const Trace& trace) {
  absl::flat_hash_set<NameId> steps;
  for (const CpuEvent& e : trace.cpu) {
    if (absl::StartsWith(trace.Name(e.name), "ProfilerStep#")) {
      steps.insert(e.name);
    }
  }
  return static_cast<int64_t>(steps.size());
}

VerdictEvidence MakeEvidence(const UtilizationStats& stats,
                             const IdleClassifier::GapLeads& gap_leads,
                             const CopyKindBreakdown& copies,
                             const LaunchLeadStats& lead,
                             const QueueDepthStats& queue,
                             const KernelBreakdown& kernels) {
  VerdictEvidence e;
  e.utilization = stats.utilization();
  e.bubble_ratio = stats.bubble_ratio();
  e.attribution = stats.attribution;
  e.idle = GroupAttribution(stats.attribution, gap_leads);
  e.copies = copies;
  if (lead.lead.count > 0) e.lead_p50_ns = lead.lead.p50_ns;
  std::vector<int64_t> after_sync = gap_leads.after_sync;
  std::vector<int64_t> after_launch_gap = gap_leads.after_launch_gap;
  e.post_sync_lead_p50_ns = MedianIfAny(after_sync);
  e.post_launch_gap_lead_p50_ns = MedianIfAny(after_launch_gap);
  e.queue_mean = queue.mean;
  e.tiny_kernel_share = kernels.tiny_share();
  return e;
}

}  // namespace

absl::string_view VerdictName(Verdict verdict) {
  return kVerdictNames[static_cast<size_t>(verdict)];
}

absl::string_view CopyKindName(CopyKind kind) {
  return kCopyKindNames[static_cast<size_t>(kind)];
}

CopyKind ClassifyCopy(GpuActivityKind kind, absl::string_view name,
                      bool pageable) {
  if (kind == GpuActivityKind::kMemset) return CopyKind::kMemset;
  if (absl::StrContains(name, "HtoD")) {
    return pageable ? CopyKind::kHostToDevicePageable
                    : CopyKind::kHostToDevicePinned;
  }
  if (absl::StrContains(name, "DtoH")) {
    return pageable ? CopyKind::kDeviceToHostPageable
                    : CopyKind::kDeviceToHostPinned;
  }
  if (absl::StrContains(name, "DtoD") || absl::StrContains(name, "PtoP")) {
    return CopyKind::kDeviceToDevice;
  }
  return CopyKind::kOther;
}

std::optional<Verdict> ParseVerdict(absl::string_view name) {
  for (size_t i = 0; i < kVerdictNames.size(); ++i) {
    if (kVerdictNames[i] == name) return static_cast<Verdict>(i);
  }
  return std::nullopt;
}

absl::StatusOr<Diagnosis> DiagnoseTrace(const Trace& trace,
                                        const Analysis& analysis,
                                        const DiagnosisOptions& options) {
  if (options.top_kernels < 0 || options.queue_series_buckets < 0) {
    return absl::InvalidArgumentError(
        "top_kernels and queue_series_buckets must not be negative");
  }
  absl::flat_hash_map<int32_t, size_t> slot_of_device;
  for (size_t i = 0; i < analysis.devices.size(); ++i) {
    slot_of_device[analysis.devices[i].device] = i;
  }
  std::vector<std::vector<KernelSlot>> kernels(analysis.devices.size());
  std::vector<std::vector<Interval>> copies(analysis.devices.size());
  std::vector<std::vector<uint32_t>> copy_indices(analysis.devices.size());
  for (size_t i = 0; i < trace.gpu.size(); ++i) {
    const GpuActivity& a = trace.gpu[i];
    if (a.end_ns <= a.start_ns) continue;
    auto it = slot_of_device.find(a.device);
    if (it == slot_of_device.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device ", a.device, " has GPU activity but is not in the analysis"));
    }
    if (a.kind == GpuActivityKind::kKernel) {
      kernels[it->second].push_back(
          {a.start_ns, a.end_ns, static_cast<uint32_t>(i)});
    } else {
      copies[it->second].push_back({a.start_ns, a.end_ns});
      copy_indices[it->second].push_back(static_cast<uint32_t>(i));
    }
  }

  const LaunchIndex launches(trace);
  const IdleClassifier classifier(trace, launches);
  Diagnosis out;
  out.steps = CountSteps(trace);
  std::vector<DeviceTimeline> timelines;
  timelines.reserve(kernels.size());
  std::vector<DeviceLaunchFigures> launch_figures;
  IdleClassifier::GapLeads job_gap_leads;
  CopyKindBreakdown job_copies{};
  for (size_t i = 0; i < kernels.size(); ++i) {
    const DeviceAnalysis& da = analysis.devices[i];
    timelines.emplace_back(std::move(kernels[i]), trace);
    const DeviceTimeline& timeline = timelines.back();
    DeviceDiagnosis dd;
    dd.device = da.device;
    DiagnosisFigures& f = dd.figures;
    launch_figures.push_back(ComputeDeviceLaunchFigures(
        trace, launches, timeline.kernels(), da.first_kernel_start_ns,
        da.last_kernel_end_ns, options.queue_series_buckets));
    f.launch = launch_figures.back().lead;
    f.queue = launch_figures.back().queue;
    const std::vector<KernelSlot>* one[] = {&timeline.kernels()};
    f.kernels = BreakDownKernels(trace, one, timeline.compute_ns(),
                                 options.top_kernels);
    IdleClassifier::GapLeads gap_leads;
    classifier.Classify(
        timeline, IntervalSet::FromIntervals(std::move(copies[i])), &gap_leads);
    job_gap_leads.sync_gaps += gap_leads.sync_gaps;
    job_gap_leads.launch_gaps += gap_leads.launch_gaps;
    for (auto [from, to] :
         {std::pair(&gap_leads.after_sync, &job_gap_leads.after_sync),
          std::pair(&gap_leads.after_launch_gap,
                    &job_gap_leads.after_launch_gap)}) {
      to->insert(to->end(), from->begin(), from->end());
    }
    const CopyKindBreakdown device_copies =
        CopiesInBubbles(trace, timeline, copy_indices[i]);
    for (int k = 0; k < kNumCopyKinds; ++k) {
      job_copies[k].bubble_ns += device_copies[k].bubble_ns;
      job_copies[k].count += device_copies[k].count;
      job_copies[k].bytes += device_copies[k].bytes;
    }
    f.verdict = DecideVerdict(MakeEvidence(da.stats, gap_leads, device_copies,
                                           f.launch, f.queue, f.kernels),
                              f.kernels.kernels);
    out.devices.push_back(std::move(dd));
  }

  DiagnosisFigures& job = out.job;
  CombineLaunchFigures(launch_figures, &job.launch, &job.queue);
  std::vector<const std::vector<KernelSlot>*> all;
  for (const DeviceTimeline& t : timelines) all.push_back(&t.kernels());
  job.kernels = BreakDownKernels(trace, all, analysis.job.compute_ns,
                                 options.top_kernels);
  job.verdict =
      DecideVerdict(MakeEvidence(analysis.job, job_gap_leads, job_copies,
                                 job.launch, job.queue, job.kernels),
                    job.kernels.kernels);
  return out;
}

}  // namespace bubblewatch
