#include "analysis/bubble_analyzer.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "analysis/device_timeline.h"
#include "analysis/host_activity_index.h"
#include "analysis/launch_index.h"
#include "analysis/window_accumulator.h"
#include "base/option_problems.h"

namespace bubblewatch {
namespace {

constexpr uint32_t kNoLaunch = LaunchIndex::kNone;
constexpr uint32_t kNoKernel = UINT32_MAX;

struct DeviceInput {
  int32_t device = 0;
  std::vector<KernelSlot> kernels;
  std::vector<Interval> copies;
  std::vector<uint32_t> copy_indices;  // Trace::gpu indices, for blame.
  int64_t zero_length_kernels = 0;
};

KernelRef MakeKernelRef(const Trace& trace, uint32_t gpu_index) {
  const GpuActivity& k = trace.gpu[gpu_index];
  return KernelRef{std::string(trace.names[k.name]), k.start_ns, k.end_ns,
                   k.stream};
}

// Everything attribution of one gap needs; see AttributeGap.
struct GapContext {
  int64_t g0;
  int64_t g1;
  uint32_t next_kernel;  // Trace::gpu index of N, or kNoKernel.
  uint32_t launch;       // Trace::cpu index of N's launch, or kNoLaunch.
  HostActivityIndex::Scope scope;
  bool gpu_dependency;  // The launch started before the gap.
  int64_t host_end;     // Host-side time is [g0, host_end).
  BubbleCause uncovered_cause;
};

// Splits the whole analysis into its stages; one instance per AnalyzeTrace.
class Analyzer {
 public:
  // times_checked: CheckEventTimes(trace) is known to be OK.
  // kernel_sets: null, or where each device's DeviceKernelSets go.
  Analyzer(const Trace& trace, const AnalyzerOptions& options,
           bool times_checked,
           std::vector<DeviceKernelSets>* kernel_sets = nullptr)
      : trace_(trace),
        options_(options),
        times_checked_(times_checked),
        kernel_sets_(kernel_sets) {}

  absl::StatusOr<Analysis> Run();

 private:
  absl::Status PartitionAndValidate();
  uint32_t LaunchOf(uint32_t gpu_index) const;
  GapContext MakeGapContext(const DeviceTimeline& timeline,
                            const Gap& gap) const;
  // What host-side time no CPU event explains is attributed to.
  BubbleCause UncoveredCause(const GapContext& ctx) const;
  // kInvalidArgument if the window length is out of range or the kernels
  // span more than options_.max_windows windows.
  absl::Status CheckWindowCount() const;
  // Calls sink(cause, window_start_ns, ns) for every part of [lo, hi) ∩ gap,
  // split at window boundaries when windows are on.
  template <typename Sink>
  void AttributeGap(const GapContext& ctx, const IntervalSet& copies,
                    int64_t lo, int64_t hi, Sink&& sink) const;
  template <typename Fn>
  void ForEachWindowPiece(int64_t a, int64_t b, Fn&& fn) const;
  BubbleReport MakeBubbleReport(const DeviceInput& input,
                                const DeviceTimeline& timeline,
                                const IntervalSet& copies, const Gap& gap,
                                int64_t lo, int64_t hi) const;
  std::string Blame(const DeviceInput& input, const GapContext& ctx,
                    BubbleCause cause, int64_t lo, int64_t hi) const;
  // The breakdown intervals of `device`, by start, with their outside and
  // (until the gaps are subtracted) busy time set from the device's span.
  std::vector<uint32_t> StartBreakdowns(
      int32_t device, const DeviceTimeline& timeline,
      std::vector<IntervalBreakdown>& out) const;

  // The union of the collective and of the other kernels of `timeline`.
  DeviceKernelSets SplitKernels(int32_t device, const DeviceTimeline& timeline);

