// InspectorTailer: follows the growing NCCL/RCCL Inspector logs of one dump
// directory for `bubblewatch produce --watch` (docs/produce.md, "Inspector
// logs"), sending each new complete batch of records as EventBatches of the
// log's process, exactly once across restarts.
//
// What it follows: regular files of the directory named *.log or *.jsonl
// (the plugin writes `<hostname>-pid<PID>.log`) whose first line looks like
// an Inspector log (LooksLikeInspectorLog). Gzipped logs are finished ones:
// `analyze` reads them, the tailer does not.
//
// What it sends (docs/semantics.md#live-inspector-logs): each log is one
// process. Its job rank is its rank in the largest communicator its log has
// named so far (ties: the lower id), the world size that communicator's
// n_ranks. Each verbose collective record becomes one kernel `nccl<Coll>` of
// the process's device and one collective record (communicator id as process
// group, coll_sn as Seq, n_ranks as group size; members inferred by the
// processor) at its kernel times (epoch microseconds of its host's clock).
// Exec-time-only records have no times of their own: they are pooled per
// job (ExecTimePool, ingest/watch/exec_time_pool.h) and each instance is
// sent once every member reported it, at the times of the exec-time-only
// timeline; while the directory does not hold every process of the job
// they are held and counted under kExecTimeOnlySkip, and dropped (still
// counted) once its dumps span `exec.expire` without it. p2p records are
// counted, not sent; ring drops the dump markers report are counted.
//
// Exec-time-only exactly once: per job the file "inspector-exec" keeps how
// many instances were acknowledged, the end of a range in flight, and each
// log's producer id and next sequence of its exec-time stream. A restart
// rebuilds the pool from the logs (each read from its start to its
// acknowledged offset), places the acknowledged instances again without
// sending them, and resends a range in flight byte for byte.
//
// Chunks. A poll reads the bytes after the file's offset up to its last
// newline (a partial last line waits for its newline). If the last dump
// marker in them announces more records than follow it, the chunk ends
// before that marker while the file still grew within `settle` (a dump
// being written goes whole). A chunk that starts inside a dump is read
// after that dump's marker line, kept with the offset (the context of bare
// v4.3 records), so a chunk boundary loses nothing.
//
// Exactly once. Per file the state keeps (offset, producer id, next
// sequence, pending end). Before a chunk [offset, end) is sent its end is
// written durably as pending; after every batch of it is acknowledged the
// offset moves to end and the next sequence past its batches, durably. A
// restart with a pending chunk resends exactly those bytes, which give the
// same batches with the same (producer id, sequence): the processor drops
// the ones it counted. The producer id is a hash of the job, the file name
// and the file's first line (a new run's log is a new producer).
//
// Truncation (the file shorter than the offset) and replacement (another
// inode, or the first bytes read before differ) are counted and logged; the
// file is then followed from its start as a new producer.
//
// Thread safety: one thread calls PollOnce; stats() from any thread.
#ifndef BUBBLEWATCH_INGEST_WATCH_INSPECTOR_TAILER_H_
#define BUBBLEWATCH_INGEST_WATCH_INSPECTOR_TAILER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "ingest/batched_trace.h"
#include "ingest/event_producer.h"
#include "ingest/inspector/inspector_log.h"
#include "ingest/watch/exec_time_pool.h"
#include "ingest/watch/job_name_pattern.h"
#include "schemas/trace.h"

