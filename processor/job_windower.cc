#include "processor/job_windower.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "analysis/bubble_analyzer.h"
#include "analysis/collective_windows.h"
#include "analysis/rank_digest.h"
#include "analysis/window_accumulator.h"
#include "base/check.h"

namespace bubblewatch {

JobWindower::JobWindower(std::string job, const WindowerOptions& options)
    : job_(std::move(job)), options_(options), names_(&trace_) {
  trace_.job = job_;
}

void JobWindower::SplitAs(std::string job, std::string host) {
  split_ = true;
  split_job_ = std::move(job);
  split_host_ = std::move(host);
  // The digests name the job as the other hosts' do: stage 2 refuses
  // digests of different jobs.
  trace_.job = split_job_;
}

void JobWindower::RestoreFinalizedThrough(
    std::optional<EventNs> finalized_through_ns) {
  finalized_through_ns_ = finalized_through_ns;
}

void JobWindower::RestartIdleTimers(absl::Time now) {
  last_activity_ = std::max(last_activity_, now);
  for (auto& [host, clock] : hosts_) {
    clock.last_seen = std::max(clock.last_seen, now);
  }
}

JobWindower::RankIds JobWindower::RankIdsOf(const BatchHeader& header) {
  RankIds ids;
  if (header.rank < 0 || (header.world_size <= 1 && header.rank == 0)) {
    return ids;
  }
  ids.ranked = true;
  ids.rank = header.rank;
  ids.one_gpu = header.world_size > 1;
  ids.tag = (static_cast<uint64_t>(header.rank) + 1) << 48;
  return ids;
}

void JobWindower::RankIds::Apply(GpuActivity& a) const {
  if (!ranked) return;
  if (one_gpu) a.device = rank;
  if (a.correlation != kNoCorrelation) a.correlation ^= tag;
}

void JobWindower::RankIds::Apply(CpuEvent& e) const {
  if (!ranked) return;
  if (e.correlation != kNoCorrelation) e.correlation ^= tag;
  e.thread ^= tag;
}

void JobWindower::RankIds::Apply(CollectiveKernel& c) const {
  if (ranked && one_gpu) c.device = rank;
}

void JobWindower::ApplyRankIds(const BatchHeader& header, Trace& trace) {
  const RankIds ids = RankIdsOf(header);
  for (GpuActivity& a : trace.gpu) ids.Apply(a);
  for (CpuEvent& e : trace.cpu) ids.Apply(e);
  for (CollectiveKernel& c : trace.collectives) ids.Apply(c);
}

int64_t JobWindower::Add(const DecodedBatch& batch, KafkaOffset offset,
                         bool replay, absl::Time now) {
  const Trace& in = batch.trace;
  std::vector<NameId> remap(in.names.size());
  for (size_t i = 0; i < in.names.size(); ++i) {
    remap[i] = names_.Intern(in.names[i]);
  }
  HostClock& clock =
      hosts_[absl::StrCat(batch.header.host, "/", batch.header.rank)];
  if (clock.host.empty()) clock.host = batch.header.host;
  clock.last_seen = now;
  last_activity_ = now;
  const uint32_t source = SourceOf(batch.header);
  const RankIds ids = RankIdsOf(batch.header);
  if (const std::optional<ObservationInfo>& o = batch.header.observation) {
    observations_[o->id] = KnownObservation{
        .start_ns = o->start_ns, .end_ns = o->end_ns, .last_offset = offset};
  } else if (!in.gpu.empty() || !in.cpu.empty()) {
    RaiseTo(legacy_offset_, offset);
  }
  if (trace_.rank < 0) trace_.rank = batch.header.rank;
  if (trace_.world_size < 0) trace_.world_size = batch.header.world_size;
  // An event entirely inside finalized windows no longer counts in any
  // window: it is counted late (once: not again on replay). It is still
  // buffered, and Evict keeps it exactly when it would keep it had it come
  // in time (a device's last kernel starts the next gap and is its
  // culprit). A replay cannot tell which events were late the first time,
  // so late and timely events must be kept by the same rule for a restarted
  // processor to buffer what an uninterrupted one does (docs/semantics.md,
  // "Effectively once"). Dropping them here lost the start of a gap that
  // crossed a window start after a restart.
  int64_t late = 0;
  // A split windower's late counts of this batch, by window start: they go
  // to stage 2 in a kLate part (ordered: its bytes do not depend on hash
  // order).
  std::map<WindowStartNs, HostWindowPart::Late> batch_late;
  // Whether the batch brought anything behind the finalized edge.
  bool behind_edge = false;
  auto note_edge = [&](EventNs start_ns, EventNs end_ns, bool may_be_late) {
    if (!finalized_through_ns_ || end_ns > *finalized_through_ns_) return;
    behind_edge = true;
    if (replay || !may_be_late) return;
    ++late;
    const WindowStartNs window = WindowStartOf(start_ns, options_.window_ns);
    ++late_[window];
    if (split_) ++batch_late[window].events;
  };
  for (const GpuActivity& a : in.gpu) {
    RaiseTo(clock.max_start_ns, a.start_ns);
    note_edge(a.start_ns, a.end_ns, /*may_be_late=*/true);
    NoteOpen(a.start_ns, a.end_ns);
    RaiseTo(buffered_max_end_ns_, a.end_ns);
    GpuActivity copy = a;
    copy.name = remap[a.name];
    ids.Apply(copy);
    trace_.gpu.push_back(copy);
    gpu_offset_.push_back(offset);
    gpu_source_.push_back(source);
  }
  for (const CpuEvent& e : in.cpu) {
    RaiseTo(clock.max_start_ns, e.start_ns);
    // A launch may precede the finalized edge yet explain a gap after it.
    note_edge(e.start_ns, e.end_ns, e.correlation == kNoCorrelation);
    NoteOpen(e.start_ns, e.end_ns);
    RaiseTo(buffered_max_end_ns_, e.end_ns);
    CpuEvent copy = e;
    copy.name = remap[e.name];
    ids.Apply(copy);
    trace_.cpu.push_back(copy);
    cpu_offset_.push_back(offset);
    cpu_source_.push_back(source);
  }
  auto optional_name = [&remap](NameId id) {
    return id == kNoName ? id : remap[id];
  };
  for (const CollectiveKernel& c : in.collectives) {
    // Its window's analysis has run without it: counted, never used
    // (docs/semantics.md#streaming-collectives).
    if (!replay && finalized_through_ns_ &&
        c.start_ns < *finalized_through_ns_) {
      const WindowStartNs window =
          WindowStartOf(c.start_ns, options_.window_ns);
      ++late_collectives_[window];
      if (split_) ++batch_late[window].collectives;
    }
    CollectiveKernel copy = c;
    copy.kernel_name = remap[c.kernel_name];
    copy.collective = optional_name(c.collective);
    copy.process_group = optional_name(c.process_group);
    copy.group_ranks = optional_name(c.group_ranks);
    copy.dtype = optional_name(c.dtype);
    ids.Apply(copy);
    RaiseTo(buffered_max_end_ns_, c.end_ns);
    collectives_.push_back(copy);
    collective_offset_.push_back(offset);
    collective_source_.push_back(source);
  }
  if (!in.gpu.empty() || !in.cpu.empty() || !in.collectives.empty()) {
    LowerTo(lowest_offset_, offset);
  }
  // Stage 2 adds them to the merged windows (docs/semantics.md#split-jobs),
  // once per batch: the batch's offset tells a republished copy.
  if (!batch_late.empty()) {
    HostWindowPart part{.job = split_job_, .host = split_host_};
    part.kind = HostWindowPart::Kind::kLate;
    part.window.start_ns = batch_late.begin()->first;
    part.window.end_ns = part.window.start_ns + options_.window_ns;
    part.late_offset = offset;
    for (auto& [window, counts] : batch_late) {
      counts.window_start_ns = window;
      part.late.push_back(counts);
    }
    parts_.push_back(std::move(part));
  }
  // Between finalizations nothing else evicts: what a replayed or late
  // batch brought behind the edge goes now, by the rule that applies to all.
  if (finalized_through_ns_ && (replay || behind_edge)) Evict();
  return late;
}

std::optional<EventNs> JobWindower::WatermarkNs(
    absl::Time now, absl::Duration host_idle) const {
  std::optional<EventNs> watermark;
  for (const auto& [host, clock] : hosts_) {
    if (!clock.max_start_ns) continue;
    if (now - clock.last_seen > host_idle) continue;
    LowerTo(watermark, *clock.max_start_ns - options_.lateness_ns);
  }
  return watermark;
}

void JobWindower::NoteOpen(EventNs start_ns, EventNs end_ns) {
  if (finalized_through_ns_ && end_ns <= *finalized_through_ns_) return;
  LowerTo(open_min_start_ns_, start_ns);
  RaiseTo(open_max_end_ns_, end_ns);
}

int64_t JobWindower::OpenWindowsWith(const DecodedBatch& batch) const {
  const std::optional<EventNs> edge = finalized_through_ns_;
  // The open range [lo, hi), meaningful while `open`. (Plain values and a
  // flag rather than two optionals: GCC's -Wmaybe-uninitialized misreads
  // optionals updated in a lambda.)
  bool open = open_min_start_ns_.has_value() && open_max_end_ns_.has_value();
  EventNs lo = open_min_start_ns_.value_or(0);
  EventNs hi = open_max_end_ns_.value_or(0);
  // A new observation after the buffered data closes them first
  // (docs/semantics.md#observations): only its own windows will be open.
  if (const std::optional<ObservationInfo>& o = batch.header.observation) {
    const std::optional<EventNs> data_end = BufferedDataWindowEndNs();
    if (data_end && o->start_ns >= *data_end) open = false;
  }
  auto note = [&](EventNs start_ns, EventNs end_ns) {
    if (edge && end_ns <= *edge) return;  // Late: not kept.
    lo = open ? std::min(lo, start_ns) : start_ns;
    hi = open ? std::max(hi, end_ns) : end_ns;
    open = true;
  };
  for (const GpuActivity& a : batch.trace.gpu) note(a.start_ns, a.end_ns);
  for (const CpuEvent& e : batch.trace.cpu) note(e.start_ns, e.end_ns);
  if (!open) return 0;
  if (edge) lo = std::max(lo, *edge);
  if (hi <= lo) return 0;
  const int64_t w = options_.window_ns;
  // Window indexes in int128: hostile times near the int64 limits must not
  // overflow (the batch validator bounds them, this does not rely on it).
  const __int128 first = WindowStartOf(lo, w) / w;
  const __int128 last = WindowStartOf(hi - 1, w) / w;
  const __int128 n = last - first + 1;
  return n > INT64_MAX ? INT64_MAX : static_cast<int64_t>(n);
}

std::optional<EventNs> JobWindower::BufferedDataWindowEndNs() const {
  if (!buffered_max_end_ns_) return std::nullopt;
  // A zero-length event at a window start still belongs to that window.
  return WindowStartOf(*buffered_max_end_ns_, options_.window_ns) +
         options_.window_ns;
}

int64_t JobWindower::HostSkewNs(absl::Time now, absl::Duration host_idle,
                                std::string* ahead, std::string* behind) const {
  // Newest start per host name (ranks of one host share its clock).
  absl::flat_hash_map<absl::string_view, EventNs> newest;
  for (const auto& [key, clock] : hosts_) {
    if (!clock.max_start_ns) continue;
    if (now - clock.last_seen > host_idle) continue;
    auto [it, inserted] = newest.try_emplace(clock.host, *clock.max_start_ns);
    if (!inserted) it->second = std::max(it->second, *clock.max_start_ns);
  }
  if (newest.size() < 2) return 0;
  auto [lo, hi] = std::minmax_element(
      newest.begin(), newest.end(), [](const auto& a, const auto& b) {
        // Ties by name, so the hosts named do not depend on hash order.
        return std::pair(a.second, a.first) < std::pair(b.second, b.first);
      });
  if (ahead != nullptr) *ahead = std::string(hi->first);
  if (behind != nullptr) *behind = std::string(lo->first);
  return hi->second - lo->second;
}

std::vector<WindowSummary> JobWindower::FinalizeReady(
    absl::Time now, absl::Duration host_idle) {
  const std::optional<EventNs> watermark = WatermarkNs(now, host_idle);
  if (!watermark) return {};
  const EventNs target_end = WindowStartOf(*watermark, options_.window_ns);
  if (finalized_through_ns_ && target_end <= *finalized_through_ns_) return {};
  last_skew_ns_ = HostSkewNs(now, host_idle);
  return Finalize(target_end, /*open_until_ns=*/target_end,
                  WindowSummary::ClosedBy::kWatermark);
}

std::vector<WindowSummary> JobWindower::FinalizeAll(
    WindowSummary::ClosedBy closed_by, bool replay) {
  // Windows closed here end at their devices' last kernels; the
  // watermark's hold them open to the edge (FinalizeReady), so it is never
  // the reason here.
  BW_DCHECK(closed_by != WindowSummary::ClosedBy::kWatermark);
  // The host's stream ends here: its end marker, or its idle timeout (an
  // observation or a full buffer only cuts the stream).
  const bool ends = closed_by == WindowSummary::ClosedBy::kEndMarker ||
                    closed_by == WindowSummary::ClosedBy::kIdleTimeout;
  std::optional<EventNs> last_end;
  for (const GpuActivity& a : trace_.gpu) RaiseTo(last_end, a.end_ns);
  std::vector<WindowSummary> out;
  const size_t parts_before = parts_.size();
  if (last_end) {
    const EventNs target_end =
        WindowStartOf(*last_end - 1, options_.window_ns) + options_.window_ns;
    if (!finalized_through_ns_ || target_end > *finalized_through_ns_) {
      out = Finalize(target_end, /*open_until_ns=*/std::nullopt, closed_by);
    }
  }
  if (!split_ || !ends || !analysis_error_.ok()) return out;
  // Its last window's part says so; when the watermark had closed every
  // window already, a kEnd part of the last finalized window does (a
  // function of the edge: a replay sends the same bytes).
  bool made_window = false;
  for (size_t i = parts_before; i < parts_.size(); ++i) {
    made_window |= parts_[i].kind == HostWindowPart::Kind::kWindow;
  }
  if (made_window) {
    for (size_t i = parts_.size(); i-- > parts_before;) {
      if (parts_[i].kind == HostWindowPart::Kind::kWindow) {
        parts_[i].last = true;
        break;
      }
    }
  } else if (finalized_through_ns_ && !replay) {
    HostWindowPart end{.job = split_job_, .host = split_host_};
    end.kind = HostWindowPart::Kind::kEnd;
    end.window.start_ns = *finalized_through_ns_ - options_.window_ns;
    end.window.end_ns = *finalized_through_ns_;
    end.last = true;
    parts_.push_back(std::move(end));
  }
  return out;
}

std::vector<WindowSummary> JobWindower::Finalize(
    EventNs target_end_ns, std::optional<EventNs> open_until_ns,
    WindowSummary::ClosedBy closed_by) {
  // Both callers finalize only past the edge, at a window boundary: the
  // edge is stored and only ever moves forward.
  BW_CHECK(!finalized_through_ns_ || target_end_ns > *finalized_through_ns_);
  BW_CHECK(WindowStartOf(target_end_ns, options_.window_ns) == target_end_ns);
  std::vector<WindowSummary> out;
  AnalyzerOptions options;
  options.top_bubbles = 0;
  options.window_ns = options_.window_ns;
  // The processor caps open windows per job (partition_limits.h); a buffer
  // may still reach far back for a device's last kernel.
  options.max_windows = 0;
  options.top_bubbles_per_window = options_.top_bubbles_per_window;
  // The analyzer's own default is its "none".
  if (open_until_ns) options.open_until_ns = *open_until_ns;
  // The observed time cuts the gaps (docs/semantics.md#observations): what
  // lies between two observations analyzed together is no bubble. The same
  // known observations as observed_ns, forgotten first, so that a replay
  // from the resume offset cuts the same gaps.
  ForgetOldObservations();
  const std::optional<IntervalSet> observed = ObservedSet();
  if (observed) options.observed = &*observed;
  absl::StatusOr<Analysis> analysis = AnalyzeTrace(trace_, options);
  // Batches were validated on arrival; an error here is a bug, and its
  // windows must not vanish (docs/semantics.md#no-silent-loss): the edge
  // stays where it was, the failure is counted and kept for the owner,
  // which stops before anything past these windows is committed.
  if (!analysis.ok()) {
    ++analysis_failures_;
    const std::string from = !finalized_through_ns_
                                 ? std::string("its first event")
                                 : absl::StrCat(*finalized_through_ns_, " ns");
    if (!analysis_error_.ok()) return out;  // The first one tells.
    analysis_error_ = absl::Status(
        analysis.status().code(),
        absl::StrCat("job ", job_, ": the analysis of its windows from ", from,
                     " to ", target_end_ns,
                     " ns failed, nothing past them is committed: ",
                     analysis.status().message()));
    return out;
  }
  {  // The windows of a successful analysis.
    // A split windower's parts carry the newest start of its buffered
    // events (the host's skew, docs/semantics.md#split-jobs): what a replay
    // from ResumeOffset() buffers again, unlike the host clocks.
    std::optional<EventNs> newest_start;
    if (split_) {
      for (const GpuActivity& a : trace_.gpu) RaiseTo(newest_start, a.start_ns);
      for (const CpuEvent& e : trace_.cpu) RaiseTo(newest_start, e.start_ns);
    }
    for (WindowAnalysis& w : analysis->windows) {
      // What is stored is keyed by aligned window starts (storage/).
      BW_CHECK(WindowStartOf(w.start_ns, options_.window_ns) == w.start_ns &&
               w.end_ns - w.start_ns == options_.window_ns);
      if (w.end_ns > target_end_ns) break;
      if (finalized_through_ns_ && w.start_ns < *finalized_through_ns_) {
        continue;
      }
      if (split_) {
        parts_.push_back(MakePart(std::move(w), observed, newest_start));
        continue;
      }
      WindowSummary summary;
      summary.job = job_;
      summary.closed_by = closed_by;
      summary.host_skew_ns = last_skew_ns_;
      if (observed) {
        summary.observed_ns = observed->CoveredLength(w.start_ns, w.end_ns);
      }
      for (const GpuActivity& a : trace_.gpu) {
        if (a.start_ns >= w.start_ns && a.start_ns < w.end_ns)
          ++summary.gpu_events;
      }
      for (const CpuEvent& e : trace_.cpu) {
        if (e.start_ns >= w.start_ns && e.start_ns < w.end_ns)
          ++summary.cpu_events;
      }
      if (!collectives_.empty()) {
        summary.collectives = AnalyzeCollectivesOf(w.start_ns, w.end_ns);
      }
      summary.window = std::move(w);
      out.push_back(std::move(summary));
    }
  }
  finalized_through_ns_ = target_end_ns;
  Evict();
  return out;
}

void JobWindower::ForgetOldObservations() {
  // Nothing buffered: every batch known lies below where a replay starts.
  const std::optional<KafkaOffset> resume = ResumeOffset();
  absl::erase_if(observations_, [resume](const auto& kv) {
    return !resume || kv.second.last_offset < *resume;
  });
  if (legacy_offset_ && (!resume || *legacy_offset_ < *resume)) {
    legacy_offset_.reset();
  }
}

std::optional<IntervalSet> JobWindower::ObservedSet() const {
  if (legacy_offset_ || observations_.empty()) {
    return std::nullopt;
  }
  std::vector<Interval> intervals;
  intervals.reserve(observations_.size());
  for (const auto& [id, o] : observations_) {
    intervals.push_back({o.start_ns, o.end_ns});
  }
  // Sorted first: the set does not depend on the hash map's order.
  return IntervalSet::FromIntervals(std::move(intervals));
}

void JobWindower::Evict() {
  if (!finalized_through_ns_) return;
  const EventNs edge = *finalized_through_ns_;
  // The open range is recomputed over what ends after the new edge.
  open_min_start_ns_.reset();
  open_max_end_ns_.reset();
  buffered_max_end_ns_.reset();
  lowest_offset_.reset();
  const EventNs cutoff = edge - options_.lateness_ns;
  const EventNs launch_cutoff = edge - options_.max_launch_lead_ns;
  // Each device keeps its kernels with the latest end at or before the edge:
  // they start the device's gap across the edge and are its culprit, however
  // long ago they ended. Only kernels up to the edge count, so that what is
  // kept does not depend on which later kernels have arrived yet: a replay
  // evicts after every batch, the live run only when the edge moves or
  // events come in behind it, and both must keep the same kernels (with the
  // latest end over all kernels, a kernel [2, 3] s was kept live but
  // evicted by a replay that had already re-read its device's next kernel at
  // 16 s, and the gap [10, 16) s was lost after a restart).
  absl::flat_hash_map<int32_t, int64_t> last_end_of_device;
  for (const GpuActivity& a : trace_.gpu) {
    if (a.kind != GpuActivityKind::kKernel || a.end_ns == a.start_ns ||
        a.end_ns > edge) {
      continue;
    }
    auto [it, inserted] = last_end_of_device.try_emplace(a.device, a.end_ns);
    if (!inserted) it->second = std::max(it->second, a.end_ns);
  }
  size_t out = 0;
  for (size_t i = 0; i < trace_.gpu.size(); ++i) {
    const GpuActivity& a = trace_.gpu[i];
    bool keep = a.end_ns >= cutoff;
    if (!keep && a.kind == GpuActivityKind::kKernel && a.end_ns > a.start_ns) {
      auto last = last_end_of_device.find(a.device);
      keep = last != last_end_of_device.end() && last->second == a.end_ns;
    }
    if (!keep) continue;
    NoteOpen(a.start_ns, a.end_ns);
    RaiseTo(buffered_max_end_ns_, a.end_ns);
    trace_.gpu[out] = a;
    LowerTo(lowest_offset_, gpu_offset_[i]);
    gpu_offset_[out] = gpu_offset_[i];
    gpu_source_[out] = gpu_source_[i];
    ++out;
  }
  trace_.gpu.resize(out);
  gpu_offset_.resize(out);
  gpu_source_.resize(out);
  out = 0;
  for (size_t i = 0; i < trace_.cpu.size(); ++i) {
    const CpuEvent& e = trace_.cpu[i];
    // Launch calls stay while their kernel may still start after the edge:
    // up to max_launch_lead_ns. By the edge alone, not by whether their
    // kernel is buffered: a replay re-reads a launch before its kernel and
    // evicts after every batch, the live run had the kernel by the time the
    // edge passed the launch, and the two must keep the same launches (with
    // "kept while its kernel is kept", a launch 11 s ahead of its kernel
    // survived live but not a restart, and the gap before the kernel went
    // from gpu_dependency to host_sync).
    bool keep = e.end_ns >= cutoff || (e.correlation != kNoCorrelation &&
                                       e.start_ns >= launch_cutoff);
    if (!keep) continue;
    NoteOpen(e.start_ns, e.end_ns);
    RaiseTo(buffered_max_end_ns_, e.end_ns);
    trace_.cpu[out] = e;
    LowerTo(lowest_offset_, cpu_offset_[i]);
    cpu_offset_[out] = cpu_offset_[i];
    cpu_source_[out] = cpu_source_[i];
    ++out;
  }
  trace_.cpu.resize(out);
  cpu_offset_.resize(out);
  cpu_source_.resize(out);
  // Collective records by the lateness rule of events (without the
  // last-kernel exception: a window still open needs only the records that
  // start in it, and they end after the edge).
  out = 0;
  for (size_t i = 0; i < collectives_.size(); ++i) {
    if (collectives_[i].end_ns < cutoff) continue;
    RaiseTo(buffered_max_end_ns_, collectives_[i].end_ns);
    collectives_[out] = collectives_[i];
    LowerTo(lowest_offset_, collective_offset_[i]);
    collective_offset_[out] = collective_offset_[i];
    collective_source_[out] = collective_source_[i];
    ++out;
  }
  collectives_.resize(out);
  collective_offset_.resize(out);
  collective_source_.resize(out);
}

uint32_t JobWindower::SourceOf(const BatchHeader& header) {
  auto [it, inserted] = source_ids_.try_emplace(
      std::pair(header.host, header.rank), sources_.size());
  if (inserted) {
    sources_.emplace_back(header.host, header.rank);
    source_pids_.push_back(-1);
  }
  if (header.pid >= 0) source_pids_[it->second] = header.pid;
  return it->second;
}

std::optional<WindowCollectives> JobWindower::AnalyzeCollectivesOf(
    int64_t start_ns, int64_t end_ns) {
  auto inside = [&](int64_t t) { return t >= start_ns && t < end_ns; };
  // Without a collective record in the window nothing else is cut.
  if (std::none_of(
          collectives_.begin(), collectives_.end(),
          [&](const CollectiveKernel& c) { return inside(c.start_ns); })) {
    return std::nullopt;
  }
  std::vector<std::string> labels;
  const std::vector<Trace> present = WindowTraces(start_ns, end_ns, &labels);
  absl::StatusOr<std::optional<WindowCollectives>> result =
      AnalyzeWindowCollectives(present, labels, WindowCollectiveOptions(),
                               /*timeline_window_start_ns=*/start_ns);
  if (!result.ok()) {
    ++collective_errors_;
    ++untaken_collective_errors_;
    last_collective_error_ = std::string(result.status().message());
    return std::nullopt;
  }
  return *std::move(result);
}

std::vector<Trace> JobWindower::WindowTraces(
    EventNs start_ns, EventNs end_ns, std::vector<std::string>* labels) const {
  auto inside = [&](int64_t t) { return t >= start_ns && t < end_ns; };
  std::vector<uint32_t> order(sources_.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return std::tie(sources_[a].second, sources_[a].first) <
           std::tie(sources_[b].second, sources_[b].first);
  });
  std::vector<Trace> traces(sources_.size());
  std::vector<bool> used(sources_.size(), false);
  for (size_t i = 0; i < trace_.gpu.size(); ++i) {
    if (!inside(trace_.gpu[i].start_ns)) continue;
    traces[gpu_source_[i]].gpu.push_back(trace_.gpu[i]);
    used[gpu_source_[i]] = true;
  }
  for (size_t i = 0; i < trace_.cpu.size(); ++i) {
    if (!inside(trace_.cpu[i].start_ns)) continue;
    traces[cpu_source_[i]].cpu.push_back(trace_.cpu[i]);
    used[cpu_source_[i]] = true;
  }
  for (size_t i = 0; i < collectives_.size(); ++i) {
    if (!inside(collectives_[i].start_ns)) continue;
    traces[collective_source_[i]].collectives.push_back(collectives_[i]);
    used[collective_source_[i]] = true;
  }
  std::vector<Trace> present;
  for (uint32_t source : order) {
    if (!used[source]) continue;
    Trace& t = traces[source];
    t.names = trace_.names;
    t.job = trace_.job;
    t.host = sources_[source].first;
    t.rank = sources_[source].second;
    t.pid = source_pids_[source];
    t.world_size = trace_.world_size;
    labels->push_back(
        absl::StrCat(sources_[source].first, "/", sources_[source].second));
    present.push_back(std::move(t));
  }
  return present;
}

