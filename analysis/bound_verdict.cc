#include "analysis/bound_verdict.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "analysis/cpu_event_classifier.h"
#include "schemas/bubble_cause.h"

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
// What to do about the copies of each kind (CopyKind order): overlap them
// with compute, batch them into fewer larger ones, or avoid them.
constexpr std::array<absl::string_view, kNumCopyKinds> kCopyAdvice = {
    // h2d_pageable
    "Host-to-device copies from pageable memory: pin the source "
    "(DataLoader pin_memory=True, tensor.pin_memory()) so that "
    "non_blocking=True copies on a side stream overlap compute; batch small "
    "copies into one larger one; avoid the copy where the data can stay on "
    "the GPU or be created there.",
    // h2d_pinned
    "Host-to-device copies, already from pinned memory: overlap them with "
    "compute (non_blocking=True on a side stream, prefetch the next batch "
    "while this one runs); batch small copies into one larger one; avoid the "
    "copy where the data can stay on the GPU or be created there.",
    // d2h_pageable
    "Device-to-host copies into pageable memory block the host: copy into a "
    "preallocated pinned buffer with non_blocking=True and synchronize only "
    "when the values are needed; fetch results less often and in one larger "
    "copy; avoid the copy (keep metrics on the GPU, log every N steps).",
    // d2h_pinned
    "Device-to-host copies into pinned memory: overlap them with compute on "
    "a side stream and synchronize only when the values are needed; fetch "
    "results less often and in one larger copy; avoid the copy (keep metrics "
    "on the GPU, log every N steps).",
    // d2d
    "Device-to-device copies: avoid them (views instead of "
    ".contiguous()/.clone(), in-place ops, no dtype or layout round trips); "
    "batch small ones; overlap peer copies with compute on a side stream.",
    // memset
    "Memsets: avoid zero-filling what is overwritten anyway (torch.empty "
    "instead of torch.zeros, zero_grad(set_to_none=True)); batch small ones.",
    // other
    "Copies keep the GPU from computing: overlap them with compute on a side "
    "stream, batch small copies into fewer larger ones, or avoid them.",
};

std::string Bytes(double bytes) {
  if (bytes < 1024.0) return absl::StrFormat("%.0f B", bytes);
  if (bytes < 1024.0 * 1024.0) return absl::StrFormat("%.1f KiB", bytes / 1024);
  return absl::StrFormat("%.1f MiB", bytes / (1024.0 * 1024.0));
}

// Appends to `reason` the copy kinds holding at least 5% of the bubbles'
// copy time ("; copies in bubbles: h2d_pinned 97% (466 copies, mean 2.0
// MiB)") and sets `advice` to the dominant kind's.
void AppendCopyFigures(const CopyKindBreakdown& copies, std::string* reason,
                       std::string* advice) {
  int64_t total = 0;
  int top = static_cast<int>(CopyKind::kOther);
  int64_t top_ns = 0;
  for (int k = 0; k < kNumCopyKinds; ++k) {
    total += copies[k].bubble_ns;
    if (copies[k].bubble_ns > top_ns) {
      top = k;
      top_ns = copies[k].bubble_ns;
    }
  }
  *advice = std::string(kCopyAdvice[top]);
  if (total == 0) return;
  std::array<int, kNumCopyKinds> order;
  for (int k = 0; k < kNumCopyKinds; ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return copies[a].bubble_ns > copies[b].bubble_ns;
  });
  std::string parts;
  for (int k : order) {
    const CopyKindFigures& f = copies[k];
    const double share =
        static_cast<double>(f.bubble_ns) / static_cast<double>(total);
    if (f.bubble_ns == 0 || share < 0.05) continue;
    absl::StrAppend(&parts, parts.empty() ? "" : ", ",
                    CopyKindName(static_cast<CopyKind>(k)), " ", Percent(share),
                    " (", f.count, f.count == 1 ? " copy" : " copies");
    if (f.bytes > 0) {
      absl::StrAppend(
          &parts, ", mean ",
          Bytes(static_cast<double>(f.bytes) / static_cast<double>(f.count)));
    }
    absl::StrAppend(&parts, ")");
  }
  absl::StrAppend(reason, "; copies in bubbles: ", parts);
}

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