namespace bubblewatch {

// The skip reason of collective records without kernel times while the
// directory does not hold a log of every process of their job.
inline constexpr char kExecTimeOnlySkip[] =
    "exec-time only: not every process of the job has a log in this "
    "directory (live needs all of them, one dump directory per job, or "
    "verbose records: NCCL_INSPECTOR_DUMP_VERBOSE=1)";

// True for the names the tailer considers: *.log, *.jsonl, not starting
// with '.'.
bool IsTailedInspectorName(absl::string_view file_name);

// The job a dump directory's name gives: "<id>" of "nccl-inspector-<id>"
// (the plugin's default), empty otherwise and for "unknown-jobid".
std::string JobFromInspectorDirName(absl::string_view dir);

// What the tailer remembers of one log (persisted; docs/state.md,
// "Inspector offsets").
struct TailedLog {
  std::string name;
  uint64_t dev = 0;
  uint64_t ino = 0;
  int64_t head_len = 0;      // Bytes of the file's start that head_hash covers.
  uint64_t head_hash = 0;    // ContentHash of those bytes.
  uint64_t producer_id = 0;  // 0: none yet (nothing sent).
  uint64_t next_sequence = 0;
  int64_t offset = 0;        // Acknowledged through here.
  int64_t pending_end = -1;  // A chunk [offset, pending_end) in flight.
  int32_t rank = -1;
  int32_t world_size = -1;
  std::string rank_comm;  // The communicator that gave the rank.
  std::string host;
  int64_t pid = -1;  // The log's process id (metadata or file name); -1.
  // The last dump marker line before `offset` and the records after it
  // already read: the context of the bare (v4.3+) records that follow.
  std::string context;
  int64_t context_seen = 0;
  // Times the file was found truncated or replaced: part of the producer
  // id, so that a rewritten file starting with the same line is new.
  int64_t generation = 0;
  friend bool operator==(const TailedLog&, const TailedLog&) = default;
};

// The offsets file: "<state_dir>/inspector-offsets", a versioned text file
// rewritten whole through a temporary file, fsync and rename.
class InspectorOffsets {
 public:
  // Errors: the file system's; kDataLoss for a file that does not parse or
  // a newer version (the message says deleting it resends from the start).
  static absl::StatusOr<InspectorOffsets> Open(const std::string& state_dir);
  std::map<std::string, TailedLog>& logs() { return logs_; }
  absl::Status Write() const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::map<std::string, TailedLog> logs_;
};

// One chunk of a log turned into what is sent: `trace` holds the kernels and
// collective records, `skipped` what was not sent by reason; rank,
// world_size, rank_comm, host and pid updated from `before` by the chunk's
// communicators and metadata.
struct InspectorChunk {
  Trace trace;
  SkipCounts skipped;
  int64_t records = 0;  // Collective records sent.
  // The chunk as parsed (after the context): its exec-time-only records go
  // to the job's pool, `pos_offset` the context marker's records before.
  InspectorLog log;
  int64_t pos_offset = 0;
  // Records the plugin's ring dropped, as the chunk's dump markers say
  // (`*_dropped_since_last_dump`; the context marker's counted before).
  int64_t ring_dropped = 0;
  TailedLog after;  // `before` with rank, world_size, rank_comm, host, pid.
  bool rank_changed = false;
};

// Parses `bytes` (complete lines) of the log `file_name` into a chunk,
// after `before.context`; `after` carries the context for the next one.
InspectorChunk BuildInspectorChunk(absl::string_view bytes,
                                   absl::string_view file_name,
                                   const TailedLog& before);

// Where a chunk read from `offset` ends, given the bytes after it (`tail`):
// after the last newline, or before the last dump marker when it announces
// more records than follow it and `hold_incomplete_dump`. 0: nothing to send.
int64_t ChunkLength(absl::string_view tail, bool hold_incomplete_dump);

struct InspectorTailerOptions {
  std::string dir;
  std::string state_dir;  // Where inspector-offsets lives. Required.
  std::string job;        // Fixed job id; empty: pattern, then dir name.
  std::optional<JobNamePattern> job_pattern;
  BatchingOptions batching;
  absl::Duration settle = absl::Seconds(2);
  absl::Duration flush_timeout = absl::Seconds(60);
  // The most bytes one poll reads of one log (a chunk, cut after its last
  // whole line): what bounds the watcher's memory per log, however large
  // the log (docs/produce.md#bubblewatch-produce---watch). A line longer
  // than this is one counted outcome; the log is not followed past it.
  int64_t max_chunk_bytes = int64_t{64} << 20;
  ExecTimePoolOptions exec;
  // A job whose logs did not grow for this long is taken to have ended:
  // its pool places every complete instance (ExecTimePool::Advance flush).
  absl::Duration exec_idle = absl::Seconds(15);
};

struct InspectorTailStats {
  int64_t logs = 0;  // Logs followed now.
  int64_t chunks_sent = 0;
  int64_t batches_sent = 0;
  int64_t records_sent = 0;
  int64_t bytes_read = 0;
  int64_t truncated = 0;
  int64_t replaced = 0;
  int64_t resent_pending = 0;  // Pending chunks resent after a restart.
  int64_t rank_changes = 0;
  // Records the plugin's ring dropped before a dump (dump_stats): missing
  // on their process, their instances unmatched in its windows.
  int64_t ring_dropped = 0;
  // Exec-time-only records: instances sent, and records held in a pool
  // waiting for their instance's other members.
  int64_t exec_instances_sent = 0;
  int64_t exec_records_held = 0;
  // Records and lines not sent, by reason (the reader's, kExecTimeOnlySkip,
  // "p2p_perf records (not matched live)", "no job", ...).
  std::map<std::string, int64_t> skipped;
};

class InspectorTailer {
 public:
  static absl::StatusOr<std::unique_ptr<InspectorTailer>> Create(
      InspectorTailerOptions options, EventProducer* producer);

