#include "ingest/inspector/inspector_job.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace bubblewatch {
namespace {

// One kept collective record of a process.
struct Rec {
  int comm = 0;  // Index into InspectorJob::communicators.
  const InspectorOp* op = nullptr;
  const InspectorLog* log = nullptr;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

// An instance: (communicator, coll_sn) and its records, one per member.
struct Instance {
  int comm = 0;
  int64_t sn = 0;
  std::vector<std::pair<int, size_t>> parts;  // (process, index in recs)
};

constexpr int64_t kExecTimelineOriginNs = 1'000'000'000;

}  // namespace

int64_t ExecTimeInstanceEnd(const std::vector<ExecTimeMember>& members) {
  if (members.empty()) return -1;
  int64_t end = 0;
  for (const ExecTimeMember& m : members) {
    // Exec times are at most a day each (the reader's bound), so a sum can
    // only leave the accepted range after ~10^5 days of them.
    if (m.exec_ns < 0 || m.ready_ns < 0 ||
        m.ready_ns > kMaxEventTimeNs - m.exec_ns) {
      return -1;
    }
    end = std::max(end, m.ready_ns + m.exec_ns);
  }
  return end;
}

void AppendInspectorCollective(Trace& trace, NameInterner& names,
                               absl::string_view comm_id,
                               absl::string_view coll, int64_t coll_sn,
                               int32_t n_ranks, int32_t stream,
                               NameId group_ranks, int64_t start_ns,
                               int64_t end_ns) {
  GpuActivity a;
  a.start_ns = start_ns;
  a.end_ns = end_ns;
  a.name = names.Intern(absl::StrCat("nccl", coll));
  a.device = 0;
  a.stream = stream;
  trace.gpu.push_back(a);
  CollectiveKernel k;
  k.start_ns = start_ns;
  k.end_ns = end_ns;
  k.device = 0;
  k.stream = stream;
  k.kernel_name = a.name;
  k.collective = names.Intern(absl::AsciiStrToLower(coll));
  k.process_group = names.Intern(comm_id);
  k.group_ranks = group_ranks;
  k.seq = coll_sn;
  k.group_size = n_ranks;
  trace.collectives.push_back(k);
}

absl::StatusOr<InspectorJob> BuildInspectorJob(
    std::vector<InspectorLog> logs, const std::vector<std::string>& files) {
  if (logs.empty()) {
    return absl::InvalidArgumentError("no Inspector log");
  }
  InspectorJob job;

  // Processes: (host, pid); a log naming neither is a process of its own.
  std::map<std::tuple<std::string, int64_t, std::string>, std::vector<size_t>>
      by_process;
  for (size_t i = 0; i < logs.size(); ++i) {
    const std::string file = i < files.size() ? files[i] : "";
    const bool named = !logs[i].hostname.empty() || logs[i].pid >= 0;
    by_process[{logs[i].hostname, logs[i].pid, named ? "" : file}].push_back(i);
  }
  std::vector<std::vector<size_t>> logs_of;
  for (auto& [key, idx] : by_process) {
    InspectorProcess p;
    p.host = std::get<0>(key);
    p.pid = std::get<1>(key);
    std::vector<std::string> names;
    for (size_t i : idx) {
      if (i < files.size()) names.push_back(files[i]);
      const InspectorLog& log = logs[i];
      p.coll_records += log.coll_records;
      p.p2p_records += log.p2p_records;
      p.coll_dropped += log.coll_dropped();
      p.p2p_dropped += log.p2p_dropped();
      p.lines_skipped += log.lines_skipped();
      if (p.version.empty()) p.version = log.version;
      for (const auto& [reason, n] : log.skipped) job.log_skipped[reason] += n;
    }
    p.file = absl::StrJoin(names, ", ");
    if (idx.size() > 1) {
      job.skipped["logs of one process merged"] +=
          static_cast<int64_t>(idx.size()) - 1;
    }
    job.coll_records += p.coll_records;
    job.p2p_records += p.p2p_records;
    job.coll_dropped += p.coll_dropped;
    job.p2p_dropped += p.p2p_dropped;
    job.processes.push_back(std::move(p));
    logs_of.push_back(idx);
  }
  if (job.coll_records == 0) {
    return absl::InvalidArgumentError(
        "the Inspector logs hold no collective record (coll_perf)");
  }
  const int n_proc = static_cast<int>(job.processes.size());

  // Communicators, by id, and who holds which rank of each.
  std::map<std::string, int> comm_index;
  for (const InspectorLog& log : logs) {
    for (const InspectorComm& c : log.comms) comm_index.emplace(c.id, 0);
  }
  for (auto& [id, index] : comm_index) {
    index = static_cast<int>(job.communicators.size());
    InspectorCommunicator c;
    c.id = id;
    job.communicators.push_back(std::move(c));
  }
  // (process, communicator) pairs whose records are not used.
  absl::flat_hash_set<std::pair<int, int>> excluded;
  // The rank of each process in each communicator.
  std::vector<absl::flat_hash_map<int, int32_t>> rank_in(n_proc);
  for (int p = 0; p < n_proc; ++p) {
    for (size_t li : logs_of[p]) {
      for (const InspectorComm& lc : logs[li].comms) {
        const int ci = comm_index[lc.id];
        InspectorCommunicator& c = job.communicators[ci];
        if (c.name.empty()) c.name = lc.name;
        c.n_ranks = std::max(c.n_ranks, lc.n_ranks);
        c.coll_dropped += lc.coll_dropped();
        if (lc.rank >= 0) rank_in[p].emplace(ci, lc.rank);
      }
    }
  }
  for (int p = 0; p < n_proc; ++p) {
    for (const auto& [ci, r] : rank_in[p]) {
      InspectorCommunicator& c = job.communicators[ci];
      if (c.n_ranks > 0 && r >= c.n_ranks) {
        job.skipped[absl::StrCat("process claims rank ", r, " of ", c.n_ranks,
                                 " in communicator ", c.id,
                                 ": its records of it dropped")]++;
        excluded.insert({p, ci});
        continue;
      }
      if (static_cast<int32_t>(c.members.size()) <= r) {
        c.members.resize(r + 1, -1);
      }
      if (c.members[r] >= 0 && c.members[r] != p) {
        const InspectorProcess& first = job.processes[c.members[r]];
        const InspectorProcess& second = job.processes[p];
        job.skipped[absl::StrCat("rank ", r, " of communicator ", c.id,
                                 " claimed by ", first.host, " pid ", first.pid,
                                 " and ", second.host, " pid ", second.pid,
                                 ": the second's records of it dropped")]++;
        excluded.insert({p, ci});
        continue;
      }
      c.members[r] = p;
    }
  }
  for (InspectorCommunicator& c : job.communicators) {
    if (c.n_ranks > static_cast<int32_t>(c.members.size())) {
      c.members.resize(c.n_ranks, -1);
    }
  }

  // Job ranks: the first communicator (by id) with every process a member
  // and no other.
  for (InspectorCommunicator& c : job.communicators) {
    if (static_cast<int>(c.members.size()) != n_proc) continue;
    if (std::count(c.members.begin(), c.members.end(), -1) > 0) continue;
    c.whole_job = true;
    job.job_ranks_known = true;
    job.world_size = n_proc;
    for (int r = 0; r < n_proc; ++r) {
      job.processes[c.members[r]].job_rank = r;
    }
    break;
  }
  for (int p = 0; p < n_proc; ++p) {
    InspectorProcess& proc = job.processes[p];
    proc.rank = job.job_ranks_known ? proc.job_rank : p;
  }

  // Each process's collective records, without duplicates (comm, sn).
  std::vector<std::vector<Rec>> recs(n_proc);
  bool all_verbose = true;
  bool any_verbose = false;
  for (int p = 0; p < n_proc; ++p) {
    absl::flat_hash_set<std::pair<int, int64_t>> seen;
    for (size_t li : logs_of[p]) {
      const InspectorLog& log = logs[li];
      for (const InspectorOp& op : log.ops) {
        if (op.p2p) continue;
        const int ci = comm_index[log.comms[op.comm].id];
        if (excluded.contains({p, ci})) {
          job.skipped
              ["records of a communicator rank claimed twice or out "
               "of range (dropped)"]++;
          continue;
        }
        if (!rank_in[p].contains(ci)) {
          job.skipped
              ["records of a communicator without this process's "
               "rank (dropped)"]++;
          continue;
        }
        if (!seen.insert({ci, op.sn}).second) {
          job.skipped
              ["duplicate records (communicator, coll_sn) in one "
               "process (dropped)"]++;
          continue;
        }
        Rec r;
        r.comm = ci;
        r.op = &op;
        r.log = &log;
        recs[p].push_back(r);
        if (op.kernel_start_us >= 0) {
          any_verbose = true;
        } else {
          all_verbose = false;
        }
      }
    }
  }
  job.verbose = all_verbose && any_verbose;
  if (any_verbose && !all_verbose) {
    job.skipped
        ["kernel timestamps on only some records: exec times used "
         "for all"]++;
  }

  // Instances.
  absl::flat_hash_map<std::pair<int, int64_t>, size_t> instance_of;
  std::vector<Instance> instances;
  for (int p = 0; p < n_proc; ++p) {
    for (size_t k = 0; k < recs[p].size(); ++k) {
      const Rec& r = recs[p][k];
      auto [it, fresh] = instance_of.emplace(std::make_pair(r.comm, r.op->sn),
                                             instances.size());
      if (fresh) instances.push_back({r.comm, r.op->sn, {}});
      instances[it->second].parts.push_back({p, k});
    }
  }
  for (const Instance& inst : instances) {
    InspectorCommunicator& c = job.communicators[inst.comm];
    ++c.instances;
    const int64_t members =
        c.members.size() - std::count(c.members.begin(), c.members.end(), -1);
    if (static_cast<int64_t>(inst.parts.size()) == members &&
        static_cast<int64_t>(c.members.size()) == members) {
      ++c.complete;
    }
  }

  if (job.verbose) {
    for (auto& pr : recs) {
      for (Rec& r : pr) {
        r.start_ns = r.op->kernel_start_us * 1000;
        r.end_ns = r.op->kernel_stop_us * 1000;
      }
    }
  } else {
    // docs/semantics.md#exec-time-only-waits: the instances in one order
    // for every process (by how far through its communicator's sequence
    // each one is; at equal fractions the communicator with more
    // instances first, as the outer loop's collective closes a step), each
    // ending when its latest member, started when that member's previous
    // instance ended, has run its exec time.
    // Identities of min and max: read only for communicators with an
    // instance.
    std::vector<std::pair<int64_t, int64_t>> range(job.communicators.size(),
                                                   {INT64_MAX, INT64_MIN});
    for (const Instance& inst : instances) {
      auto& [lo, hi] = range[inst.comm];
      lo = std::min(lo, inst.sn);
      hi = std::max(hi, inst.sn);
    }
    std::vector<size_t> order(instances.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    auto key = [&](size_t i) {
      const Instance& inst = instances[i];
      const auto& [lo, hi] = range[inst.comm];
      // In 128 bits: coll_sn may be anything up to 2^63 - 1.
      return std::make_pair(static_cast<__int128>(inst.sn) - lo + 1,
                            static_cast<__int128>(hi) - lo + 1);
    };
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const auto [na, da] = key(a);
      const auto [nb, db] = key(b);
      const __int128 lhs = na * db;
      const __int128 rhs = nb * da;
      if (lhs != rhs) return lhs < rhs;
      if (da != db) return da > db;
      if (instances[a].comm != instances[b].comm) {
        return instances[a].comm < instances[b].comm;
      }
      return instances[a].sn < instances[b].sn;
    });
    std::vector<int64_t> ready(n_proc, kExecTimelineOriginNs);
    std::vector<ExecTimeMember> members;
    for (size_t i : order) {
      const Instance& inst = instances[i];
      members.clear();
      for (const auto& [p, k] : inst.parts) {
        members.push_back({ready[p], recs[p][k].op->exec_us * 1000});
      }
      const int64_t end = ExecTimeInstanceEnd(members);
      if (end < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(job.processes[inst.parts.front().first].file,
                         ": exec times add up past the accepted time "
                         "range (docs/semantics.md#units-and-events)"));
      }
      for (const auto& [p, k] : inst.parts) {
        Rec& r = recs[p][k];
        r.end_ns = end;
        r.start_ns = end - r.op->exec_us * 1000;
        ready[p] = end;
      }
    }
  }

  // Point-to-point records (docs/semantics.md#inspector-logs, "Point to
  // point"): with kernel times, each becomes a send or recv kernel whose
  // other end is the process holding p2p_peer in its communicator, numbered
  // k among the process's records with that peer in that communicator in
  // p2p_sn order (the order NCCL runs a pair's operations on both sides).
  // p2p_sn itself counts each process's own point-to-point operations with
  // any peer, so it does not match across the two ends. A communicator
  // whose ring dropped point-to-point records on any member is not paired:
  // a lost record would shift k on one side and pair the wrong operations.
  std::vector<int64_t> comm_p2p_dropped(job.communicators.size(), 0);
  for (const InspectorLog& log : logs) {
    for (const InspectorComm& lc : log.comms) {
      comm_p2p_dropped[comm_index[lc.id]] += lc.p2p_dropped();
    }
  }
  struct P2pRec {
    int comm = 0;
    const InspectorOp* op = nullptr;
    const InspectorLog* log = nullptr;
    int32_t peer = -1;  // The peer's rank as the analysis knows it.
  };
  std::vector<std::vector<P2pRec>> p2p(n_proc);
  std::vector<int64_t> p2p_unpaired(n_proc, 0);
  for (int p = 0; p < n_proc; ++p) {
    if (!job.verbose) {
      p2p_unpaired[p] = job.processes[p].p2p_records;
      continue;
    }
    absl::flat_hash_set<std::pair<int, int64_t>> seen;
    for (size_t li : logs_of[p]) {
      const InspectorLog& log = logs[li];
      for (const InspectorOp& op : log.ops) {
        if (!op.p2p) continue;
        const int ci = comm_index[log.comms[op.comm].id];
        const InspectorCommunicator& c = job.communicators[ci];
        const int peer =
            op.peer >= 0 && op.peer < static_cast<int32_t>(c.members.size())
                ? c.members[op.peer]
                : -1;
        if (excluded.contains({p, ci}) || !rank_in[p].contains(ci) ||
            peer < 0 || peer == p || op.kernel_start_us < 0 ||
            comm_p2p_dropped[ci] > 0 || !seen.insert({ci, op.sn}).second) {
          ++p2p_unpaired[p];
          continue;
        }
        p2p[p].push_back({ci, &op, &log, job.processes[peer].rank});
      }
    }
    std::stable_sort(
        p2p[p].begin(), p2p[p].end(), [](const P2pRec& a, const P2pRec& b) {
          return std::tie(a.comm, a.op->sn) < std::tie(b.comm, b.op->sn);
        });
  }

  // The traces.
  std::vector<std::string> group_ranks(job.communicators.size());
  for (size_t ci = 0; ci < job.communicators.size(); ++ci) {
    std::vector<int32_t> ranks;
    for (int p : job.communicators[ci].members) {
      if (p >= 0) ranks.push_back(job.processes[p].rank);
    }
    group_ranks[ci] = absl::StrCat("[", absl::StrJoin(ranks, ", "), "]");
  }
  for (int p = 0; p < n_proc; ++p) {
    InspectorProcess& proc = job.processes[p];
    proc.clock_domain =
        job.verbose ? absl::StrCat("host:", proc.host) : "exec-time";
    Trace t;
    t.rank = proc.job_rank;
    t.world_size = job.world_size;
    t.host = proc.host;
    t.pid = proc.pid;
    t.source_format = "inspector";
    NameInterner names(&t);
    t.gpu.reserve(recs[p].size());
    t.collectives.reserve(recs[p].size());
    for (const Rec& r : recs[p]) {
      const InspectorCommunicator& c = job.communicators[r.comm];
      AppendInspectorCollective(
          t, names, c.id, r.log->op_names[r.op->name], r.op->sn, c.n_ranks,
          r.comm, names.Intern(group_ranks[r.comm]), r.start_ns, r.end_ns);
    }
    // k per (communicator, peer), in p2p_sn order; on streams of their own
    // (after the communicators'), a send and a recv of one group may
    // overlap.
    const int32_t p2p_stream = static_cast<int32_t>(job.communicators.size());
    absl::flat_hash_map<std::pair<int, int32_t>, int64_t> next_k;
    for (const P2pRec& r : p2p[p]) {
      const InspectorCommunicator& c = job.communicators[r.comm];
      const int64_t k = next_k[{r.comm, r.peer}]++;
      AppendInspectorCollective(t, names, c.id, r.log->op_names[r.op->name],
                                r.op->sn, c.n_ranks, p2p_stream + r.comm,
                                kNoName, r.op->kernel_start_us * 1000,
                                r.op->kernel_stop_us * 1000);
      t.collectives.back().peer = r.peer;
      t.collectives.back().pair_index = k;
    }
    if (p2p_unpaired[p] > 0) {
      t.skipped[job.verbose
                    ? "p2p_perf records not paired (no kernel times, peer "
                      "unknown, or their communicator's ring dropped "
                      "point-to-point records)"
                    : "p2p_perf records (exec times only: not paired)"] +=
          p2p_unpaired[p];
    }
    job.traces.push_back(std::move(t));
  }
  return job;
}

}  // namespace bubblewatch
