// WindowStore holds recent per-job windows so that "the last hour of job J"
// is one ordered read, together with what the processor needs to resume
// after a crash or a rebalance: per-partition progress and per-job state.
//
// Windows are keyed by (job, window start). Writing an existing key replaces
// it; that is the normal path: a replayed partition re-emits identical
// windows. Commit writes windows, job updates and partition progress in one
// atomic batch, so progress never moves past unwritten windows (this is how
// the processor gets effectively-once results).
//
// Thread safety: all methods may be called concurrently.
// Errors: kUnavailable for I/O worth retrying; kResourceExhausted when the
// disk is full; kFailedPrecondition for a store that cannot be used as
// configured (read-only or missing directory, held by another process, not a
// bubblewatch store); kDataLoss for a stored record that no longer decodes;
// kInvalidArgument for a malformed batch (nothing of it is written). An
// unknown job is not an error: it has no windows.
//
// Times: window starts and event times are integer ns on the events' clock
// (see schemas/window_summary.h); wall times are absl::Time.
#ifndef BUBBLEWATCH_STORAGE_WINDOW_STORE_H_
#define BUBBLEWATCH_STORAGE_WINDOW_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "schemas/job_lifecycle.h"
#include "schemas/time_types.h"
#include "schemas/window_summary.h"
#include "schemas/window_summary_codec.h"
#include "storage/window_sums.h"

namespace bubblewatch {

// Memory and durability settings of the RocksDB-backed store. Memory is
// bounded by block_cache_bytes (data, index and filter blocks all charged to
// it) plus the memtables: write_buffer_bytes * max_write_buffers for each of
// the `windows`, `jobs` and `latest` column families, at most 4 MiB *
// max_write_buffers for each of `progress` and `default` (64 MiB in all by
// default).
struct WindowStoreOptions {
  // One LRU block cache shared by all column families.
  // Default: 64 MiB.
  int64_t block_cache_bytes = int64_t{64} << 20;
  // Size of one memtable (RocksDB write_buffer_size). Small on purpose: the
  // processor writes a few KiB per window, so 8 MiB still batches minutes of
  // windows into one flush, and memory stays flat however long it runs.
  // Default: 8 MiB.
  int64_t write_buffer_bytes = int64_t{8} << 20;
  // Memtables per column family, the active one included; at least 2.
  // Default: 2.
  int max_write_buffers = 2;
  // fsync the write-ahead log on every Commit. The WAL is always on: without
  // sync a commit survives a process crash (kill -9) at once and a machine
  // crash once the OS has written it back; either way windows and progress
  // survive or vanish together.
  // Default: false.
  bool sync_commits = false;

  // kInvalidArgument listing every problem: a cache or memtable size below
  // 1 byte, fewer than 2 memtables. Opening a store calls it.
  absl::Status Validate() const;
};

// What the store knows about one job.
struct JobInfo {
  std::string job;
  // Latest event time reported; none if none. (Not 0: event times before
  // the epoch are valid, docs/semantics.md#units-and-events, and a job's
  // newest event may lie there.)
  std::optional<EventNs> last_event_ns;
  absl::Time last_seen_wall = absl::UnixEpoch();  // Wall time last reported.
  int64_t window_count = 0;                       // Windows stored now.
  WindowStartNs latest_window_start_ns = 0;       // When window_count > 0.
  // From the job's stored state (schemas/job_lifecycle.h); PhaseAt with the
  // silence since last_seen_wall gives the phase shown.
  JobLifecycle lifecycle;
};

// Per-job fields a Commit updates. last_event_ns and last_seen_wall only move
// forward: the store keeps the larger of the stored and the given value, so a
// replay cannot make a job look older.
struct JobUpdate {
  std::string job;
  std::optional<EventNs> last_event_ns;  // None: no event reported.
  absl::Time last_seen_wall = absl::UnixEpoch();
  // Replaces the job's opaque state blob when set; kept as is when not.
  std::optional<std::string> state = std::nullopt;
  // The lifecycle that `state` holds, for commit observers (alerts/); not
  // stored apart from it.
  std::optional<JobLifecycle> lifecycle = std::nullopt;
};

// How far the processor got in one Kafka partition.
struct PartitionProgress {
  std::string topic;
  int32_t partition = 0;
  // Lowest offset still needed by an open window: where to resume.
  KafkaOffset resume_offset = 0;
  // Next offset after the last processed message.
  KafkaOffset committed_position = 0;
  // Opaque, the processor's: the state of the partition's jobs as of this
  // progress (so progress and job state are one consistent snapshot). Empty
  // in stores written before it existed.
  std::string state;
  // Opaque too: per-job records of the partition, kept under its progress
  // so that a commit writes only the jobs it changed (the processor's
  // snapshot keeps its jobs per key: docs/state.md#partition-snapshots).
  // On Commit: job -> its new record, or nullopt to delete it; written in
  // the same atomic batch as the progress. Progress() leaves it empty:
  // PartitionJobRecords reads them.
  std::vector<std::pair<std::string, std::optional<std::string>>> job_records;
};

// One opaque alert-state blob (alerts/), committed with the windows it was
// derived from so that a restart neither re-fires nor loses an alert.
struct AlertStateUpdate {
  std::string key;  // Non-empty; e.g. a job id, or a fleet-level name.
  // The job whose state this is (empty: no one job's, e.g. a fleet rule's).
  // The processor also keeps a job's blob in its partition's snapshot, so
  // that it moves with the job to the partition's next owner.
  std::string job;
  // Replaces the stored blob when set; deletes it when nullopt.
  std::optional<std::string> state;
};

// One window to delete, by its key: what a tombstone on the windows topic
// asks of a materialized store (serve/window_materializer.h).
struct WindowDelete {
  std::string job;
  WindowStartNs start_ns = 0;
};

// Everything one Commit writes, atomically.
struct StoreBatch {
  std::vector<WindowSummary> windows;  // Upserted by (job, window start).
  // Deleted after the upserts; deleting a window that is not stored is not
  // an error. A window both upserted and deleted in one batch is
  // kInvalidArgument (the caller decides which one is newer).
  std::vector<WindowDelete> window_deletes;
  std::vector<JobUpdate> jobs;
  std::vector<PartitionProgress> progress;  // Replaces per (topic, partition).
  std::vector<AlertStateUpdate> alert_states;

