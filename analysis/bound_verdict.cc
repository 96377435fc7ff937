#include "analysis/bound_verdict.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "analysis/cpu_event_classifier.h"

namespace bubblewatch {
namespace {

std::string Duration(int64_t ns) {
  double v = static_cast<double>(ns);
  if (ns < 1'000'000) return absl::StrFormat("%.1f us", v / 1e3);
  if (ns < 1'000'000'000) return absl::StrFormat("%.2f ms", v / 1e6);
  return absl::StrFormat("%.2f s", v / 1e9);
}

std::string Percent(double ratio) {
  return absl::StrFormat("%.0f%%", ratio * 100.0);
}

std::string LeadText(const std::optional<int64_t>& lead) {
  return lead ? Duration(*lead) : "unknown";
}

constexpr absl::string_view kGpuAdvice =
    "The GPU is the bottleneck: take the top kernels to Nsight Compute, and "
    "overlap communication and copies with compute.";
constexpr absl::string_view kCopyAdvice =
    "Copies keep the GPU from computing: copy from pinned memory with "
    "non_blocking=True on a side stream so copies overlap kernels, and move "
    "fewer, larger buffers.";
constexpr absl::string_view kFloodAdvice =
    "Tiny-kernel flood: capture the step with CUDA Graphs, fuse small ops "
    "(torch.compile), or batch work into fewer, larger kernels.";
constexpr absl::string_view kLaunchAdvice =
    "The CPU cannot issue kernels fast enough: cut per-op Python and framework "
    "overhead (torch.compile, CUDA Graphs) and keep other host work off the "
    "launching thread.";
constexpr absl::string_view kSyncAdvice =
    "Each sync drains the GPU queue: remove .item()/.cpu()/print syncs from "
    "the step or move them off the critical path (log every N steps, "
    "non_blocking copies into pinned memory); no empty_cache() in the loop.";
constexpr absl::string_view kInputAdvice =
    "The input pipeline is too slow: raise the DataLoader's num_workers, set "
    "pin_memory=True and prefetch_factor, and move decoding and augmentation "
    "out of the training process.";

}  // namespace

IdleClassifier::IdleClassifier(const Trace& trace, const LaunchIndex& launches)
    : trace_(trace), launches_(launches) {
  // The launch of a copy touching pageable memory blocks the host like a
  // sync (docs/semantics.md#cpu-event-classes, pageable copies).
  absl::flat_hash_set<CorrelationId> pageable;
  for (const GpuActivity& a : trace.gpu) {
    if (a.kind == GpuActivityKind::kMemcpy && a.pageable &&
        a.correlation != kNoCorrelation) {
      pageable.insert(a.correlation);
    }
  }
  std::vector<std::vector<Interval>> loading;
  std::vector<Interval> all_loading;
  CpuEventClassCache name_classes(trace);
  for (const CpuEvent& e : trace.cpu) {
    HostClass c = name_classes.Of(e);
    bool drains =
        c == HostClass::kSync || c == HostClass::kAllocator ||
        (e.correlation != kNoCorrelation && pageable.contains(e.correlation));
    if (!drains && c != HostClass::kDataLoading) continue;
    auto [it, inserted] =
        slot_of_thread_.try_emplace(e.thread, threads_.size());
    if (inserted) {
      threads_.emplace_back();
      loading.emplace_back();
    }
    if (drains) {
      threads_[it->second].sync_ends.push_back(e.end_ns);
      all_threads_.sync_ends.push_back(e.end_ns);
    } else {
      loading[it->second].push_back({e.start_ns, e.end_ns});
      all_loading.push_back({e.start_ns, e.end_ns});
    }
  }
  for (size_t i = 0; i < threads_.size(); ++i) {
    std::sort(threads_[i].sync_ends.begin(), threads_[i].sync_ends.end());
    threads_[i].data_loading =
        IntervalSet::FromIntervals(std::move(loading[i]));
  }
  std::sort(all_threads_.sync_ends.begin(), all_threads_.sync_ends.end());
  all_threads_.data_loading =
      IntervalSet::FromIntervals(std::move(all_loading));
}

const IdleClassifier::ThreadActivity& IdleClassifier::ActivityOf(
    uint32_t launch) const {
  // A thread without sync or data-loading events has an empty activity.
  static const ThreadActivity* const kNothing = new ThreadActivity();
  auto it = slot_of_thread_.find(trace_.cpu[launch].thread);
  return it == slot_of_thread_.end() ? *kNothing : threads_[it->second];
}

std::pair<uint32_t, uint32_t> IdleClassifier::NextKernel(
    const DeviceTimeline& timeline, const Gap& gap) const {
  uint32_t best = timeline.kernels()[gap.next_begin].index;
  uint32_t best_launch = launches_.Find(trace_.gpu[best].correlation);
  for (uint32_t p = gap.next_begin + 1; p < gap.next_end; ++p) {
    uint32_t k = timeline.kernels()[p].index;
    uint32_t l = launches_.Find(trace_.gpu[k].correlation);
    if (l == LaunchIndex::kNone) continue;
    if (best_launch == LaunchIndex::kNone ||
        trace_.cpu[l].start_ns < trace_.cpu[best_launch].start_ns) {
      best = k;
      best_launch = l;
    }
  }
  return {best, best_launch};
}

IdleBreakdown IdleClassifier::Classify(const DeviceTimeline& timeline,
                                       const IntervalSet& copies,
                                       GapLeads* leads) const {
  IdleBreakdown out;
  for (const Gap& gap : timeline.gaps()) {
    const int64_t g0 = gap.start_ns;
    const int64_t g1 = gap.end_ns;
    const int64_t copying = copies.CoveredLength(g0, g1);
    out.copy_ns += copying;
    const int64_t rest = g1 - g0 - copying;
    if (rest == 0) continue;
    if (!gap.has_next()) {
      out.unknown_ns += rest;
      continue;
    }
    auto [next, launch] = NextKernel(timeline, gap);
    const bool known = launch != LaunchIndex::kNone;
    const ThreadActivity& activity = known ? ActivityOf(launch) : all_threads_;
    const int64_t lead =
        known ? std::max<int64_t>(
                    0, trace_.gpu[next].start_ns - trace_.cpu[launch].start_ns)
              : 0;

    if (static_cast<double>(activity.data_loading.CoveredLength(g0, g1)) >=
        kInputGapCoverage * static_cast<double>(g1 - g0)) {
      out.input_ns += rest;
      continue;
    }
    // A sync that returned around the time the GPU went idle, before the
    // next launch began: the queue was empty when the host went on.
    const int64_t sync_bound =
        known ? std::min(g1, trace_.cpu[launch].start_ns) : g1;
    auto it =
        std::lower_bound(activity.sync_ends.begin(), activity.sync_ends.end(),
                         g0 - kSyncReturnSlackNs);
    if (it != activity.sync_ends.end() && *it <= sync_bound) {
      out.sync_ns += rest;
      ++out.sync_gaps;
      if (known) leads->after_sync.push_back(lead);
      continue;
    }
    if (!known) {
      out.unknown_ns += rest;
    } else if (trace_.cpu[launch].end_ns > g0 - kQueuedAheadNs) {
      out.launch_ns += rest;
      ++out.launch_gaps;
      leads->after_launch_gap.push_back(lead);
    } else {
      out.gpu_side_ns += rest;
    }
  }
  return out;
}

BoundVerdict DecideVerdict(const VerdictEvidence& evidence, int64_t kernels) {
  BoundVerdict v;
  v.evidence = evidence;
  const VerdictEvidence& e = evidence;
  if (kernels == 0) {
    v.verdict = Verdict::kUnknown;
    v.reason = "no non-empty kernels";
    return v;
  }
  if (e.utilization >= kBusyMinUtilization) {
    if (!e.lead_p50_ns || *e.lead_p50_ns >= kCpuAheadMinLeadNs) {
      v.verdict = Verdict::kGpuBound;
      v.reason =
          absl::StrCat("utilization ", Percent(e.utilization),
                       e.lead_p50_ns ? absl::StrCat(" with the CPU ",
                                                    Duration(*e.lead_p50_ns),
                                                    " ahead (launch lead p50)")
                                     : std::string(),
                       ": kernels run back to back");
      v.advice = std::string(kGpuAdvice);
    } else {
      v.verdict = Verdict::kBalanced;
      v.reason = absl::StrCat(
          "utilization ", Percent(e.utilization), " but the CPU is only ",
          Duration(*e.lead_p50_ns),
          " ahead (launch lead p50): any host slowdown will show as bubbles");
    }
    return v;
  }

  const IdleBreakdown& idle = e.idle;
  const int64_t total = idle.total_ns();
  struct Candidate {
    int64_t ns;
    Verdict verdict;
  };
  // Ties go to the earlier entry.
  const std::array<Candidate, 5> candidates = {{
      {idle.input_ns, Verdict::kInputBound},
      {idle.sync_ns, Verdict::kSyncBound},
      {idle.launch_ns, Verdict::kCpuBound},
      {idle.gpu_side_ns + idle.copy_ns, Verdict::kGpuBound},
      {idle.unknown_ns, Verdict::kUnknown},
  }};
  Candidate top = candidates[0];
  for (const Candidate& c : candidates) {
    if (c.ns > top.ns) top = c;
  }
  const double share =
      total > 0 ? static_cast<double>(top.ns) / static_cast<double>(total)
                : 0.0;
  const std::string head =
      absl::StrCat(Percent(share), " of bubble time (utilization ",
                   Percent(e.utilization), ")");
  if (total == 0 || share < kDominantIdleShare) {
    v.verdict = Verdict::kBalanced;
    auto part = [&](int64_t ns) {
      return Percent(total > 0 ? static_cast<double>(ns) / total : 0.0);
    };
    v.reason = absl::StrCat(
        "utilization ", Percent(e.utilization),
        "; no single idle class holds half of the bubble time: copy ",
        part(idle.copy_ns), ", input ", part(idle.input_ns), ", sync ",
        part(idle.sync_ns), ", launch ", part(idle.launch_ns), ", gpu-side ",
        part(idle.gpu_side_ns), ", unknown ", part(idle.unknown_ns));
    return v;
  }
  v.verdict = top.verdict;
  switch (top.verdict) {
    case Verdict::kInputBound:
      v.reason = absl::StrCat(head,
                              " the launching thread was in the "
                              "DataLoader");
      v.advice = std::string(kInputAdvice);
      break;
    case Verdict::kSyncBound:
      v.reason = absl::StrCat(
          head, " follows host syncs that drained the queue (", idle.sync_gaps,
          idle.sync_gaps == 1 ? " gap)" : " gaps)");
      if (e.post_sync_lead_p50_ns && e.lead_p50_ns) {
        absl::StrAppend(&v.reason, "; launch lead p50 after a sync ",
                        Duration(*e.post_sync_lead_p50_ns), " vs ",
                        Duration(*e.lead_p50_ns), " overall");
      }
      v.advice = std::string(kSyncAdvice);
      break;
    case Verdict::kCpuBound: {
      const bool flood = e.tiny_kernel_share >= kTinyKernelFloodShare;
      v.reason = absl::StrCat(
          head,
          " the GPU waited for kernel launches: the kernels ending "
          "those gaps started ",
          LeadText(e.post_launch_gap_lead_p50_ns),
          " after their launch (p50; all kernels ", LeadText(e.lead_p50_ns),
          ")");
      if (flood) {
        absl::StrAppend(&v.reason, "; ", Percent(e.tiny_kernel_share),
                        " of kernels are shorter than ",
                        Duration(kTinyKernelNs), ": a tiny-kernel flood");
      }
      v.advice = std::string(flood ? kFloodAdvice : kLaunchAdvice);
      break;
    }
    case Verdict::kGpuBound:
      if (idle.copy_ns > idle.gpu_side_ns) {
        v.reason = absl::StrCat(head, " the GPU was copying memory (",
                                Percent(static_cast<double>(idle.copy_ns) /
                                        static_cast<double>(total)),
                                " memcpy/memset)");
        if (e.lead_p50_ns) {
          absl::StrAppend(&v.reason, " while the CPU was ",
                          Duration(*e.lead_p50_ns), " ahead (launch lead p50)");
        }
        v.advice = std::string(kCopyAdvice);
      } else {
        v.reason = absl::StrCat(
            head,
            " kernels were queued in time but waited on the GPU (stream/event "
            "dependencies, communication, copies); launch lead p50 ",
            LeadText(e.lead_p50_ns));
        v.advice = std::string(kGpuAdvice);
      }
      break;
    default:
      v.reason =
          absl::StrCat(head, " has no launch call in the trace to explain it");
      break;
  }
  return v;
}

}  // namespace bubblewatch