void IdleClassifier::Classify(const DeviceTimeline& timeline,
                              const IntervalSet& copies,
                              GapLeads* leads) const {
  for (const Gap& gap : timeline.gaps()) {
    const int64_t g0 = gap.start_ns;
    const int64_t g1 = gap.end_ns;
    if (copies.CoveredLength(g0, g1) == g1 - g0) continue;
    if (!gap.has_next()) continue;
    auto [next, launch] = NextKernel(timeline, gap);
    const bool known = launch != LaunchIndex::kNone;
    const ThreadActivity& activity = known ? ActivityOf(launch) : all_threads_;
    const int64_t lead =
        known ? std::max<int64_t>(
                    0, trace_.gpu[next].start_ns - trace_.cpu[launch].start_ns)
              : 0;

    if (static_cast<double>(activity.data_loading.CoveredLength(g0, g1)) >=
        kInputGapCoverage * static_cast<double>(g1 - g0)) {
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
      ++leads->sync_gaps;
      if (known) leads->after_sync.push_back(lead);
      continue;
    }
    if (known && trace_.cpu[launch].end_ns > g0 - kQueuedAheadNs) {
      ++leads->launch_gaps;
      leads->after_launch_gap.push_back(lead);
    }
  }
}

IdleBreakdown GroupAttribution(const Attribution& a,
                               const IdleClassifier::GapLeads& leads) {
  auto at = [&a](BubbleCause c) { return a[static_cast<int>(c)]; };
  IdleBreakdown idle;
  idle.copy_ns = at(BubbleCause::kMemcpy);
  idle.input_ns = at(BubbleCause::kDataLoading);
  idle.sync_ns = at(BubbleCause::kHostSync) + at(BubbleCause::kAllocator);
  idle.launch_ns =
      at(BubbleCause::kLaunchOverhead) + at(BubbleCause::kHostCompute);
  idle.gpu_side_ns = at(BubbleCause::kGpuDependency);
  idle.unknown_ns = at(BubbleCause::kUnattributed);
  idle.sync_gaps = leads.sync_gaps;
  idle.launch_gaps = leads.launch_gaps;
  return idle;
}

