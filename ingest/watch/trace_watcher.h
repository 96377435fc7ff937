// TraceWatcher: follows one directory for profiler trace files and sends each
// complete one to Kafka exactly once, for `bubblewatch produce --watch`.
//
// What it picks up: regular files in the directory itself (not below it)
// named *.json, *.json.gz (so also *.pt.trace.json[.gz]) or *.sqlite (Nsight
// Systems exports); names starting with '.' are ignored (temporary files,
// and the watcher's own state and reject directories).
//
// When a file is complete: its size and modification time have not changed
// for `settle` (or inotify saw it closed after its last write), and its
// content is whole: a gzip stream with its trailer, JSON ending in its
// closing '}', an SQLite file with no -journal/-wal beside it, and the
// reader parses it. A file that is stable but not yet whole is retried until
// it has been stable for `incomplete_timeout`; then it counts as corrupt.
//
// Identity: the job id is `job`, else the `job` group of `job_pattern` on the
// file name, else the job the trace's own metadata names; a file with none
// is moved to `reject_dir` with one log line, never guessed. The rank is
// `rank`, else the pattern's `rank` group, else the trace's distributedInfo.
// Event times are what the readers give: wall-clock epoch nanoseconds when
// the trace carries the base (Kineto's baseTimeNanoseconds, Nsight's session
// start), so windows of different ranks and hosts line up.
//
// Exactly once, also across crashes: the producer id of a file's batches is
// derived from a hash of its bytes, its job and rank and the batching
// options, and batch i carries sequence i, so a file resent after a crash
// carries the same (producer id, sequence) pairs and the processor drops the
// batches it already counted (processor/job_state.h). Only after every batch
// of a file is acknowledged (acks=all, idempotent producer) is the file
// recorded in the WatchState and then kept, moved or deleted; a restart
// therefore resends at most the file it was in the middle of.
//
// Files that become complete together (the ranks of a job exporting the
// same steps) are sent together, merged by event time, so that one rank's
// events do not arrive after another rank moved the job's watermark past
// them; while another file is still being written, complete files wait for
// it (at most 10 settle times).
//
// Memory: a file is hashed and checked for completeness through buffers of
// a fixed size, gzip inflated on the fly, never held whole, so that a
// gzipped GiB of blanks or a sparse file costs the watcher a few MiB; then
// ReadTraceFile reads it as `analyze` does. One file is bounded
// (docs/produce.md, `--watch`, "Bounds"): a file over `max_file_bytes` on disk,
// or whose gzip inflates past it, or holding more than `max_file_events`
// events, is rejected ("too large") as soon as the read passes the bound, so a
// gzip bomb of valid events costs the memory of the limit, not of its content.
// A verdict that depends on a file's bytes only (an incomplete gzip or
// JSON end, a parse error) is taken once per version of the file (size and
// mtime): an unchanged file is not read again, only re-judged by time.
//
// Inspector logs: *.log and *.jsonl files that are NCCL/RCCL Inspector logs
// are not whole files but growing ones; an InspectorTailer follows them
// (ingest/watch/inspector_tailer.h), in the same polls.
//
// Bad files (unreadable, not a trace, truncated) are counted by reason and
// moved to `reject_dir`; the watcher keeps going. A failed delivery or a
// state that cannot be written is fatal (PollOnce returns the error): the
// caller exits and a supervisor's restart resends the file.
//
// Thread safety: one thread calls PollOnce/WaitForChange/Run; RequestStop and
// stats() from any thread.
#ifndef BUBBLEWATCH_INGEST_WATCH_TRACE_WATCHER_H_
#define BUBBLEWATCH_INGEST_WATCH_TRACE_WATCHER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "ingest/batched_trace.h"
#include "ingest/event_producer.h"
#include "ingest/watch/inspector_tailer.h"
#include "ingest/watch/job_name_pattern.h"
#include "ingest/watch/watch_state.h"