  const Trace& trace_;
  const AnalyzerOptions& options_;
  const bool times_checked_;
  std::vector<DeviceKernelSets>* const kernel_sets_;
  // Per name: whether it is a collective kernel's (-1: not known yet).
  std::vector<int8_t> is_collective_;
  std::vector<DeviceInput> devices_;
  absl::flat_hash_set<CorrelationId> pageable_;
  std::optional<LaunchIndex> launches_;
  std::optional<HostActivityIndex> host_;
};

absl::Status Analyzer::PartitionAndValidate() {
  if (!times_checked_) {
    if (absl::Status s = CheckEventTimes(trace_); !s.ok()) return s;
  }
  if (absl::Status s = CheckWindowCount(); !s.ok()) return s;
  absl::flat_hash_map<int32_t, size_t> slot_of_device;
  // Count first so each device's vectors are allocated once.
  absl::flat_hash_map<int32_t, size_t> kernels_of_device;
  {
    int32_t run_device = 0;
    size_t run = 0;
    for (const GpuActivity& a : trace_.gpu) {
      if (a.kind != GpuActivityKind::kKernel) continue;
      if (run > 0 && a.device != run_device) {
        kernels_of_device[run_device] += run;
        run = 0;
      }
      run_device = a.device;
      ++run;
    }
    if (run > 0) kernels_of_device[run_device] += run;
  }
  // Activities come in runs of one device; skip the hash lookup within a run.
  // A plain pointer and size: the appends below would otherwise make the
  // compiler reload them for every activity.
  const GpuActivity* const gpu = trace_.gpu.data();
  const size_t n = trace_.gpu.size();
  int32_t last_device = 0;
  DeviceInput* device = nullptr;
  for (size_t i = 0; i < n; ++i) {
    const GpuActivity& a = gpu[i];
    if (device == nullptr || a.device != last_device) {
      auto [it, inserted] =
          slot_of_device.try_emplace(a.device, devices_.size());
      if (inserted) {
        devices_.push_back(DeviceInput{.device = a.device});
        devices_.back().kernels.reserve(kernels_of_device[a.device]);
      }
      last_device = a.device;
      device = &devices_[it->second];
    }
    DeviceInput& d = *device;
    if (a.kind == GpuActivityKind::kKernel) {
      if (a.end_ns == a.start_ns) {
        ++d.zero_length_kernels;
      } else {
        d.kernels.push_back(
            {a.start_ns, a.end_ns, static_cast<uint32_t>(i), kNoLaunch});
      }
    } else {
      d.copies.push_back({a.start_ns, a.end_ns});
      d.copy_indices.push_back(static_cast<uint32_t>(i));
      if (a.pageable && a.kind == GpuActivityKind::kMemcpy &&
          a.correlation != kNoCorrelation) {
        pageable_.insert(a.correlation);
      }
    }
  }
  std::sort(devices_.begin(), devices_.end(),
            [](const DeviceInput& a, const DeviceInput& b) {
              return a.device < b.device;
            });
  return absl::OkStatus();
}

absl::Status Analyzer::CheckWindowCount() const {
  const int64_t w = options_.window_ns;
  if (w < 0 || w > kMaxWindowNs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "window length ", w, " ns is not within 0 and ", kMaxWindowNs, " ns"));
  }
  if (w == 0 || options_.max_windows <= 0) return absl::OkStatus();
  // Windows exist from the first kernel's start to the last kernel's end (or
  // open_until_ns); times are accepted ones, so nothing below overflows.
  std::optional<EventNs> first, last;  // None: no kernel.
  for (const GpuActivity& a : trace_.gpu) {
    if (a.kind != GpuActivityKind::kKernel || a.end_ns == a.start_ns) continue;
    LowerTo(first, a.start_ns);
    RaiseTo(last, a.end_ns);
  }
  if (!first) return absl::OkStatus();
  const EventNs lo = *first;
  const EventNs hi = *LaterOf(last, options_.open_until_ns);
  const int64_t windows =
      (WindowStartOf(hi - 1, w) - WindowStartOf(lo, w)) / w + 1;
  if (windows <= options_.max_windows) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the kernels span ", windows, " windows of ",
      absl::FormatDuration(absl::Nanoseconds(w)), " (from ", lo, " to ", hi,
      " ns), more than the ", options_.max_windows,
      " one analysis may hold; a far-off timestamp, or a longer window"));
}

