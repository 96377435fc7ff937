// The processes, communicators and collective instances of one job's
// Inspector logs (inspector_log.h), turned into the Traces the collective
// analysis takes (docs/semantics.md#inspector-logs):
//
//   - a process is (hostname, pid): one log;
//   - a communicator (header `id`) has its own rank numbering; its members
//     are the processes whose logs name it, by their rank in it;
//   - an instance is (communicator, coll_sn), the same on every member;
//   - the job rank of a process is its rank in a communicator spanning the
//     whole job (every process a member), when one was seen; otherwise it
//     is unknown and the process is numbered by (hostname, pid) instead.
//
// Each process becomes one Trace (device 0, one stream per communicator)
// with one kernel and one CollectiveKernel per collective record: the
// communicator's id as process group, coll_sn as Seq, its members' job
// ranks as `Process Group Ranks`. Verbose logs (every record with kernel
// start and stop) keep their times, on their host's clock. Exec-time-only
// logs get a timeline built so that each instance ends together on every
// member and each member's kernel lasts its exec time (so the member with
// the shortest exec time arrived last, and every other member's wait is its
// exec time minus the shortest), the instances of a process in a fixed
// order across its communicators (docs/semantics.md#exec-time-only-waits).
#ifndef BUBBLEWATCH_INGEST_INSPECTOR_INSPECTOR_JOB_H_
#define BUBBLEWATCH_INGEST_INSPECTOR_INSPECTOR_JOB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ingest/inspector/inspector_log.h"
#include "schemas/trace.h"

namespace bubblewatch {

struct InspectorProcess {
  std::string host;
  int64_t pid = -1;
  std::string file;
  // Its rank in the whole-job communicator; -1 when none was seen.
  int32_t job_rank = -1;
  // The rank the analysis knows it by: job_rank when known, else its index
  // in (host, pid) order. Unique.
  int32_t rank = 0;
  std::string clock_domain;  // "host:<hostname>", or "exec-time" timeline.
  int64_t coll_records = 0;
  int64_t p2p_records = 0;
  int64_t coll_dropped = 0;
  int64_t p2p_dropped = 0;
  int64_t lines_skipped = 0;
  std::string version;
};

struct InspectorCommunicator {
  std::string id;
  std::string name;  // May be empty.
  int32_t n_ranks = -1;
  // members[r]: the process (index into InspectorJob::processes) with rank
  // r in it; -1 when no log names that rank.
  std::vector<int> members;
  int64_t instances = 0;     // Distinct coll_sn over its members.
  int64_t complete = 0;      // ... seen on every member.
  int64_t coll_dropped = 0;  // Over its members.
  bool whole_job = false;    // The communicator that gives job ranks.
};

struct InspectorJob {
  std::vector<InspectorProcess> processes;           // By (host, pid).
  std::vector<InspectorCommunicator> communicators;  // By id.
  std::vector<Trace> traces;  // One per process, same order.
  bool verbose = false;       // Kernel times used (else exec times).
  bool job_ranks_known = false;
  int32_t world_size = -1;
  // Job-level counts by reason ("rank 3 of communicator 0x.. claimed by two
  // processes: 2 processes' records dropped", ...), besides each log's own.
  SkipCounts skipped;
  // Every log's skips added up, by reason.
  SkipCounts log_skipped;
  int64_t coll_records = 0;
  int64_t p2p_records = 0;
  int64_t coll_dropped = 0;
  int64_t p2p_dropped = 0;
};

// One instance of the exec-time-only timeline
// (docs/semantics.md#exec-time-only-waits), shared by BuildInspectorJob and
// the live pool (ingest/watch/exec_time_pool.h): each member is ready at
// `ready_ns` (the end of its previous instance) and runs `exec_ns`; the
// instance ends at the latest ready + exec over its members, and each
// member's kernel is [end − exec_ns, end). Returns that end; -1 when it
// would pass kMaxEventTimeNs (or no member).
struct ExecTimeMember {
  int64_t ready_ns = 0;
  int64_t exec_ns = 0;
};
int64_t ExecTimeInstanceEnd(const std::vector<ExecTimeMember>& members);

// One Inspector collective record as the analysis takes it, appended to
// `trace` (offline here, live by the watcher: ingest/watch/
// inspector_tailer.h): a kernel "nccl<coll>" [start_ns, end_ns) on device 0
// and `stream`, and its collective record: `coll` in lower case, the
// communicator id as process group, coll_sn as Seq, n_ranks as group size,
// `group_ranks` as given (kNoName when the members' job ranks are unknown).
void AppendInspectorCollective(Trace& trace, NameInterner& names,
                               absl::string_view comm_id,
                               absl::string_view coll, int64_t coll_sn,
                               int32_t n_ranks, int32_t stream,
                               NameId group_ranks, int64_t start_ns,
                               int64_t end_ns);

// `logs` and `files` in the same order. Errors: kInvalidArgument for no
// log, or no collective record at all. Two logs of one (host, pid) are
// merged. Everything else is a counted outcome.
absl::StatusOr<InspectorJob> BuildInspectorJob(
    std::vector<InspectorLog> logs, const std::vector<std::string>& files);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_INSPECTOR_INSPECTOR_JOB_H_
