// WindowPartsTask: stage 2 of a job split across processors
// (docs/architecture.md#stage-2-the-merge), without I/O of its own, as
// PartitionTask is stage 1's. Each host's stage 1 publishes one window part
// per (job, host, window) to the parts topic, keyed by job
// (analysis/window_merge.h: HostWindowPart); this task holds each job's
// open windows as the parts that arrived, closes a window once every host
// that can still send a part of it has moved past it, merges its parts
// (MergeHostWindowParts) into the window one processor holding every
// host's events would have made, and commits it to the store and the
// windows topic with the parts topic's positions, in one store batch.
//
// In: consumed part messages (partition, offset, key, bytes), wall-time
// ticks, ends of partitions, assignments and revocations, as plain values.
// Out: through the seams it is connected to (commit_kafka.h: CommitKafka
// publishes windows and commits group offsets; dead_letter_sink.h:
// DeadLetterKafka), the store, the counters.
//
// The close rule (docs/semantics.md#split-jobs): a job's window [s, e)
// closes, in start order, when the job's world size is known (> 0), every
// rank in [0, world) is held by some host (a part's `ranks`), and every
// host of the job has sent a part of a window ending at or after e or has
// ended (a part with `last`): kWatermark when every host moved on past e,
// kEndMarker when some only ended there or before. Every known host ended,
// and the world's ranks all held when the world is known: every open
// window closes (kEndMarker); a later part of a host that had ended then
// starts a new run, every host's end forgotten. The job silent for
// options.idle_timeout of wall time, once every owned partition was read
// to its end (CaughtUp): every open window closes (kIdleTimeout). A part
// of a window before the job's finalized edge (the end of its last closed
// window) is stale: counted, not merged.
//
// Promises:
//   - a window's parts are merged once all arrived under the rule above,
//     whatever the interleaving of the hosts' parts; a second copy of a
//     part (identical bytes, a stage-1 replay) is counted and ignored; a
//     second part of one (host, window) with other bytes, a part that does
//     not decode, or whose job is not its key, goes to the dead-letter
//     topic with a reason, counted (never a crash, never silently dropped);
//   - effectively once (docs/architecture.md#commit-protocol): a commit
//     publishes its windows, flushes, commits the previous commit's group
//     offsets, then writes one store batch holding the windows, per
//     partition its progress (resume offset: the lowest offset of a part of
//     a still-open window; committed position) and a record per job whose
//     state changed (MergeJobRecord: what a replay from the resume offset
//     cannot rebuild). A restart restores those records and replays from
//     the resume offset: it makes the same windows, byte for byte;
//   - a failed merge or commit stops the task (RuntimeShared::fatal) before
//     anything past it is committed; after a failed commit nothing more is
//     written.
//   - with a state topic (ConnectChangelog, options.state_topic), each
//     commit's progress and job records go to it once the store batch is
//     written, per key as stage 1's changelog keeps them: per partition a
//     small progress record (MergePartitionSnapshot) and per job that
//     changed a record holding its new version and the one it replaced
//     (MergeJobSnapshot), so that whichever instance owns the partition
//     next restores the state of one commit (each job's version at the
//     newest progress record's position, MergeJobVersionAt; the newer of
//     its store and the state topic, by committed position) and
//     replays from the same resume offset: a rebalance, or a new instance
//     with an empty store, gives the same windows too. No record grows
//     with the number of jobs, and a commit writes O(jobs it changed);
//   - a job is forgotten (docs/semantics.md#split-jobs) once it has no open
//     window, has ended (every host ended, or its windows closed by idle),
//     its newest part ends options.job_expiry (event time) behind its
//     partition's newest, and a replay from the resume offset reads none of
//     its parts: dropped from memory, its store record deleted, its state
//     topic record marked gone then tombstoned. A later part of it before
//     the end of its newest stored window is stale (the job stays
//     forgotten); a later one starts it afresh with that end as its
//     finalized edge: no window is stored twice.
// A kEnd part (a host ended with no window left) only updates its host: it
// ended at its window's end. A kLate part's counts go to their windows: to
// an open one's when it closes, to a closed one's stored window at the next
// commit (rewritten and published again, as the events stage adds late
// counts to its stored windows); each host's kLate parts are taken once, by
// their stage-1 offset. A merged window's host_skew_ns and the ranks'
// timelines are MergeHostWindowParts's (each part carries its ranks'
// TimelineParts).
// Not kept (yet): job lifecycle states.
//
// Thread safety: one thread; stats() from any.
#ifndef BUBBLEWATCH_PROCESSOR_WINDOW_PARTS_TASK_H_
#define BUBBLEWATCH_PROCESSOR_WINDOW_PARTS_TASK_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "analysis/window_merge.h"
#include "processor/broker_health.h"
#include "processor/commit_kafka.h"
#include "processor/dead_letter_sink.h"
#include "processor/late_counts.h"
#include "processor/partition_task.h"
#include "processor/processor_options.h"
#include "processor/runtime_shared.h"
#include "schemas/time_types.h"
#include "schemas/window_summary.h"
#include "storage/window_store.h"