uint32_t Analyzer::LaunchOf(uint32_t gpu_index) const {
  return launches_->Find(trace_.gpu[gpu_index].correlation);
}

GapContext Analyzer::MakeGapContext(const DeviceTimeline& timeline,
                                    const Gap& gap) const {
  GapContext ctx{};
  ctx.g0 = gap.start_ns;
  ctx.g1 = gap.end_ns;
  ctx.next_kernel = kNoKernel;
  ctx.launch = kNoLaunch;
  if (!gap.has_next()) {
    // A trailing gap: no next kernel, so host-side time on all threads.
    ctx.scope = HostActivityIndex::kAllThreads;
    ctx.gpu_dependency = false;
    ctx.host_end = ctx.g1;
    ctx.uncovered_cause = UncoveredCause(ctx);
    return ctx;
  }
  // Choose N among the kernels starting at g1 (see the header).
  uint32_t best = timeline.kernels()[gap.next_begin].index;
  uint32_t best_launch = timeline.kernels()[gap.next_begin].launch;
  for (uint32_t p = gap.next_begin + 1; p < gap.next_end; ++p) {
    uint32_t k = timeline.kernels()[p].index;
    uint32_t launch = timeline.kernels()[p].launch;
    auto key = [&](uint32_t kernel, uint32_t l) {
      const GpuActivity& a = trace_.gpu[kernel];
      return std::make_tuple(l == kNoLaunch ? 1 : 0,
                             l == kNoLaunch ? 0 : trace_.cpu[l].start_ns,
                             trace_.names[a.name], a.stream);
    };
    if (key(k, launch) < key(best, best_launch)) {
      best = k;
      best_launch = launch;
    }
  }
  ctx.next_kernel = best;
  ctx.launch = best_launch;
  if (best_launch != kNoLaunch) {
    int64_t ls = trace_.cpu[best_launch].start_ns;
    ctx.scope = host_->ThreadOf(best_launch);
    ctx.gpu_dependency = ls < ctx.g0;
    ctx.host_end = std::clamp(ls, ctx.g0, ctx.g1);
  } else {
    ctx.scope = HostActivityIndex::kAllThreads;
    ctx.gpu_dependency = false;
    ctx.host_end = ctx.g1;
  }
  ctx.uncovered_cause = UncoveredCause(ctx);
  return ctx;
}

BubbleCause Analyzer::UncoveredCause(const GapContext& ctx) const {
  if (!host_->has_cpu_events()) return BubbleCause::kUnattributed;
  if (host_->SyncOverlaps(ctx.scope, ctx.g0, ctx.host_end)) {
    return BubbleCause::kHostSync;
  }
  return BubbleCause::kHostCompute;
}

template <typename Fn>
void Analyzer::ForEachWindowPiece(int64_t a, int64_t b, Fn&& fn) const {
  if (a >= b) return;
  if (options_.window_ns <= 0) {
    fn(int64_t{0}, a, b);
    return;
  }
  int64_t w = WindowStartOf(a, options_.window_ns);
  while (a < b) {
    int64_t piece_end = std::min(b, w + options_.window_ns);
    fn(w, a, piece_end);
    a = piece_end;
    w += options_.window_ns;
  }
}

