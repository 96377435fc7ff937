// JobWindower turns one job's stream of event batches into finalized
// event-time windows (docs/semantics.md#streaming).
//
// Design. The windower buffers the job's recent events and, when the job's
// watermark passes the end of open windows, runs the bubble analyzer over the
// buffer and keeps the windows that just became final. Re-analyzing the
// buffer (about one window plus the lateness of events) costs each event a
// couple of analyses, and it makes the streaming result equal the offline
// `analyze --window` oracle by construction: same code, same events, as long
// as every gap is shorter than the lateness (then every gap's next kernel has
// arrived when its window closes). A longer gap is closed with what has
// arrived: a trailing gap attributed without its next kernel.
//
// Watermark: per host, the latest event start seen minus the allowed
// lateness (starts, not ends: producers send events in start order, and a
// long CPU range would otherwise vouch for events not sent yet);
// the job's watermark is the minimum over hosts that sent something within
// `host_idle` of wall time, so one host's clock or silence neither rushes nor
// stalls the others for long.
//
// Late events (ending at or before the finalized edge) are counted per
// window (not again on replay) and then kept or evicted by the same rule as
// every other buffered event (see Add), so the buffer never depends on
// which events came late.
//
// Effectively once: everything the windower keeps is a deterministic
// function of the events of batches at or after ResumeOffset() and of
// finalized_through_ns(); a processor that stores both atomically with the
// windows can crash anywhere, replay from ResumeOffset() and reach the same
// state.
//
// Collectives (docs/semantics.md#streaming-collectives): the windower also
// buffers the batches' collective records and remembers which (host, rank)
// sent each event. When a window closes and at least two ranks ran
// collective kernels in it, each rank's events that start in the window are
// analyzed by AnalyzeWindowCollectives (analysis/collective_windows.h) and
// the result is stored in the window; jobs without collective records pay
// nothing. A collective record that starts in a finalized window arrives
// too late for its instance to be matched: it is counted
// (TakeLateCollectiveCounts, the window's late_collectives), not used.
//
// Thread safety: none; one owner.
#ifndef BUBBLEWATCH_PROCESSOR_JOB_WINDOWER_H_
#define BUBBLEWATCH_PROCESSOR_JOB_WINDOWER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "analysis/interval_set.h"
#include "analysis/window_merge.h"
#include "base/option_problems.h"
#include "schemas/event_batch_codec.h"
#include "schemas/time_types.h"
#include "schemas/trace.h"
#include "schemas/window_summary.h"

namespace bubblewatch {

struct WindowerOptions {
  // Window length. Default: 10 s.
  int64_t window_ns = 10'000'000'000;
  // Allowed lateness: how far behind its host's latest event an event may
  // arrive and still count. Default: 2 s.
  int64_t lateness_ns = 2'000'000'000;
  // How long a launch call is kept behind the finalized edge, whether or not
  // its kernel is buffered (the CPU may run that far ahead of the GPU; a
  // kernel later than that after its launch loses it). Default 10 s.
  int64_t max_launch_lead_ns = 10'000'000'000;
  // Top bubbles stored per window.
  int top_bubbles_per_window = 3;

  // kInvalidArgument naming every field out of range (OptionProblems).
  absl::Status Validate() const;
  void AddProblems(OptionProblems problems) const;
};

class JobWindower {
 public:
  JobWindower(std::string job, const WindowerOptions& options);

  // Makes this the windower of one host of a job split across processors
  // (stage 1, docs/architecture.md#one-job-across-processors): `job` is the
  // job's own name (the batches' header job), `host` the key's part after
  // the `@` (a host, or `rank-R`). Its windows then become HostWindowParts
  // (TakeParts) instead of WindowSummaries: Finalize*, FinalizeReady return
  // none, and no collective analysis runs here (stage 2 runs it over the
  // parts' digests). Call before the first Add.
  void SplitAs(std::string job, std::string host);
  bool split() const { return split_; }
  // The parts made since the last call, in the order made (split
  // windowers only; empty otherwise): a kWindow part per window finalized,
  // in window order; a kLate part per batch (Add) that brought late events
  // or late collective records, their counts by window. The last window
  // part of a FinalizeAll with kEndMarker or kIdleTimeout has `last` set:
  // the host's stream ended with it; a FinalizeAll that closes no window
  // then makes a kEnd part of the last finalized window instead (none
  // before the first window, none when `replay`: see FinalizeAll).
  std::vector<HostWindowPart> TakeParts() { return std::exchange(parts_, {}); }