namespace bubblewatch {

// What stage 2 keeps of one job across restarts (docs/state.md#stage-2-job-
// records): what a replay of the parts from the resume offset cannot
// rebuild, because the parts that told it lie below that offset.
struct MergeJobRecord {
  struct Host {
    std::vector<int32_t> ranks;  // Sorted, distinct: every part's ranks.
    // The end of the newest window the host sent a part of; none yet.
    std::optional<int64_t> newest_end_ns;
    // Its newest part said `last`: its stream ended there.
    bool ended = false;
    bool operator==(const Host&) const = default;
  };
  // The largest world size a part declared; -1 when none did.
  int32_t world_size = -1;
  std::map<std::string, Host> hosts;  // By host name.
  // The end of the job's last closed window; none closed yet.
  std::optional<int64_t> finalized_edge_ns;
  // Late counts of the kLate parts taken (docs/semantics.md#split-jobs):
  // those of windows not closed yet (at or after the edge), added to each
  // when it closes; and per host, the stage-1 offset of its newest kLate
  // part taken (a part at or below it is a copy).
  using Late = LateCounts;
  std::map<int64_t, Late> pending_late;  // By window start.
  std::map<std::string, int64_t> late_offsets;
  // Its last window closed by the idle timeout and no part opened one
  // since: the job ended by idleness (what lets it be forgotten).
  bool idle_closed = false;
  bool operator==(const MergeJobRecord&) const = default;
};

// A version byte (2), then varints: the world size, the edge (a flag, then
// its value), the hosts (name, ranks, newest end as a flag and value,
// ended), the pending late counts (window start, events, collectives), the
// late offsets (host, offset), a byte for idle_closed. A version 1 record
// (without the late counts and idle_closed) still decodes, as not
// idle-closed. Decode(Encode(r)) == r. Decode errors: kDataLoss for
// truncated or malformed bytes, an unknown version.
std::string EncodeMergeJobRecord(const MergeJobRecord& record);
absl::StatusOr<MergeJobRecord> DecodeMergeJobRecord(absl::string_view bytes);

// One partition of the parts topic as its state topic keeps it
// (docs/state.md#stage-2-state-topic): the progress of one commit, key
// "TOPIC/P" (MergePartitionKey), in partition P of the state topic. Its
// jobs are in MergeJobSnapshot records (jobs_per_key, what this build
// writes); a record written before them (version 1) holds every job
// itself, as of its position.
struct MergePartitionSnapshot {
  std::string topic;  // The parts topic.
  int32_t partition = 0;
  KafkaOffset resume_offset = 0;
  KafkaOffset committed_position = 0;
  // job -> EncodeMergeJobRecord bytes: in a version 1 record, or filled
  // by AssembleMergeSnapshot.
  std::map<std::string, std::string> jobs;
  bool jobs_per_key = false;
  bool operator==(const MergePartitionSnapshot&) const = default;
};

std::string MergePartitionKey(absl::string_view topic, int32_t partition);
// jobs_per_key: a version byte (2), then varints: topic, partition, resume
// offset, committed position. Otherwise the old form: a version byte (1),
// the same, the job count, per job (ascending) its name and its record's
// bytes. Decode errors: kDataLoss (truncated, malformed, unknown version).
std::string EncodeMergePartitionSnapshot(const MergePartitionSnapshot& s);
absl::StatusOr<MergePartitionSnapshot> DecodeMergePartitionSnapshot(
    absl::string_view bytes);

// One version of a job's part of its partition's snapshot.
struct MergeJobVersion {
  // The committed position of the commit that wrote it.
  KafkaOffset committed_position = 0;
  // EncodeMergeJobRecord bytes; nullopt: the job was forgotten (gone).
  std::optional<std::string> record;
  bool operator==(const MergeJobVersion&) const = default;
};

// One job of a partition on the state topic, key "TOPIC/P/job/JOB"
// (MergeJobKey): the version a commit wrote and the one it replaced, as
// stage 1's PartitionJobRecord (docs/state.md#partition-snapshots): a
// restore whose progress record is older than `current` takes `previous`.
struct MergeJobSnapshot {
  std::string topic;
  int32_t partition = 0;
  std::string job;
  MergeJobVersion current;
  std::optional<MergeJobVersion> previous;
  bool operator==(const MergeJobSnapshot&) const = default;
};

std::string MergeJobKey(absl::string_view topic, int32_t partition,
                        absl::string_view job);
// A version byte (1), then varints: topic, partition, job, the current
// version, a flag and the previous one; a version is its committed
// position, a flag and the record's bytes. Decode errors: kDataLoss.
std::string EncodeMergeJobSnapshot(const MergeJobSnapshot& s);
absl::StatusOr<MergeJobSnapshot> DecodeMergeJobSnapshot(
    absl::string_view bytes);

// The version of a job at the commit of committed position `q`, from its
// newest state-topic record: `current` when written at or before q, else
// `previous` when it was, else none (the job came after q).
std::optional<MergeJobVersion> MergeJobVersionAt(const MergeJobSnapshot& s,
                                                 KafkaOffset q);

// Stage 2's own counters, beside the ProcessorStats it shares with stage 1
// (messages, replays, windows written and published, dead letters).
struct WindowPartsStats {
  int64_t parts = 0;            // Parts that decoded and were taken.
  int64_t duplicate_parts = 0;  // Copies of a part held already.
  int64_t stale_parts = 0;      // Of windows at or before the edge.
  int64_t end_parts = 0;        // kEnd parts taken.
  int64_t late_parts = 0;       // kLate parts taken (not their copies).
  // Late events and collective records of closed windows that are in no
  // store (retention removed them, or no host sent a part of the window):
  // counted here and in the processor's late counters only.
  int64_t late_without_window = 0;
  int64_t windows_closed = 0;  // Merged, by any rule.
  int64_t jobs_forgotten = 0;  // Dropped after options.job_expiry.
  int64_t open_windows = 0;    // Now, over the owned jobs.
  int64_t jobs = 0;            // Now held in memory.
};

class WindowPartsTask {
 public:
  // Dead-letter reasons.
  static constexpr char kBadPart[] = "bad_window_part";
  static constexpr char kKeyMismatch[] = "window_part_key_mismatch";
  static constexpr char kPartConflict[] = "window_part_conflict";