HostWindowPart JobWindower::MakePart(WindowAnalysis w,
                                     const std::optional<IntervalSet>& observed,
                                     std::optional<EventNs> newest_start_ns) {
  HostWindowPart part{.job = split_job_, .host = split_host_};
  part.newest_start_ns = newest_start_ns;
  for (const GpuActivity& a : trace_.gpu) {
    if (a.start_ns >= w.start_ns && a.start_ns < w.end_ns) ++part.gpu_events;
  }
  for (const CpuEvent& e : trace_.cpu) {
    if (e.start_ns >= w.start_ns && e.start_ns < w.end_ns) ++part.cpu_events;
  }
  part.observed = observed;
  // Every rank with events in the window, collectives or not: stage 2's
  // analysis counts the job's ranks as the single stage's does (a rank
  // without collective kernels is still one of them).
  std::vector<std::string> labels;
  const std::vector<Trace> traces = WindowTraces(w.start_ns, w.end_ns, &labels);
  const std::vector<RankInput> ranks = RanksOfTraces(traces, labels);
  AnalyzerOptions analyzer;
  analyzer.top_bubbles = 0;
  // DigestTrace analyzes a trace once for all of its ranks (a host's export
  // may hold several): ranks of one trace are consecutive.
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i + 1;
    while (j < ranks.size() && ranks[j].trace == ranks[i].trace) ++j;
    const absl::Status s = DigestRanksInto(
        absl::MakeConstSpan(ranks).subspan(i, j - i), analyzer, part);
    if (!s.ok()) {
      // As a window whose collective analysis refused its ranks: counted,
      // and the part goes without this trace's digests.
      ++collective_errors_;
      ++untaken_collective_errors_;
      last_collective_error_ = std::string(s.message());
    }
    i = j;
  }
  part.world_size = trace_.world_size;
  // The ranks of the sources with buffered events: what a replay from
  // ResumeOffset() buffers again (a source only known from batches below
  // it would be missing there), so a republished part has the same bytes.
  // The buffer keeps each device's last kernel, so a rank that went quiet
  // stays in it.
  std::vector<bool> buffered(sources_.size(), false);
  for (uint32_t source : gpu_source_) buffered[source] = true;
  for (uint32_t source : cpu_source_) buffered[source] = true;
  for (uint32_t source : collective_source_) buffered[source] = true;
  for (size_t i = 0; i < sources_.size(); ++i) {
    if (buffered[i] && sources_[i].second >= 0) {
      part.ranks.push_back(sources_[i].second);
    }
  }
  std::sort(part.ranks.begin(), part.ranks.end());
  part.ranks.erase(std::unique(part.ranks.begin(), part.ranks.end()),
                   part.ranks.end());
  part.window = std::move(w);
  return part;
}

