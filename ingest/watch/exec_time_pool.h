// ExecTimePool: the exec-time-only collective records of every log of one
// job's dump directory, pooled so that `produce --watch` can send them live
// (docs/semantics.md#live-inspector-logs, "Exec-time-only records").
//
// Without kernel times a record says how long its member's collective ran,
// not when; the times come from the exec-time-only timeline
// (docs/semantics.md#exec-time-only-waits, ExecTimeInstanceEnd), which
// needs every member of an instance. So the pool:
//
//   - holds records until the job is whole: its largest communicator (the
//     one giving job ranks) has a log for each of its n_ranks ranks;
//   - places an instance (communicator id, coll_sn) once every member (the
//     logs whose headers name that communicator, one per rank) reported it,
//     in one job-wide order: its key is the latest over its members of the
//     record's time estimated from its dump (the previous dump's timestamp
//     plus its place among the records the dump marker announced, spread
//     over the interval), ties by (communicator id, coll_sn);
//   - places in key order only below the safe bound: the least, over the
//     job's live processes, of the time below which none of their future
//     records can fall; so later data never lands before what was placed,
//     and the timeline is a function of the logs alone (final, identical
//     after a restart that re-reads them);
//   - anchors the timeline in wall time: when an instance would end more
//     than `lag` before its key, every process is lifted (a job-wide floor)
//     so that it ends at its key;
//   - gives up an instance still incomplete when the safe bound passed its
//     key by `expire` (a member's ring dropped it, its process stopped):
//     counted, not sent.
//
// Deterministic: the same records (in each log's file order, however cut
// into Add calls) give the same placed instances in the same order.
// Not thread-safe.
#ifndef BUBBLEWATCH_INGEST_WATCH_EXEC_TIME_POOL_H_
#define BUBBLEWATCH_INGEST_WATCH_EXEC_TIME_POOL_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "ingest/inspector/inspector_log.h"
#include "schemas/time_types.h"

namespace bubblewatch {

struct ExecTimePoolOptions {
  // A process whose newest dump is older than this behind the job's newest
  // stops holding the others back; an incomplete instance this far below
  // the safe bound is given up.
  absl::Duration expire = absl::Seconds(30);
  // The most the timeline may fall behind the instances' keys before the
  // job-wide floor lifts it.
  absl::Duration lag = absl::Seconds(2);
};

// One member's kernel of a placed instance.
struct PlacedMember {
  std::string log;  // The log (process) it belongs to.
  int64_t start_ns = 0;
};

struct PlacedInstance {
  std::string comm;  // Communicator id.
  int64_t sn = 0;
  std::string coll;  // "AllReduce".
  int32_t n_ranks = 0;
  int64_t end_ns = 0;
  std::vector<PlacedMember> members;
};

class ExecTimePool {
 public:
  explicit ExecTimePool(ExecTimePoolOptions options = {}) : options_(options) {}

  // Adds what `log` (records in file order, as parsed) holds of the log
  // `name`: its communicators, dump timestamps and exec-time-only
  // collective records (the others are ignored). `pos_offset`: records of
  // the first dump marker's communicator already added before (a chunk
  // that starts inside a dump).
  void Add(const std::string& name, const InspectorLog& log,
           int64_t pos_offset = 0);

  // Places every instance it safely can, at most `limit` (-1: no limit),
  // in order. Instances given up on the way are counted. `flush`: the job's
  // logs stopped growing; every complete instance is placed, whatever the
  // safe bound (records that come after are late), none given up.
  std::vector<PlacedInstance> Advance(int64_t limit = -1, bool flush = false);

  // The job's largest communicator has a log for each of its ranks.
  bool Whole() const;
  // Logs of the largest communicator seen, and its size.
  std::pair<int64_t, int64_t> WholeProgress() const;
  // The job's newest dump minus its first (microseconds): how long it has
  // been seen.
  int64_t SeenUs() const;

  int64_t records_held() const { return held_; }
  int64_t placed() const { return placed_; }
  // Counted outcomes by reason (given-up instances, late records, ranks
  // claimed twice).
  const std::map<std::string, int64_t>& counts() const { return counts_; }

 private:
  struct Proc {
    std::set<int64_t> dumps;  // Dump timestamps (us).
    std::map<std::string, int32_t> rank_in;
    int64_t ready_ns = -1;  // -1: no instance placed yet.
  };
  struct Part {
    int64_t exec_us = 0;
    int64_t t_ns = 0;
  };
  struct Inst {
    std::string coll;
    std::map<std::string, Part> parts;  // By log.
    // The latest of its parts' times; set with the first part (an Inst
    // exists only with parts).
    EventNs key_ns = 0;
  };
  struct Comm {
    int32_t n_ranks = -1;
    std::map<int32_t, std::string> members;  // Rank -> log.
    // The highest coll_sn placed or given up (none: none yet): a record at
    // or below it whose instance is gone is late.
    std::optional<int64_t> max_decided;
  };
  using Key = std::tuple<int64_t, std::string, int64_t>;  // key, comm, sn

  int64_t TimeOf(const Proc& p, int64_t dump_us, int32_t pos,
                 int32_t size) const;
  // None: no process has dumped yet, or none is waited for.
  std::optional<EventNs> SafeBound() const;
  bool Complete(const std::string& comm, const Inst& inst) const;

  ExecTimePoolOptions options_;
  std::map<std::string, Proc> procs_;
  std::map<std::string, Comm> comms_;
  std::map<std::pair<std::string, int64_t>, Inst> insts_;
  std::set<Key> pending_;  // Every instance held, by key.
  int64_t floor_ns_ = 0;
  int64_t held_ = 0;
  int64_t placed_ = 0;
  std::map<std::string, int64_t> counts_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_WATCH_EXEC_TIME_POOL_H_