  // `options` (its topic is the parts topic), `store`, `health` and
  // `shared` must outlive the task.
  WindowPartsTask(const StreamProcessorOptions& options, WindowStore* store,
                  BrokerHealth* health, RuntimeShared* shared);

  // The seams: `kafka` publishes windows and commits offsets,
  // `dead_letters` (must outlive the task) takes the DLQ's records.
  void Connect(std::unique_ptr<CommitKafka> kafka,
               DeadLetterKafka* dead_letters);
  // The state topic's Kafka calls (not owned, must outlive the task; its
  // records go out on the producer that CommitKafka flushes). Without one,
  // or with options.state_topic empty, there is no state topic.
  void ConnectChangelog(ChangelogKafka* changelog) { changelog_ = changelog; }
  // The most bytes of one windows-topic message (CommitPipeline's
  // set_windows_limit).
  void set_windows_limit(int64_t bytes) { windows_limit_bytes_ = bytes; }
  void set_stop(const std::atomic<bool>* stop) { stop_ = stop; }
  void Start(absl::Time now) { last_commit_ = now; }

  // Partitions assigned: each one's job records and progress restored from
  // the store or, when it holds a later commit (a higher committed
  // position), the state topic; `offset` set to that resume offset
  // (unchanged without either). With a state topic, the first commit
  // writes every restored job to both, and deletes (store) or writes gone
  // (state topic) the jobs the restored snapshot lacks. A failure is
  // RuntimeShared::fatal and leaves the partition out.
  void Assign(std::span<PartitionTask::Assigned> partitions);
  // Partitions revoked: everything final committed and flushed first, then
  // their jobs dropped.
  void Revoke(std::span<const int32_t> partitions, absl::Time now);