  // Restores the finalized edge saved with ParseState/SerializeState (none:
  // nothing finalized yet).
  void RestoreFinalizedThrough(std::optional<EventNs> finalized_through_ns);

  // Adds the events of one batch, read at `offset` of the job's partition.
  // `replay` marks a batch processed before a restart (below the committed
  // position): its events that fall in finalized windows are not counted
  // late, since they were counted the first time.
  // Returns the number of late events (counted, not kept).
  int64_t Add(const DecodedBatch& batch, KafkaOffset offset, bool replay,
              absl::Time now);

  // The windows whose end the watermark has passed, in start order. Hosts
  // that sent nothing within `host_idle` before `now` do not hold the
  // watermark back.
  std::vector<WindowSummary> FinalizeReady(absl::Time now,
                                           absl::Duration host_idle);

  // Every window that holds data, closed now, without trailing gaps; each
  // is stamped with `closed_by`, why the caller closes the job: its idle
  // timeout (wall time), its end marker or a new observation (both by
  // partition order, so a replay stamps the same).
  // `replay`: the end comes from a batch processed before a restart (below
  // the committed position), whose commit published the host's end (its
  // last window's part, or a kEnd part) already: no kEnd part again, so a
  // replay publishes only what the first run did.
  std::vector<WindowSummary> FinalizeAll(WindowSummary::ClosedBy closed_by,
                                         bool replay = false);

  // Late events since the last call, by window start.
  absl::flat_hash_map<WindowStartNs, int64_t> TakeLateCounts();
  // Late collective records since the last call, by window start (records
  // starting in a finalized window; not counted again on replay).
  absl::flat_hash_map<WindowStartNs, int64_t> TakeLateCollectiveCounts();

  // The lowest offset of a batch that still has buffered events; nullopt if
  // nothing is buffered.
  std::optional<KafkaOffset> ResumeOffset() const;

  // Windows ending at or before this are final. None before the first.
  std::optional<EventNs> finalized_through_ns() const {
    return finalized_through_ns_;
  }
  // The job's current watermark (none until events arrive, or while every
  // host is idle).
  std::optional<EventNs> WatermarkNs(absl::Time now,
                                     absl::Duration host_idle) const;

  // How many windows would be open if `batch` were added: from the window of
  // the oldest event that ends after the finalized edge (never before the
  // edge) to the window of the newest event end, over the buffered events
  // and the batch's events that are not late. 0 when nothing would be open. The
  // analyzer materializes every window of that range (a gap covering a window
  // is a 0 % window), so this is what one far-future timestamp would cost;
  // StreamProcessor rejects a batch over its limit. A batch of a new
  // observation that starts after the buffered data counts only its own
  // events: the buffered windows close before it is added
  // (docs/semantics.md#observations).
  int64_t OpenWindowsWith(const DecodedBatch& batch) const;

  // The end of the window that holds the end of the latest buffered event
  // (or collective record); none when nothing is buffered. A new
  // observation starting at or after it continues nothing the job holds
  // (docs/semantics.md#observations).
  std::optional<EventNs> BufferedDataWindowEndNs() const;

  // Clock skew estimate: the spread between the newest event starts of the
  // job's hosts (host names, all ranks of a host together) that sent
  // something within `host_idle` before `now`; 0 with fewer than two hosts.
  // It is clock skew plus differences in how late hosts deliver their
  // events, i.e. how far the job's fastest host runs ahead of the slowest
  // one that holds the watermark back. `ahead` / `behind` (optional) get the
  // two hosts' names.
  int64_t HostSkewNs(absl::Time now, absl::Duration host_idle,
                     std::string* ahead = nullptr,
                     std::string* behind = nullptr) const;
  size_t buffered_events() const {
    return trace_.gpu.size() + trace_.cpu.size();
  }
  size_t buffered_collectives() const { return collectives_.size(); }
  // Windows whose collective analysis refused the ranks (e.g. two sources
  // claiming one rank): stored without collectives, counted here (in all,
  // and since the last TakeCollectiveErrors, which also gives the last
  // reason).
  int64_t collective_errors() const { return collective_errors_; }
  int64_t TakeCollectiveErrors(std::string* last_reason = nullptr);
  // Analyses that failed (a bug: batches are validated on arrival). A
  // failed Finalize returns no windows and leaves finalized_through_ns()
  // where it was; analysis_error() keeps the first failure, naming the job
  // and the windows, for the owner to stop on before anything past them is
  // committed (docs/semantics.md#no-silent-loss). TakeAnalysisFailures:
  // the failures since its last call.
  int64_t TakeAnalysisFailures() {
    return std::exchange(analysis_failures_, 0);
  }
  const absl::Status& analysis_error() const { return analysis_error_; }
  absl::Time last_activity() const { return last_activity_; }
  // HostSkewNs as of the last windows closed by the watermark (what those
  // windows store as host_skew_ns).
  int64_t last_host_skew_ns() const { return last_skew_ns_; }
  const std::string& job() const { return job_; }