namespace bubblewatch {

// What happens to a file once every batch of it is acknowledged.
struct AfterSend {
  enum class Action { kKeep, kMove, kDelete };
  Action action = Action::kKeep;
  std::string move_dir;  // kMove only.
};

// Parses "keep", "delete" or "move:DIR". Errors: kInvalidArgument.
absl::StatusOr<AfterSend> ParseAfterSend(absl::string_view text);

// True for the file names the watcher picks up (see the file comment).
bool IsWatchedTraceName(absl::string_view file_name);

// How far a file's bytes look like a finished trace file.
enum class Completeness { kComplete, kIncomplete, kTooLarge };

// Checks the structure of the file at `path` (not the trace inside): a gzip
// stream must decompress to its end with its trailer, JSON (plain or
// gunzipped) must end with '}', and an SQLite file must be as long as its
// header says and have no "-journal" or "-wal" file beside it. `why` gets
// the reason when incomplete (also when the file cannot be read: it may be
// going away or changing). Reads the file's first and last bytes only, a
// gzip file's content streamed through a fixed-size buffer. kTooLarge
// (`why` says so) when the file is over `max_bytes` (0: no limit) on disk,
// or its gzip inflates past it: the inflation stops there.
Completeness CheckCompleteness(const std::string& path, std::string* why,
                               uint64_t max_bytes = 0);

// The producer id for a file's batches: a stable hash of its content hash,
// job, rank and batching options. Never 0.
uint64_t WatchedFileProducerId(uint64_t content_hash, absl::string_view job,
                               int32_t rank, const BatchingOptions& batching);

struct TraceWatcherOptions {
  std::string dir;  // The watched directory. Required.
  std::string job;  // Fixed job id for every file; empty: see job_pattern.
  std::optional<JobNamePattern> job_pattern;
  int32_t rank = -1;  // Fixed rank; -1: from the name or the trace.
  std::string host;   // Producing host name for the batch headers.
  AfterSend after_send;
  // Default (empty): "<dir>/.bubblewatch-rejected".
  std::string reject_dir;
  // Where the WatchState lives. Default (empty): "<dir>/.bubblewatch-state".
  std::string state_dir;
  // How long a file's size and mtime must stay unchanged. Default: 2 s.
  absl::Duration settle = absl::Seconds(2);
  // How long a stable file may stay incomplete before it counts as
  // truncated. Default: 5 min.
  absl::Duration incomplete_timeout = absl::Minutes(5);
  // Rescan period: the only trigger without inotify, a safety net with it.
  // Default: 1 s.
  absl::Duration poll_interval = absl::Seconds(1);
  // Use inotify when the kernel offers it. Default: true.
  bool use_inotify = true;
  BatchingOptions batching;
  // ReplayOptions::split_ranks: a file of a job whose declared world size
  // is at least this is keyed JOB@HOST (JOB@rank-R). 0: never.
  int split_ranks = 0;
  // How long to wait for a file's batches to be acknowledged. Default: 60 s.
  absl::Duration flush_timeout = absl::Seconds(60);
  // The most one file may hold: bytes as read (gunzipped; its size on disk
  // for plain JSON and SQLite), and GPU + CPU events. Past either it is
  // rejected as "too large" when the read gets there. Defaults: 2 GiB and
  // 5,000,000 events (the watcher holds 80 to 220 bytes per event while it
  // sends a file, by the events' names and args: 0.4 to 1.1 GB at the
  // limit).
  uint64_t max_file_bytes = uint64_t{2} << 30;
  int64_t max_file_events = 5'000'000;
  // Inspector logs with exec-time-only records (InspectorTailerOptions):
  // the pool's expire and lag, and how long a job's logs must not grow
  // before it is taken to have ended. Defaults: 30 s, 2 s, 15 s.
  ExecTimePoolOptions inspector_pool;
  absl::Duration inspector_pool_idle = absl::Seconds(15);

  // kInvalidArgument listing every problem: no dir, a rank below -1, settle
  // negative, poll_interval or flush_timeout not positive, an
  // incomplete_timeout shorter than settle, max_file_bytes or
  // max_file_events not positive, the Inspector pool's expire or idle not
  // positive or its lag negative. TraceWatcher::Create calls it.
  absl::Status Validate() const;
};

// Counters since creation.
struct WatcherStats {
  int64_t files_sent = 0;
  int64_t files_already_sent = 0;  // Found in the WatchState at startup.
  int64_t batches_sent = 0;        // End markers included (one per file sent).
  int64_t events_sent = 0;
  int64_t files_rejected = 0;
  // Rejected files by reason: "no job", "truncated", "unreadable",
  // "not a trace", "too large".
  std::map<std::string, int64_t> rejected_by_reason;
  // Found rejected in the WatchState (a file whose move to the reject
  // directory failed), not read again.
  int64_t files_already_rejected = 0;
  // Reads of a file's content: gzip inflations for the completeness check,
  // trace parses. What the files cost the watcher beyond hashing; an
  // unchanged file is read once.
  int64_t content_reads = 0;
};

class TraceWatcher {
 public:
  // Opens the state and the reject directory and, if asked, inotify.
  // `producer` must outlive the watcher.
  // Errors: kInvalidArgument for a missing or non-directory `dir`; the
  // WatchState's errors; kPermissionDenied/kUnavailable for the directories.
  static absl::StatusOr<std::unique_ptr<TraceWatcher>> Create(
      TraceWatcherOptions options, EventProducer* producer);
  ~TraceWatcher();