template <typename Sink>
void Analyzer::AttributeGap(const GapContext& ctx, const IntervalSet& copies,
                            int64_t lo, int64_t hi, Sink&& sink) const {
  lo = std::max(lo, ctx.g0);
  hi = std::min(hi, ctx.g1);
  auto rest = [&](int64_t a, int64_t b) {
    ForEachWindowPiece(a, b, [&](int64_t w, int64_t x, int64_t y) {
      if (ctx.gpu_dependency) {
        sink(BubbleCause::kGpuDependency, w, y - x);
        return;
      }
      int64_t launch_from = std::max(x, ctx.host_end);
      if (launch_from < y) {
        sink(BubbleCause::kLaunchOverhead, w, y - launch_from);
      }
      int64_t host_to = std::min(y, ctx.host_end);
      if (x >= host_to) return;
      if (!host_->has_cpu_events()) {
        sink(BubbleCause::kUnattributed, w, host_to - x);
        return;
      }
      Attribution covered{};
      int64_t uncovered = host_->Attribute(ctx.scope, x, host_to, covered);
      for (BubbleCause c : kAllBubbleCauses) {
        int64_t ns = covered[static_cast<int>(c)];
        if (ns > 0) sink(c, w, ns);
      }
      if (uncovered > 0) sink(ctx.uncovered_cause, w, uncovered);
    });
  };
  int64_t cursor = lo;
  copies.ForEachCovered(lo, hi, [&](int64_t s, int64_t e) {
    rest(cursor, s);
    ForEachWindowPiece(s, e, [&](int64_t w, int64_t x, int64_t y) {
      sink(BubbleCause::kMemcpy, w, y - x);
    });
    cursor = e;
  });
  rest(cursor, hi);
}

std::string Analyzer::Blame(const DeviceInput& input, const GapContext& ctx,
                            BubbleCause cause, int64_t lo, int64_t hi) const {
  switch (cause) {
    case BubbleCause::kMemcpy: {
      // The copy overlapping the gap the most.
      int64_t best_overlap = 0;
      std::string best;
      for (size_t i = 0; i < input.copies.size(); ++i) {
        int64_t overlap = std::min(hi, input.copies[i].end) -
                          std::max(lo, input.copies[i].start);
        if (overlap > best_overlap) {
          best_overlap = overlap;
          best = trace_.names[trace_.gpu[input.copy_indices[i]].name];
        }
      }
      return best;
    }
    case BubbleCause::kGpuDependency:
      return ctx.launch == kNoLaunch
                 ? ""
                 : std::string(trace_.names[trace_.cpu[ctx.launch].name]);
    case BubbleCause::kUnattributed:
      return "";
    default:
      break;
  }
  HostClass host_class = HostClass::kContext;
  switch (cause) {
    case BubbleCause::kHostSync:
      host_class = HostClass::kSync;
      break;
    case BubbleCause::kAllocator:
      host_class = HostClass::kAllocator;
      break;
    case BubbleCause::kDataLoading:
      host_class = HostClass::kDataLoading;
      break;
    case BubbleCause::kLaunchOverhead:
      if (ctx.launch != kNoLaunch && ctx.host_end < hi) {
        return std::string(trace_.names[trace_.cpu[ctx.launch].name]);
      }
      host_class = HostClass::kLaunch;
      break;
    default: {
      // host_compute: the framework op that was running, never a range
      // around the whole bubble (docs/semantics.md#reports).
      std::optional<size_t> op = host_->FindBlamedHostCompute(
          ctx.scope, lo, std::min(hi, ctx.host_end), lo, hi);
      return op ? std::string(trace_.names[trace_.cpu[*op].name]) : "";
    }
  }
  std::optional<size_t> blamed =
      host_->FindBlamed(ctx.scope, host_class, lo, std::min(hi, ctx.host_end));
  return blamed ? std::string(trace_.names[trace_.cpu[*blamed].name]) : "";
}

BubbleReport Analyzer::MakeBubbleReport(const DeviceInput& input,
                                        const DeviceTimeline& timeline,
                                        const IntervalSet& copies,
                                        const Gap& gap, int64_t lo,
                                        int64_t hi) const {
  GapContext ctx = MakeGapContext(timeline, gap);
  BubbleReport r;
  r.device = input.device;
  r.start_ns = lo;
  r.end_ns = hi;
  r.before = MakeKernelRef(trace_, gap.culprit);
  if (ctx.next_kernel != kNoKernel) {
    r.after = MakeKernelRef(trace_, ctx.next_kernel);
  }
  AttributeGap(ctx, copies, lo, hi, [&](BubbleCause c, int64_t, int64_t ns) {
    r.attribution[static_cast<int>(c)] += ns;
  });
  r.cause = DominantCause(r.attribution).value_or(BubbleCause::kUnattributed);
  r.blamed = Blame(input, ctx, r.cause, lo, hi);
  return r;
}