  // Looks at every Inspector log of the directory at `now` and sends what
  // is new. Errors (fatal: the caller exits, its restart resends the
  // pending chunk): a failed delivery or offsets write.
  absl::Status PollOnce(absl::Time now);

  InspectorTailStats stats() const;

 private:
  InspectorTailer(InspectorTailerOptions options, EventProducer* producer,
                  InspectorOffsets offsets)
      : options_(std::move(options)),
        producer_(producer),
        offsets_(std::move(offsets)) {}
  absl::Status Follow(const std::string& name, absl::Time now);
  // Places and sends what the job pools can; resends a range in flight.
  absl::Status SendPooled(absl::Time now);
  // Sends `trace` as batches of `identity`'s stream, sequences from
  // `first_sequence`, with no observation (a log records every collective:
  // docs/semantics.md#live-inspector-logs); returns how many. Unflushed.
  absl::StatusOr<size_t> SendAsBatches(const std::string& job, Trace trace,
                                       const BatchHeader& identity,
                                       uint64_t first_sequence);
  absl::Status WriteExecState() const;
  absl::Status LoadExecState();
  void UpdateExecStats();

  // A job's exec-time-only pool and what was sent of it.
  struct JobPool {
    explicit JobPool(ExecTimePoolOptions o) : pool(o) {}
    ExecTimePool pool;
    bool partial = false;  // Judged not whole: records counted, not held.
    int64_t not_sent = 0;  // Records counted under kExecTimeOnlySkip.
    int64_t acked = 0;     // Instances acknowledged.
    int64_t pending_to = -1;
    bool flushed = false;          // A flush placed instances (persisted).
    bool in_flight_flush = false;  // The range in flight is a flush's.
    absl::Time last_grew = absl::InfinitePast();
    struct Stream {
      uint64_t producer_id = 0;
      uint64_t next_sequence = 0;
    };
    std::map<std::string, Stream> streams;  // By log name.
  };
  JobPool& PoolOf(const std::string& job);
  std::map<std::string, JobPool> pools_;
  std::string exec_path_;
  std::string JobOf(const std::string& name) const;
  void Count(const std::string& reason, int64_t n);

  struct Seen {
    int64_t size = -1;
    absl::Time grew_at;
    bool is_log = false;
    bool checked = false;
    bool no_job_logged = false;
    bool long_line_counted = false;
  };

  InspectorTailerOptions options_;
  EventProducer* producer_;
  InspectorOffsets offsets_;
  std::map<std::string, Seen> seen_;
  mutable std::mutex stats_mu_;
  InspectorTailStats stats_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_WATCH_INSPECTOR_TAILER_H_