  // Starts every idle period (the job's and each host's) afresh at `now`
  // unless newer: after a broker outage, when the silence only meant that
  // nothing could be read, producers get a whole idle timeout to reconnect
  // and resend. A host that had really gone quiet holds the watermark back
  // for one more idle timeout, which delays windows but never changes them.
  void RestartIdleTimers(absl::Time now);

  // What the stream makes of a rank's ids (docs/semantics.md#multi-device,
  // "Ranks in the stream"; RankIds below): `trace` as it joins the job when
  // its batches carry `header`. For oracles that cut a rank's own trace.
  static void ApplyRankIds(const BatchHeader& header, Trace& trace);

 private:
  struct HostClock {
    std::string host;                     // The host name, without the rank.
    std::optional<EventNs> max_start_ns;  // None before its first event.
    absl::Time last_seen;
  };
  // Analyzes the buffer and returns the windows in [finalized_through,
  // target_end), then moves the finalized edge and evicts. `open_until_ns`:
  // AnalyzerOptions::open_until_ns, none for none.
  std::vector<WindowSummary> Finalize(EventNs target_end_ns,
                                      std::optional<EventNs> open_until_ns,
                                      WindowSummary::ClosedBy closed_by);
  // Drops events no open window can need.
  void Evict();
  // The collective analysis of [start_ns, end_ns) over the buffer, per
  // source; nullopt when fewer than two ranks ran collectives in it or the
  // analysis refused the ranks (counted in collective_errors_).
  std::optional<WindowCollectives> AnalyzeCollectivesOf(EventNs start_ns,
                                                        EventNs end_ns);
  // Split windowers: the part of the window `w` (its analysis of this
  // host's events), `observed` the known observations. Its ranks are those
  // of the sources with buffered events (a function of the batches from
  // ResumeOffset(), as everything else here).
  // `newest_start_ns`: the newest start of the buffered events.
  HostWindowPart MakePart(WindowAnalysis w,
                          const std::optional<IntervalSet>& observed,
                          std::optional<EventNs> newest_start_ns);
  // The window's traces, one per source with events (or collective
  // records) starting in [start_ns, end_ns), ordered by (rank, host) so
  // that the ranks are numbered the same on every replay; `labels` gets
  // each one's label ("host/rank"), as the collective analysis names them.
  std::vector<Trace> WindowTraces(EventNs start_ns, EventNs end_ns,
                                  std::vector<std::string>* labels) const;
  // The index of the (host, rank) that sent a batch.
  uint32_t SourceOf(const BatchHeader& header);

  // How a rank's ids join the job's (docs/semantics.md#multi-device, "Ranks
  // in the stream"): every process numbers its correlation ids and threads
  // from scratch and every host its GPUs from 0, so the ranks of a job
  // would share devices and pair one rank's kernels with another's
  // launches. A rank of a multi-rank job (rank > 0, or rank 0 of a world
  // larger than 1) has its correlation and thread ids carry rank + 1 in
  // their top 16 bits (XOR: a bijection, so ids stay distinct within the
  // rank); one of a declared world (world size > 1: a process per GPU, as
  // PyTorch runs them) also has its device numbered by its rank. Other
  // batches keep their ids. A function of the batch header only, so a
  // replay maps alike.
  struct RankIds {
    bool ranked = false;
    bool one_gpu = false;  // The rank's device is the rank.
    int32_t rank = -1;
    uint64_t tag = 0;
    void Apply(GpuActivity& a) const;
    void Apply(CpuEvent& e) const;
    void Apply(CollectiveKernel& c) const;
  };
  static RankIds RankIdsOf(const BatchHeader& header);