CopyKindBreakdown CopiesInBubbles(const Trace& trace,
                                  const DeviceTimeline& timeline,
                                  const std::vector<uint32_t>& copies) {
  CopyKindBreakdown out{};
  const std::vector<Gap>& gaps = timeline.gaps();
  for (uint32_t i : copies) {
    const GpuActivity& a = trace.gpu[i];
    // The first gap ending after the copy starts.
    auto it =
        std::upper_bound(gaps.begin(), gaps.end(), a.start_ns,
                         [](int64_t t, const Gap& g) { return t < g.end_ns; });
    int64_t covered = 0;
    for (; it != gaps.end() && it->start_ns < a.end_ns; ++it) {
      covered +=
          std::min(a.end_ns, it->end_ns) - std::max(a.start_ns, it->start_ns);
    }
    if (covered <= 0) continue;
    CopyKindFigures& f = out[static_cast<int>(
        ClassifyCopy(a.kind, trace.Name(a.name), a.pageable))];
    f.bubble_ns += covered;
    ++f.count;
    f.bytes += a.bytes;
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
    std::vector<BubbleCause> causes;  // The attribution causes it groups.
  };
  // Ties go to the earlier entry.
  const std::array<Candidate, 6> candidates = {{
      {idle.input_ns, Verdict::kInputBound, {BubbleCause::kDataLoading}},
      {idle.sync_ns,
       Verdict::kSyncBound,
       {BubbleCause::kHostSync, BubbleCause::kAllocator}},
      {idle.launch_ns,
       Verdict::kCpuBound,
       {BubbleCause::kHostCompute, BubbleCause::kLaunchOverhead}},
      {idle.copy_ns, Verdict::kCopyBound, {BubbleCause::kMemcpy}},
      {idle.gpu_side_ns, Verdict::kGpuBound, {BubbleCause::kGpuDependency}},
      {idle.unknown_ns, Verdict::kUnknown, {BubbleCause::kUnattributed}},
  }};
  const Candidate* top = &candidates[0];
  for (const Candidate& c : candidates) {
    if (c.ns > top->ns) top = &c;
  }
  auto share_of = [total](int64_t ns) {
    return total > 0 ? static_cast<double>(ns) / static_cast<double>(total)
                     : 0.0;
  };
  // "host_compute 91% + launch_overhead 6%": the causes with time, largest
  // first (ties in list order).
  auto causes_text = [&](std::vector<BubbleCause> causes,
                         absl::string_view separator) {
    std::stable_sort(causes.begin(), causes.end(),
                     [&](BubbleCause a, BubbleCause b) {
                       return e.attribution[static_cast<int>(a)] >
                              e.attribution[static_cast<int>(b)];
                     });
    std::string out;
    for (BubbleCause c : causes) {
      const int64_t ns = e.attribution[static_cast<int>(c)];
      if (ns == 0) continue;
      absl::StrAppend(&out, out.empty() ? "" : separator, BubbleCauseName(c),
                      " ", Percent(share_of(ns)));
    }
    return out;
  };
  const double share = share_of(top->ns);
  if (total == 0 || share < kDominantIdleShare) {
    v.verdict = Verdict::kBalanced;
    std::vector<BubbleCause> all;
    for (int c = 0; c < kNumBubbleCauses; ++c) {
      all.push_back(static_cast<BubbleCause>(c));
    }
    v.reason = absl::StrCat("utilization ", Percent(e.utilization),
                            "; no idle class holds half of the bubble time: ",
                            total > 0 ? causes_text(all, ", ") : "no bubbles");
    return v;
  }
  const std::string head = absl::StrCat(
      Percent(share), " of bubble time (utilization ", Percent(e.utilization),
      ") is ", causes_text(top->causes, " + "), ":");
  v.verdict = top->verdict;
  switch (top->verdict) {
    case Verdict::kInputBound:
      v.reason = absl::StrCat(head,
                              " the launching thread was in the "
                              "DataLoader");
      v.advice = std::string(kInputAdvice);
      break;
    case Verdict::kSyncBound:
      v.reason = absl::StrCat(
          head, " the host waited for the GPU to drain (", idle.sync_gaps,
          idle.sync_gaps == 1 ? " gap" : " gaps", " after a sync)");
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
          " the GPU waited while the CPU ran its own work and issued the "
          "next kernel; kernels ending launch gaps started ",
          LeadText(e.post_launch_gap_lead_p50_ns),
          " after their launch (p50; all kernels ", LeadText(e.lead_p50_ns),
          ")");
      if (flood) {
        absl::StrAppend(&v.reason, "; ", Percent(e.tiny_kernel_share),
                        " of kernels are shorter than ",
                        Duration(kTinyKernelNs), ": a tiny-kernel flood");
      }
      v.advice = std::string(flood ? kFloodAdvice : kLaunchAdvice);
      // Host work shows as bubbles only when the queue is empty: if most of
      // these gaps followed a sync that drained it, the sync is what to
      // remove first.
      if (idle.sync_gaps > 0 && idle.sync_gaps >= idle.launch_gaps) {
        absl::StrAppend(&v.reason, "; ", idle.sync_gaps,
                        idle.sync_gaps == 1 ? " gap" : " gaps",
                        " followed a sync that drained the queue");
        if (e.post_sync_lead_p50_ns && e.lead_p50_ns) {
          absl::StrAppend(&v.reason, " (launch lead p50 after a sync ",
                          Duration(*e.post_sync_lead_p50_ns), " vs ",
                          Duration(*e.lead_p50_ns), " overall)");
        }
        v.advice = absl::StrCat(kSyncAdvice, " ", v.advice);
      }
      break;
    }
    case Verdict::kCopyBound:
      v.reason = absl::StrCat(head, " the GPU was copying, not computing");
      AppendCopyFigures(e.copies, &v.reason, &v.advice);
      break;
    case Verdict::kGpuBound:
      v.reason = absl::StrCat(
          head,
          " kernels were queued in time but waited on the GPU (stream/event "
          "dependencies, communication); launch lead p50 ",
          LeadText(e.lead_p50_ns));
      v.advice = std::string(kGpuAdvice);
      break;
    default:
      v.reason =
          absl::StrCat(head, " the trace has no CPU events to explain it");
      break;
  }
  return v;
}

}  // namespace bubblewatch