DeviceKernelSets Analyzer::SplitKernels(int32_t device,
                                        const DeviceTimeline& timeline) {
  if (is_collective_.empty()) is_collective_.assign(trace_.names.size(), -1);
  // The kernels come by start, so each union is merged as it is collected:
  // the open interval of each kind is kept aside and appended when the
  // next kernel of its kind starts after it.
  std::vector<Interval> sets[2];  // [0]: compute, [1]: collective.
  // At most one interval per kernel: capacity never written costs address
  // space only, while growing by doubling copies and touches twice.
  for (std::vector<Interval>& set : sets) {
    set.reserve(timeline.kernels().size());
  }
  std::optional<Interval> open[2];  // None: no kernel of the kind yet.
  for (const KernelSlot& k : timeline.kernels()) {
    const NameId name = trace_.gpu[k.index].name;
    int8_t& known = is_collective_[name];
    if (known < 0) known = IsCollectiveKernelName(trace_.Name(name)) ? 1 : 0;
    std::optional<Interval>& run = open[known];
    if (run && k.start_ns <= run->end) {
      run->end = std::max(run->end, k.end_ns);
      continue;
    }
    if (run) sets[known].push_back(*run);
    run = Interval{k.start_ns, k.end_ns};
  }
  for (int kind = 0; kind < 2; ++kind) {
    if (open[kind]) sets[kind].push_back(*open[kind]);
  }
  return DeviceKernelSets{
      .device = device,
      .compute = IntervalSet::FromMerged(std::move(sets[0])),
      .collective = IntervalSet::FromMerged(std::move(sets[1]))};
}

std::vector<uint32_t> Analyzer::StartBreakdowns(
    int32_t device, const DeviceTimeline& timeline,
    std::vector<IntervalBreakdown>& out) const {
  std::vector<uint32_t> mine;
  const absl::Span<const DeviceInterval> queries = options_.breakdown_intervals;
  for (uint32_t i = 0; i < queries.size(); ++i) {
    if (queries[i].device == device &&
        queries[i].end_ns > queries[i].start_ns) {
      mine.push_back(i);
    }
  }
  if (mine.empty() || timeline.busy().empty()) return {};
  const int64_t span_start = timeline.busy().front().start;
  int64_t span_end = timeline.busy().back().end;
  if (!timeline.gaps().empty()) {
    span_end = std::max(span_end, timeline.gaps().back().end_ns);
  }
  for (uint32_t i : mine) {
    const DeviceInterval& q = queries[i];
    const int64_t inside = std::max<int64_t>(
        0, std::min(q.end_ns, span_end) - std::max(q.start_ns, span_start));
    out[i].outside_ns = (q.end_ns - q.start_ns) - inside;
    out[i].busy_ns = inside;  // Gap time is taken off as gaps come.
  }
  // Callers usually give them in time order already. Among equal starts the
  // order does not matter: each interval's breakdown is its own.
  auto by_start = [&](uint32_t a, uint32_t b) {
    return queries[a].start_ns < queries[b].start_ns;
  };
  if (!std::is_sorted(mine.begin(), mine.end(), by_start)) {
    std::sort(mine.begin(), mine.end(), by_start);
  }
  return mine;
}