  // One consumed part. An error (a failed merge) is also fatal.
  absl::Status OnMessage(const ConsumedMessage& message, absl::Time now);
  void OnEndOfPartition(int32_t partition);
  // Wall time passed: idle jobs closed (once caught up), a commit when
  // windows wait or options.commit_interval passed.
  absl::Status Tick(absl::Time now);
  // The last commit and flush, group offsets committed synchronously.
  absl::Status Finish(absl::Time now);
  // Silence while the broker was away said nothing.
  void RestartIdleTimers(absl::Time now);

  bool CaughtUp() const;
  bool owns_partitions() const { return !partitions_.empty(); }
  std::optional<int32_t> AnyPartition() const;
  KafkaOffset next_offset(int32_t partition) const;
  std::vector<std::pair<int32_t, KafkaOffset>> Lagging() const;
  // True when no owned job has an open window.
  bool AllClosed() const;
  // The open windows' starts of `job`, in order (tests, progress lines).
  std::vector<WindowStartNs> OpenWindows(absl::string_view job) const;
  // `job`'s record as it stands (nullopt: unknown job).
  std::optional<MergeJobRecord> JobRecord(absl::string_view job) const;

  DeadLetterSink* dead_letters() { return dead_letters_.get(); }
  ProcessorStats stats() const {
    absl::MutexLock lock(&stats_.mu);
    return stats_.stats;
  }
  StatsCell& stats_cell() { return stats_; }
  WindowPartsStats parts_stats() const;

 private:
  struct HeldPart {
    HostWindowPart part;
    std::string bytes;
    KafkaOffset offset = 0;
  };
  struct OpenWindow {
    int64_t end_ns = 0;
    std::map<std::string, HeldPart> parts;  // By host.
  };
  struct Job {
    int32_t partition = 0;
    MergeJobRecord record;
    std::map<WindowStartNs, OpenWindow> open;
    absl::Time last_part_wall = absl::InfinitePast();
    // The offset of its newest part read (-1: none since the restore).
    KafkaOffset last_offset = -1;
    bool dirty = false;       // Its record changed since the last commit.
    bool ranks_held = false;  // RanksHeld(record), kept as it changes.
    // Its version on the state topic as this owner last wrote or restored
    // it: the `previous` of its next record.
    std::optional<MergeJobVersion> on_topic;
  };
  struct Partition {
    KafkaOffset next_offset = -1;
    KafkaOffset committed_position = 0;
    bool at_end = false;
    // Jobs to write as gone at the next commit (forgotten, or on the state
    // topic but not in the restored snapshot), with their version there.
    std::map<std::string, std::optional<MergeJobVersion>> to_forget;
    // Jobs written as gone by the last commit: their tombstones are due
    // once its progress record is acknowledged (the next commit).
    std::map<std::string, MergeJobVersion> gone;
    // The store's records of jobs the restored snapshot lacks.
    std::vector<std::string> store_deletes;
  };
  // What a restore read from the state topic: the newest snapshot with
  // its jobs, and the version at its position of every job key the topic
  // holds (nullopt: none at that position).
  struct TopicState {
    std::optional<MergePartitionSnapshot> snapshot;  // None: no progress.
    std::map<std::string, std::optional<MergeJobVersion>> keys;
  };