  bool empty() const {
    return windows.empty() && window_deletes.empty() && jobs.empty() &&
           progress.empty() && alert_states.empty();
  }
};

// What one ApplyRetention pass removed.
struct RetentionStats {
  int64_t jobs_trimmed = 0;  // Jobs that lost at least one window.
  int64_t windows_deleted = 0;
};

// Memory the store uses now, in bytes.
struct StoreMemoryUsage {
  int64_t block_cache_capacity = 0;
  int64_t block_cache_usage = 0;  // Includes index and filter blocks.
  int64_t memtable_budget = 0;    // Sum over column families.
  int64_t memtable_usage = 0;
  int64_t table_readers = 0;  // Readers' memory outside the cache.
};

// Windows as stored, undecoded: each one's encoding
// (schemas/window_summary_codec.h) in one buffer, 8-byte aligned, so a
// reader can open them in place (WindowSummaryView) and decode only what it
// uses.
class EncodedWindows {
 public:
  size_t size() const { return windows_.size(); }
  bool empty() const { return windows_.empty(); }
  // The start of window i, from its key (known even if its bytes are bad).
  WindowStartNs start_ns(size_t i) const { return windows_[i].start_ns; }
  // The encoding of window i; valid while this object lives (moves too).
  absl::string_view bytes(size_t i) const {
    return absl::string_view(reinterpret_cast<const char*>(windows_[i].data),
                             windows_[i].size);
  }

  // Appends one window's encoding (store implementations).
  void Add(WindowStartNs start_ns, absl::string_view bytes);

 private:
  struct Entry {
    WindowStartNs start_ns;
    const uint64_t* data;
    size_t size;  // In bytes.
  };
  // Fixed chunks, never reallocated: copying each value once is all.
  std::vector<std::unique_ptr<uint64_t[]>> chunks_;
  size_t chunk_words_ = 0;  // Of the last chunk.
  size_t used_words_ = 0;   // Of the last chunk.
  std::vector<Entry> windows_;
};

// Every job's newest window, undecoded (LatestOfEveryJobEncoded).
struct EncodedLatestWindows {
  std::vector<std::string> jobs;  // Job order.
  EncodedWindows windows;         // windows.bytes(i) is jobs[i]'s newest.
};

// One job's sums over a period (PeriodSumsOfEveryJob).
struct JobPeriodSums {
  std::string job;
  WindowSums sums;  // Over the job's windows starting in the period.
  WindowStartNs last_start_ns = 0;  // The start of the last of them.
};

// Read access: the processor's store, a secondary instance following it, or
// a copy of a store.
class WindowStoreReader {
 public:
  virtual ~WindowStoreReader() = default;

  // Returns the windows of `job` whose start is in [begin, end), in start
  // order, decoded to `detail` (schemas/window_summary_codec.h: kJobLevel
  // leaves out the per-device stats, most of the decoding). Infinite bounds
  // are allowed.
  virtual absl::StatusOr<std::vector<WindowSummary>> Scan(
      absl::string_view job, absl::Time begin, absl::Time end,
      WindowDetail detail) const = 0;

  // Scan with every field decoded.
  absl::StatusOr<std::vector<WindowSummary>> Scan(absl::string_view job,
                                                  absl::Time begin,
                                                  absl::Time end) const {
    return Scan(job, begin, end, WindowDetail::kFull);
  }

  // As Scan, but the windows undecoded, for readers that use part of each
  // (a job's report: job-level figures and a few bubbles of hundreds of
  // windows).
  virtual absl::StatusOr<EncodedWindows> ScanEncoded(absl::string_view job,
                                                     absl::Time begin,
                                                     absl::Time end) const = 0;