  // The union of the known observations' intervals (half-open); nullopt
  // while a legacy batch (no observation) is known, or none is: then
  // everything counts as observed (docs/semantics.md#observations). A
  // window's observed_ns is its overlap with this set, and its gaps are cut
  // by it.
  std::optional<IntervalSet> ObservedSet() const;
  // Forgets the observations and legacy batches only known from batches
  // below ResumeOffset(): a processor replaying from there does not know
  // them either.
  void ForgetOldObservations();

  std::string job_;
  WindowerOptions options_;
  // SplitAs: the job's and the host's names, and the parts not taken yet.
  bool split_ = false;
  std::string split_job_;
  std::string split_host_;
  std::vector<HostWindowPart> parts_;
  // Observations of the batches added (id -> interval and the offset of its
  // newest batch), and the offset of the newest batch with events but
  // without an observation (none: no such batch).
  struct KnownObservation {
    EventNs start_ns = 0;
    EventNs end_ns = 0;
    KafkaOffset last_offset = 0;
  };
  absl::flat_hash_map<uint64_t, KnownObservation> observations_;
  std::optional<KafkaOffset> legacy_offset_;
  Trace trace_;
  NameInterner names_;
  std::vector<KafkaOffset> gpu_offset_;  // Source offset per buffered event.
  std::vector<KafkaOffset> cpu_offset_;
  // Who sent each buffered event: an index into sources_ (host, rank).
  std::vector<uint32_t> gpu_source_;
  std::vector<uint32_t> cpu_source_;
  std::vector<std::pair<std::string, int32_t>> sources_;
  // Each source's OS pid: that of its newest batch naming one (-1: none
  // did). A source with events in a window sent its newest batch at or
  // after them, so a replay from ResumeOffset() sees it too.
  std::vector<int64_t> source_pids_;
  absl::flat_hash_map<std::pair<std::string, int32_t>, uint32_t> source_ids_;
  // Buffered collective records (names in trace_'s table), with their batch
  // offset and source; kept while they end within the lateness before the
  // finalized edge.
  std::vector<CollectiveKernel> collectives_;
  std::vector<KafkaOffset> collective_offset_;
  std::vector<uint32_t> collective_source_;
  absl::flat_hash_map<WindowStartNs, int64_t> late_collectives_;
  int64_t collective_errors_ = 0;
  int64_t analysis_failures_ = 0;
  absl::Status analysis_error_;
  int64_t untaken_collective_errors_ = 0;
  std::string last_collective_error_;
  absl::flat_hash_map<std::string, HostClock> hosts_;
  absl::flat_hash_map<WindowStartNs, int64_t> late_;
  std::optional<EventNs> finalized_through_ns_;
  // Oldest start and newest end of the buffered events that end after the
  // finalized edge (for OpenWindowsWith). Only those: they are exactly what
  // a processor restored from a snapshot buffers again by replaying from
  // ResumeOffset(), so its limit decisions go on as before the restart.
  // None while no such event is buffered (both together).
  void NoteOpen(EventNs start_ns, EventNs end_ns);
  std::optional<EventNs> open_min_start_ns_;
  std::optional<EventNs> open_max_end_ns_;
  // The newest end over every buffered event and collective record, kept
  // as they come (Add) and recomputed when the buffer shrinks (Evict): what
  // BufferedDataWindowEndNs returns without a pass over the buffer, which
  // it made once per batch (a job of 8 ranks buffers about a million
  // events: three quarters of the processor's CPU).
  std::optional<EventNs> buffered_max_end_ns_;  // None: nothing buffered.
  // The lowest input offset of a buffered event (none: none), kept as
  // Add and Evict change the buffer: ResumeOffset is asked at every commit
  // and scanning the offsets of every buffered event cost 2.7 % of the
  // processor's CPU (8-rank jobs hold about a million).
  std::optional<KafkaOffset> lowest_offset_;
  // The same by a scan of the buffer (a debug check of lowest_offset_).
  std::optional<KafkaOffset> LowestOffsetScanned() const;
  // HostSkewNs when windows last closed by the watermark; windows closed for
  // idleness (when every host is silent) report it too.
  int64_t last_skew_ns_ = 0;
  absl::Time last_activity_ = absl::InfinitePast();
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_JOB_WINDOWER_H_