absl::StatusOr<Analysis> Analyzer::Run() {
  if (absl::Status s = PartitionAndValidate(); !s.ok()) return s;
  launches_.emplace(trace_);
  host_.emplace(trace_, pageable_);

  Analysis out;
  out.cpu_events = static_cast<int64_t>(trace_.cpu.size());
  out.breakdowns.resize(options_.breakdown_intervals.size());
  for (size_t i = 0; i < out.breakdowns.size(); ++i) {
    const DeviceInterval& q = options_.breakdown_intervals[i];
    // Until its device says otherwise, all of it lies outside any span.
    out.breakdowns[i].outside_ns = std::max<int64_t>(0, q.end_ns - q.start_ns);
  }
  WindowAccumulator windows(options_.window_ns);

  // One bubble: an observed piece [start, start + length) of a gap (the
  // whole gap when all time is observed).
  struct GapRef {
    int64_t length;
    int64_t start;
    int32_t device;
    size_t device_slot;
    size_t gap;
  };
  auto longer = [](const GapRef& a, const GapRef& b) {
    return LongerBubble(a.length, a.start, a.device, b.length, b.start,
                        b.device);
  };
  // A heap of the longest gaps seen so far; its front is the shortest kept.
  const size_t top = static_cast<size_t>(std::max(0, options_.top_bubbles));
  std::vector<GapRef> top_gaps;
  top_gaps.reserve(top + 1);
  std::vector<DeviceTimeline> timelines;
  std::vector<IntervalSet> copy_sets;
  timelines.reserve(devices_.size());
  copy_sets.reserve(devices_.size());
  std::vector<KernelSlot> sort_buffer;  // Shared by the devices' sorts.

  for (size_t slot = 0; slot < devices_.size(); ++slot) {
    DeviceInput& input = devices_[slot];
    DeviceAnalysis d;
    d.device = input.device;
    d.kernels =
        static_cast<int64_t>(input.kernels.size()) + input.zero_length_kernels;
    d.zero_length_kernels = input.zero_length_kernels;
    d.copies = static_cast<int64_t>(input.copies.size());
    int64_t with_launch = 0;  // A local: no store to `d` per kernel.
    for (KernelSlot& k : input.kernels) {
      k.launch = LaunchOf(k.index);
      with_launch += k.launch != kNoLaunch ? 1 : 0;
    }
    d.kernels_with_launch = with_launch;
    timelines.emplace_back(std::move(input.kernels), trace_,
                           options_.open_until_ns, &sort_buffer);
    copy_sets.push_back(IntervalSet::FromIntervals(input.copies));
    const DeviceTimeline& timeline = timelines.back();
    const IntervalSet& copies = copy_sets.back();
    if (kernel_sets_ != nullptr) {
      kernel_sets_->push_back(SplitKernels(input.device, timeline));
    }

    UtilizationStats& s = d.stats;
    if (!timeline.busy().empty()) {
      d.first_kernel_start_ns = timeline.busy().front().start;
      d.last_kernel_end_ns = timeline.busy().back().end;
      // A trailing gap (open_until_ns) extends the span past the last kernel.
      int64_t span_end = d.last_kernel_end_ns;
      if (!timeline.gaps().empty()) {
        span_end = std::max(span_end, timeline.gaps().back().end_ns);
      }
      s.span_ns = span_end - d.first_kernel_start_ns;
      s.compute_ns = timeline.compute_ns();
      s.bubble_ns = s.span_ns - s.compute_ns;
    }
    // With unobserved time, the span is the busy time and the observed
    // bubble pieces (added as the gaps are cut below), not first to last.
    if (options_.observed != nullptr) {
      s.span_ns = s.compute_ns;
      s.bubble_ns = 0;
    }
    if (windows.enabled()) {
      for (const KernelSlot& k : timeline.kernels()) {
        windows.CountKernel(input.device, k.start_ns);
      }
      for (const Interval& b : timeline.busy()) {
        ForEachWindowPiece(b.start, b.end,
                           [&](int64_t w, int64_t x, int64_t y) {
                             windows.AddBusy(input.device, w, y - x);
                           });
      }
    }
    // Breakdown intervals are swept along with the gaps, so that each gap's
    // context is made once.
    const std::vector<uint32_t> queries =
        StartBreakdowns(input.device, timeline, out.breakdowns);
    size_t next_query = 0;
    std::vector<uint32_t> active_queries;
    std::vector<Interval> pieces;
    for (size_t g = 0; g < timeline.gaps().size(); ++g) {
      const Gap& gap = timeline.gaps()[g];
      // The gap's observed pieces are its bubbles; the rest was seen by
      // nobody (docs/semantics.md#observations).
      pieces.clear();
      if (options_.observed == nullptr) {
        pieces.push_back({gap.start_ns, gap.end_ns});
      } else {
        options_.observed->ForEachCovered(gap.start_ns, gap.end_ns,
                                          [&](int64_t a, int64_t b) {
                                            pieces.push_back({a, b});
                                          });
        for (const Interval& p : pieces) {
          s.span_ns += p.end - p.start;
          s.bubble_ns += p.end - p.start;
        }
      }
      const bool whole_gap = pieces.size() == 1 &&
                             pieces[0].start == gap.start_ns &&
                             pieces[0].end == gap.end_ns;
      // Made only for a gap with a bubble: one wholly unobserved costs no
      // lookups (a duty cycle's minute between snapshots).
      GapContext ctx{};
      if (!pieces.empty()) ctx = MakeGapContext(timeline, gap);
      Attribution gap_attribution{};
      for (const Interval& p : pieces) {
        AttributeGap(ctx, copies, p.start, p.end,
                     [&](BubbleCause c, int64_t w, int64_t ns) {
                       gap_attribution[static_cast<int>(c)] += ns;
                       if (windows.enabled()) {
                         windows.AddBubbleCause(input.device, w, c, ns);
                       }
                     });
      }
      for (int c = 0; c < kNumBubbleCauses; ++c) {
        s.attribution[c] += gap_attribution[c];
      }
      if (options_.keep_gaps) {
        out.gaps.push_back({.device = input.device,
                            .start_ns = gap.start_ns,
                            .end_ns = gap.end_ns,
                            .attribution = gap_attribution});
      }
      if (!queries.empty()) {
        const absl::Span<const DeviceInterval> q = options_.breakdown_intervals;
        while (next_query < queries.size() &&
               q[queries[next_query]].start_ns < gap.end_ns) {
          active_queries.push_back(queries[next_query++]);
        }
        std::erase_if(active_queries,
                      [&](uint32_t i) { return q[i].end_ns <= gap.start_ns; });
        for (uint32_t i : active_queries) {
          const int64_t lo = std::max(q[i].start_ns, gap.start_ns);
          const int64_t hi = std::min(q[i].end_ns, gap.end_ns);
          if (lo >= hi) continue;
          IntervalBreakdown& b = out.breakdowns[i];
          b.busy_ns -= hi - lo;
          if (lo == gap.start_ns && hi == gap.end_ns && whole_gap) {
            // The whole gap: its attribution is already known.
            for (int c = 0; c < kNumBubbleCauses; ++c) {
              b.bubble[c] += gap_attribution[c];
            }
            continue;
          }
          // Unobserved time of the interval is outside any span.
          b.outside_ns += hi - lo;
          for (const Interval& p : pieces) {
            const int64_t x = std::max(lo, p.start);
            const int64_t y = std::min(hi, p.end);
            if (x >= y) continue;
            b.outside_ns -= y - x;
            AttributeGap(ctx, copies, x, y,
                         [&](BubbleCause c, int64_t, int64_t ns) {
                           b.bubble[static_cast<int>(c)] += ns;
                         });
          }
        }
      }
      for (const Interval& p : pieces) {
        const int64_t length = p.end - p.start;
        if (length > s.largest_bubble_ns) {
          s.largest_bubble_ns = length;
          s.largest_bubble_start_ns = p.start;
          s.culprit_before_bubble = MakeKernelRef(trace_, gap.culprit);
        }
        GapRef ref{length, p.start, input.device, slot, g};
        if (top_gaps.size() < top ||
            (top > 0 && longer(ref, top_gaps.front()))) {
          top_gaps.push_back(ref);
          std::push_heap(top_gaps.begin(), top_gaps.end(), longer);
          if (top_gaps.size() > top) {
            std::pop_heap(top_gaps.begin(), top_gaps.end(), longer);
            top_gaps.pop_back();
          }
        }
        if (windows.enabled()) {
          ForEachWindowPiece(
              p.start, p.end, [&](int64_t w, int64_t x, int64_t y) {
                windows.AddGapPart(input.device, w, x, y, slot, g);
              });
        }
      }
    }
    out.kernels += d.kernels;
    out.copies += d.copies;
    out.kernels_with_launch += d.kernels_with_launch;
    out.devices.push_back(std::move(d));
  }

  // Job level: sums over devices; the largest bubble over devices.
  bool any_kernel = false;
  for (const DeviceAnalysis& d : out.devices) {
    AddDeviceStats(d.stats, out.job);
    if (d.stats.span_ns > 0 || d.last_kernel_end_ns > d.first_kernel_start_ns) {
      if (!any_kernel || d.first_kernel_start_ns < out.first_kernel_start_ns)
        out.first_kernel_start_ns = d.first_kernel_start_ns;
      if (!any_kernel || d.last_kernel_end_ns > out.last_kernel_end_ns)
        out.last_kernel_end_ns = d.last_kernel_end_ns;
      any_kernel = true;
    }
  }

  // Top bubbles of the whole trace.
  std::sort_heap(top_gaps.begin(), top_gaps.end(), longer);
  for (const GapRef& ref : top_gaps) {
    const Gap& gap = timelines[ref.device_slot].gaps()[ref.gap];
    out.top_bubbles.push_back(MakeBubbleReport(
        devices_[ref.device_slot], timelines[ref.device_slot],
        copy_sets[ref.device_slot], gap, ref.start, ref.start + ref.length));
  }

  if (windows.enabled()) {
    out.windows = windows.Finish(
        [&](size_t slot, size_t g) {
          return MakeKernelRef(trace_, timelines[slot].gaps()[g].culprit);
        },
        [&](size_t slot, size_t g, int64_t lo, int64_t hi) {
          return MakeBubbleReport(devices_[slot], timelines[slot],
                                  copy_sets[slot], timelines[slot].gaps()[g],
                                  lo, hi);
        },
        options_.top_bubbles_per_window);
  }
  return out;
}

}  // namespace