absl::flat_hash_map<WindowStartNs, int64_t> JobWindower::TakeLateCounts() {
  absl::flat_hash_map<WindowStartNs, int64_t> out;
  out.swap(late_);
  return out;
}

int64_t JobWindower::TakeCollectiveErrors(std::string* last_reason) {
  const int64_t n = untaken_collective_errors_;
  untaken_collective_errors_ = 0;
  if (last_reason != nullptr) *last_reason = last_collective_error_;
  return n;
}

absl::flat_hash_map<WindowStartNs, int64_t>
JobWindower::TakeLateCollectiveCounts() {
  absl::flat_hash_map<WindowStartNs, int64_t> out;
  out.swap(late_collectives_);
  return out;
}

std::optional<KafkaOffset> JobWindower::ResumeOffset() const {
  BW_DCHECK(lowest_offset_ == LowestOffsetScanned());
  return lowest_offset_;
}

std::optional<KafkaOffset> JobWindower::LowestOffsetScanned() const {
  std::optional<KafkaOffset> lowest;
  for (KafkaOffset o : collective_offset_) LowerTo(lowest, o);
  for (KafkaOffset o : gpu_offset_) LowerTo(lowest, o);
  for (KafkaOffset o : cpu_offset_) LowerTo(lowest, o);
  return lowest;
}

}  // namespace bubblewatch