  // Folds `part` into the job's host table and world size (dirty when
  // they changed; ranks_held kept).
  static void NoteHost(Job& job, const HostWindowPart& part);
  // True when the world size is known and every rank of it is held.
  static bool RanksHeld(const MergeJobRecord& record);
  // True when the window ending at `end_ns` has every part it can get.
  static bool Complete(const Job& job, int64_t end_ns);
  // Takes a kLate part (a copy: counted, ignored).
  void TakeLate(const std::string& name, Job& job, const HostWindowPart& part);
  // Closes what the rule lets close; then fatal on a failed merge.
  absl::Status CloseReady(const std::string& name, Job& job);
  absl::Status CloseFirst(const std::string& name, Job& job,
                          WindowSummary::ClosedBy closed_by);
  void DeadLetter(const ConsumedMessage& message, bool replay,
                  absl::string_view reason, std::string detail);
  absl::Status Commit(absl::Time now);
  absl::Status CommitOnce(absl::Time now);
  absl::Status PublishWindow(WindowSummary& window, int64_t& trimmed);
  absl::Status FlushAndCommitOffsets(bool sync);
  void PrepareWindowsTopic();
  // What the state topic holds of `partition` (nothing: none, or no state
  // topic).
  absl::StatusOr<TopicState> ReadChangelog(int32_t partition);
  // Queues `progress.partition`'s records of the commit that stored
  // `progress`, in this order: the tombstones due, the changed jobs (those
  // `progress.job_records` writes), the jobs to forget (written as gone),
  // the progress record.
  absl::Status WriteChangelog(const PartitionProgress& progress);
  bool has_state_topic() const {
    return changelog_ != nullptr && !options_.state_topic.empty();
  }
  absl::Status ProduceState(int32_t partition, const std::string& key,
                            std::optional<std::string> value);
  // Drops the jobs of `p` that the expiry rule lets go (the class
  // comment), with `resume_offset` the commit's; their names appended to
  // `forgotten`.
  void ForgetExpired(int32_t p, KafkaOffset resume_offset,
                     std::vector<std::string>& forgotten);
  // A job not in memory: its finalized edge as the store's newest window
  // of it says (a job forgotten before), or none.
  absl::StatusOr<std::optional<int64_t>> StoredEdge(const std::string& job);

  const StreamProcessorOptions& options_;
  WindowStore* store_;
  BrokerHealth* health_;
  RuntimeShared* shared_;
  mutable StatsCell stats_;
  std::unique_ptr<CommitKafka> kafka_;
  std::unique_ptr<DeadLetterSink> dead_letters_;
  const std::atomic<bool>* stop_ = nullptr;
  int64_t windows_limit_bytes_ = 1'000'000;
  int windows_partitions_ = 0;
  bool topics_prepared_ = false;
  ChangelogKafka* changelog_ = nullptr;
  bool changelog_prepared_ = false;
  bool changelog_created_now_ = false;

  std::map<int32_t, Partition> partitions_;
  std::map<std::string, Job> jobs_;  // Job order: deterministic closes.
  std::vector<WindowSummary> pending_windows_;
  // Late counts of closed windows not yet written.
  PendingLateCounts late_updates_;
  std::vector<PartitionOffset> pending_group_offsets_;
  absl::Status commit_failed_;
  bool uncommitted_ = false;
  absl::Time last_commit_ = absl::InfinitePast();
  WindowPartsStats counts_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_WINDOW_PARTS_TASK_H_