  // Scans the directory once at time `now` and sends every file that is
  // complete. Errors (fatal, see the file comment): a failed delivery or
  // state write.
  absl::Status PollOnce(absl::Time now);

  // Waits until inotify reports a change in the directory or `timeout`
  // passes (without inotify: sleeps `timeout`), or RequestStop() is called.
  void WaitForChange(absl::Duration timeout);

  // PollOnce and WaitForChange until RequestStop() or a fatal error.
  absl::Status Run();
  void RequestStop() { stop_.store(true); }

  WatcherStats stats() const;
  // The Inspector logs followed (ingest/watch/inspector_tailer.h).
  InspectorTailStats inspector_stats() const { return inspector_->stats(); }
  bool using_inotify() const { return inotify_fd_ >= 0; }
  const TraceWatcherOptions& options() const { return options_; }

 private:
  struct FileEntry {
    int64_t size = -1;
    int64_t mtime_ns = 0;
    absl::Time stable_since;      // When size/mtime last changed.
    bool closed = false;          // inotify saw IN_CLOSE_WRITE since then.
    bool done = false;            // Sent (or set aside); skip while unchanged.
    std::string last_incomplete;  // Why it was not whole at the last look.
    // The last verdict depends on more than the file's bytes (a SQLite
    // journal beside it): look again. Otherwise an unchanged file gives the
    // same verdict and is only timed out.
    bool recheck = false;
    absl::Time next_retry;  // When to look again if still unchanged.
    // ContentHash of this version, so that the looks at an unfinished file
    // do not read it all again.
    std::optional<uint64_t> content_hash;
  };

  // A complete file, read and cut into batches, waiting to be sent.
  struct PreparedFile {
    std::string name;
    uint64_t content_hash = 0;
    std::unique_ptr<BatchedTrace> stream;
  };

  TraceWatcher(TraceWatcherOptions options, EventProducer* producer,
               WatchState state);
  bool Ready(const FileEntry& entry, absl::Time now) const;
  // Reads a ready file. Sets `prepared` if it is to be sent; otherwise it
  // was already sent, rejected, or is not complete yet.
  absl::Status HandleFile(const std::string& name, FileEntry& entry,
                          absl::Time now,
                          std::optional<PreparedFile>* prepared);
  // Sends the group merged by event time, waits for every acknowledgement,
  // then records each file and applies --after-send.
  absl::Status Ship(std::vector<PreparedFile>& group);
  // Moves the file to reject_dir (left in place if that fails), logs one
  // line and counts it.
  // and remembers a file left in place in the state (written durably: the
  // error is a state write's).
  absl::Status Reject(const std::string& name, FileEntry& entry,
                      absl::string_view reason, absl::string_view detail);
  // Reject as "too large", naming the bounds.
  absl::Status RejectTooLarge(const std::string& name, FileEntry& entry,
                              absl::string_view detail);
  absl::Status AfterSent(const std::string& name);
  absl::Duration NextWake(absl::Time now) const;
  // Reads pending inotify events; returns the names closed after writing.
  absl::flat_hash_set<std::string> DrainInotify();

  TraceWatcherOptions options_;
  EventProducer* producer_;
  WatchState state_;
  // Follows the directory's growing Inspector logs (*.log, *.jsonl).
  std::unique_ptr<InspectorTailer> inspector_;
  int inotify_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::map<std::string, FileEntry> files_;  // By name; sorted for order.
  mutable std::mutex stats_mu_;
  WatcherStats stats_;  // Guarded by stats_mu_.
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_WATCH_TRACE_WATCHER_H_