absl::Status AnalyzerOptions::Validate() const {
  const bool window_ok = window_ns >= 0 && window_ns <= kMaxWindowNs;
  // The processor analyzes every window: no strings unless something is
  // wrong.
  if (top_bubbles >= 0 && window_ok && top_bubbles_per_window >= 0 &&
      max_windows >= 0) {
    return absl::OkStatus();
  }
  OptionProblems p("AnalyzerOptions");
  p.Check(top_bubbles >= 0, "top_bubbles",
          absl::StrCat("must be >= 0, not ", top_bubbles));
  p.Check(window_ok, "window_ns",
          absl::StrCat("must be within 0 and ", kMaxWindowNs, " ns, not ",
                       window_ns));
  p.Check(top_bubbles_per_window >= 0, "top_bubbles_per_window",
          absl::StrCat("must be >= 0, not ", top_bubbles_per_window));
  p.Check(max_windows >= 0, "max_windows",
          absl::StrCat("must be >= 0 (0: no cap), not ", max_windows));
  return p.ToStatus();
}

absl::StatusOr<Analysis> AnalyzeTrace(const Trace& trace,
                                      const AnalyzerOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  return Analyzer(trace, options, /*times_checked=*/false).Run();
}

absl::StatusOr<Analysis> AnalyzeCheckedTrace(
    const Trace& trace, const AnalyzerOptions& options,
    std::vector<DeviceKernelSets>* kernel_sets) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (kernel_sets != nullptr) kernel_sets->clear();
  return Analyzer(trace, options, /*times_checked=*/true, kernel_sets).Run();
}

}  // namespace bubblewatch