  // Returns the window of `job` with the latest start, or nullopt when the
  // job has none.
  virtual absl::StatusOr<std::optional<WindowSummary>> Latest(
      absl::string_view job) const = 0;

  // Returns the latest window of every job that has one, in job order. All
  // stored windows are final, so this is "the latest complete window".
  // Reads one small column family holding a copy of each job's newest
  // window; never touches older windows.
  virtual absl::StatusOr<std::vector<WindowSummary>> LatestOfEveryJob()
      const = 0;

  // As LatestOfEveryJob, undecoded, for readers that use part of each
  // window (a fleet ranking: the job-level figures).
  virtual absl::StatusOr<EncodedLatestWindows> LatestOfEveryJobEncoded()
      const = 0;

  // The sums of every job's windows whose start is in [begin, end), in job
  // order, jobs without a window there left out: what a fleet period query
  // ranks by. Read from the running sums the store keeps beside each window
  // (storage/window_sums.h): two seeks per job, no window decoded, whatever
  // the period's length. nullopt when the store has no complete running
  // sums (a store written before them, opened read-only; a primary builds
  // them when it opens one): the caller then sums the windows itself.
  virtual absl::StatusOr<std::optional<std::vector<JobPeriodSums>>>
  PeriodSumsOfEveryJob(absl::Time begin, absl::Time end) const = 0;

  // Returns every known job, in job order.
  virtual absl::StatusOr<std::vector<JobInfo>> ListJobs() const = 0;

  // Returns one job, or nullopt when it is unknown.
  virtual absl::StatusOr<std::optional<JobInfo>> Job(
      absl::string_view job) const = 0;

  // Returns the opaque state blob last committed for `job`, or nullopt when
  // none was.
  virtual absl::StatusOr<std::optional<std::string>> JobState(
      absl::string_view job) const = 0;

  // Returns every alert-state blob committed and not deleted, by key.
  virtual absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
  AlertStates() const = 0;

  // Returns the progress last committed for a partition, or nullopt.
  virtual absl::StatusOr<std::optional<PartitionProgress>> Progress(
      absl::string_view topic, int32_t partition) const = 0;

  // Every per-job record of a partition (PartitionProgress::job_records),
  // as (job, record), ascending by job.
  virtual absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
  PartitionJobRecords(absl::string_view topic, int32_t partition) const = 0;

  // A read-only instance catches up with the primary's commits so far
  // (RocksDB TryCatchUpWithPrimary); the primary itself returns OK.
  virtual absl::Status Refresh() = 0;

  virtual StoreMemoryUsage MemoryUsage() const = 0;

  // One line for logs: path, mode, memory budgets and usage.
  virtual std::string Describe() const = 0;
};

// The processor's read-write store.
class WindowStore : public WindowStoreReader {
 public:
  // Writes `batch` atomically (one RocksDB WriteBatch, WAL on): either all
  // of it is stored or, on error, none. Keeps each job's window count,
  // latest and oldest window start (and its newest window's copy) up to
  // date, deletes included: deleting a job's newest window makes the one
  // before it the newest; deleting its last leaves the job known, with no
  // window.
  // Errors: kInvalidArgument for an empty job or topic, a job containing
  // '\0', a window with end < start or a negative partition; I/O errors as
  // in the class comment. After a write error the store may refuse further
  // writes until reopened; consumption must stop (no offsets move).
  virtual absl::Status Commit(const StoreBatch& batch) = 0;

  // Deletes, per job, the windows whose start is at least `retention` older
  // than the start of the job's newest window (start <= newest - retention),
  // with one range delete per job. Reads the job records, and windows only
  // of jobs with something expired (those, plus the first one kept); a pass
  // with nothing to delete is one scan of the job records. Commits may run
  // during a pass. Jobs are never forgotten. The processor calls this
  // periodically (--retention, default 6 h).
  // REQUIRES: retention > 0.
  virtual absl::StatusOr<RetentionStats> ApplyRetention(
      absl::Duration retention) = 0;
};

// Opens the RocksDB-backed store at `path` for reading and writing, creating
// it if missing. Destroy the store before main() returns: RocksDB's own
// static state may already be gone during static destruction.
// Errors: kFailedPrecondition if another process holds it open, or `path`
// cannot be a directory (its parent is a file, no permission, read-only file
// system); others as in the class comment.
absl::StatusOr<std::unique_ptr<WindowStore>> OpenRocksDbWindowStore(
    absl::string_view path, const WindowStoreOptions& options = {});

// Opens the store at `path` read-only, as a RocksDB secondary instance: it
// works while the processor has the store open (call Refresh to see later
// commits) and on a copied store. Keeps its own info log in a private
// directory under the system temp dir, removed when the reader is destroyed.
// Errors: kNotFound if there is no store at `path`; kFailedPrecondition if
// `path` holds a RocksDB database that is not a window store.
absl::StatusOr<std::unique_ptr<WindowStoreReader>>
OpenRocksDbWindowStoreReadOnly(absl::string_view path,
                               const WindowStoreOptions& options = {});

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_STORAGE_WINDOW_STORE_H_
