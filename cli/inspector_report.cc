#include "cli/inspector_report.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "absl/container/btree_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "analysis/collectives.h"
#include "base/human_duration.h"
#include "base/json_writer.h"
#include "cli/collectives_report.h"
#include "cli/text_style.h"
#include "ingest/inspector/inspector_job.h"
#include "ingest/inspector/inspector_log.h"
#include "schemas/analysis_json.h"

namespace bubblewatch {
namespace {

constexpr absl::string_view kDumpDirPrefix = "nccl-inspector-";

const RankCollectiveStats* StatsOf(const CollectiveAnalysis& c, int32_t rank) {
  for (const RankCollectiveStats& r : c.ranks) {
    if (r.rank == rank) return &r;
  }
  return nullptr;
}

// Every skip reason, the logs' and the job's, by reason.
absl::btree_map<std::string, int64_t> AllSkips(const InspectorJob& job) {
  absl::btree_map<std::string, int64_t> all;
  for (const auto& [reason, n] : job.log_skipped) all[reason] += n;
  for (const auto& [reason, n] : job.skipped) all[reason] += n;
  for (const Trace& t : job.traces) {
    for (const auto& [reason, n] : t.skipped) all[reason] += n;
  }
  return all;
}

std::string RenderText(const InspectorJob& job, const CollectiveAnalysis& c,
                       const std::string& job_name, bool color) {
  Styler st(color);
  std::string out = absl::StrCat(
      "bubblewatch analyze  ", job.processes.size(), " Inspector log",
      job.processes.size() == 1 ? "" : "s",
      job_name.empty() ? "" : absl::StrCat(", job ", job_name), "\n");
  absl::StrAppend(
      &out, "  ", job.coll_records, " collective records, ", job.p2p_records,
      " point-to-point (not matched); timing: ",
      job.verbose ? "kernel start and stop (verbose records)"
                  : "exec times only (docs/semantics.md#exec-time-only-waits)",
      "\n");
  if (job.coll_dropped + job.p2p_dropped > 0) {
    absl::StrAppend(&out, "  ",
                    st.Bold(absl::StrCat(job.coll_dropped + job.p2p_dropped,
                                         " records dropped by the plugin's "
                                         "ring buffers")),
                    " (", job.coll_dropped, " collective, ", job.p2p_dropped,
                    " p2p): their instances are missing; raise "
                    "NCCL_INSPECTOR_DUMP_COLL_RING_SIZE or dump more often\n");
  }
  if (!job.job_ranks_known) {
    absl::StrAppend(&out,
                    "  Job ranks unknown: no communicator spans every "
                    "process; 'rank' below is the process's index by (host, "
                    "pid)\n");
  }
  const absl::btree_map<std::string, int64_t> skips = AllSkips(job);
  if (!skips.empty()) {
    absl::StrAppend(&out, "  Skipped or counted:\n");
    for (const auto& [reason, n] : skips) {
      absl::StrAppend(&out, "    ", n, "  ", reason, "\n");
    }
  }

  absl::StrAppend(&out, "\n", st.Bold("Processes"), "\n");
  absl::StrAppend(&out,
                  absl::StrFormat("  %5s %-20s %8s %8s %8s %10s %10s "
                                  "%6s %10s  %s\n",
                                  "rank", "host", "pid", "records", "dropped",
                                  "waited", "caused", "last", "clock", "file"));
  for (const InspectorProcess& p : job.processes) {
    const RankCollectiveStats* r = StatsOf(c, p.rank);
    std::string clock = "-";
    if (r != nullptr && r->clock_corrected) {
      clock = absl::StrFormat("%+.0f us", JsonUs(r->clock_offset_ns));
    }
    absl::StrAppend(
        &out,
        absl::StrFormat("  %5s %-20s %8d %8d %8d %10s %10s %6d %10s  %s\n",
                        job.job_ranks_known ? absl::StrCat(p.rank)
                                            : absl::StrCat("#", p.rank),
                        Shorten(p.host, 20), p.pid, p.coll_records,
                        p.coll_dropped, HumanDuration(r ? r->comm_wait_ns : 0),
                        HumanDuration(r ? r->wait_caused_ns : 0),
                        r ? r->arrived_last : 0, clock, Shorten(p.file, 40)));
  }

  absl::StrAppend(&out, "\n", st.Bold("Communicators"), "\n");
  absl::StrAppend(&out, absl::StrFormat("  %-20s %-16s %6s %9s %9s %8s  %s\n",
                                        "id", "name", "ranks", "instances",
                                        "complete", "dropped", "members"));
  for (const InspectorCommunicator& comm : job.communicators) {
    std::vector<std::string> members;
    for (int p : comm.members) {
      members.push_back(p < 0 ? "?" : absl::StrCat(job.processes[p].rank));
    }
    std::string shown = absl::StrJoin(members, ",");
    absl::StrAppend(
        &out, absl::StrFormat("  %-20s %-16s %6d %9d %9d %8d  %s%s\n",
                              Shorten(comm.id, 20),
                              Shorten(comm.name.empty() ? "-" : comm.name, 16),
                              comm.n_ranks, comm.instances, comm.complete,
                              comm.coll_dropped, Shorten(shown, 40),
                              comm.whole_job ? "  (gives the job ranks)" : ""));
  }
  CollectivesTextOptions text;
  text.own_time_unknown = true;
  text.timeline_from_exec_times = !job.verbose;
  absl::StrAppend(&out, RenderCollectivesSummaryText(c, color, text));
  return out;
}

std::string RenderJson(const InspectorJob& job, const CollectiveAnalysis& c,
                       const std::string& job_name, bool pretty) {
  JsonWriter w(pretty ? 2 : 0);
  w.BeginObject();
  w.Key("format").String("inspector");
  w.Key("job");
  if (job_name.empty()) {
    w.Null();
  } else {
    w.String(job_name);
  }
  w.Key("timing").String(job.verbose ? "kernel" : "exec_time");
  w.Key("job_ranks_known").Bool(job.job_ranks_known);
  w.Key("inspector").BeginObject();
  w.Key("logs").Int(static_cast<int64_t>(job.processes.size()));
  w.Key("coll_records").Int(job.coll_records);
  w.Key("p2p_records").Int(job.p2p_records);
  w.Key("coll_dropped").Int(job.coll_dropped);
  w.Key("p2p_dropped").Int(job.p2p_dropped);
  w.Key("skipped").BeginObject();
  for (const auto& [reason, n] : AllSkips(job)) w.Key(reason).Int(n);
  w.EndObject();
  w.EndObject();
  w.Key("processes").BeginArray();
  for (const InspectorProcess& p : job.processes) {
    w.BeginObject();
    w.Key("rank").Int(p.rank);
    w.Key("job_rank");
    if (p.job_rank >= 0) {
      w.Int(p.job_rank);
    } else {
      w.Null();
    }
    w.Key("host").String(p.host);
    w.Key("pid").Int(p.pid);
    w.Key("file").String(p.file);
    w.Key("version").String(p.version);
    w.Key("coll_records").Int(p.coll_records);
    w.Key("p2p_records").Int(p.p2p_records);
    w.Key("coll_dropped").Int(p.coll_dropped);
    w.Key("p2p_dropped").Int(p.p2p_dropped);
    w.Key("lines_skipped").Int(p.lines_skipped);
    w.EndObject();
  }
  w.EndArray();
  w.Key("communicators").BeginArray();
  for (const InspectorCommunicator& comm : job.communicators) {
    w.BeginObject();
    w.Key("id").String(comm.id);
    w.Key("name");
    if (comm.name.empty()) {
      w.Null();
    } else {
      w.String(comm.name);
    }
    w.Key("n_ranks").Int(comm.n_ranks);
    w.Key("members").BeginArray();
    for (int p : comm.members) {
      if (p < 0) {
        w.Null();
      } else {
        w.Int(job.processes[p].rank);
      }
    }
    w.EndArray();
    w.Key("instances").Int(comm.instances);
    w.Key("complete").Int(comm.complete);
    w.Key("coll_dropped").Int(comm.coll_dropped);
    w.Key("whole_job").Bool(comm.whole_job);
    w.EndObject();
  }
  w.EndArray();
  WriteCollectivesJson(w, c);
  w.EndObject();
  std::string out = std::move(w).Take();
  out.push_back('\n');
  return out;
}

}  // namespace

std::string InspectorJobFromPaths(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    std::filesystem::path p(path);
    for (std::filesystem::path dir = p.parent_path(); !dir.empty();
         dir = dir.parent_path()) {
      const std::string name = dir.filename().string();
      if (absl::StartsWith(name, kDumpDirPrefix) &&
          name.size() > kDumpDirPrefix.size()) {
        return name.substr(kDumpDirPrefix.size());
      }
      if (dir == dir.parent_path()) break;
    }
  }
  return "";
}

absl::StatusOr<std::string> AnalyzeInspectorLogs(
    const std::vector<std::string>& paths,
    const InspectorReportOptions& options) {
  std::vector<InspectorLog> logs;
  logs.reserve(paths.size());
  int64_t records = 0;
  for (const std::string& path : paths) {
    const int64_t left =
        options.max_records < 0
            ? -1
            : std::max<int64_t>(options.max_records - records, 0);
    absl::StatusOr<InspectorLog> log = ReadInspectorLog(path, left);
    if (absl::IsResourceExhausted(log.status())) {
      return absl::ResourceExhaustedError(absl::StrCat(
          path, ": the job's Inspector logs hold more than ",
          options.max_records,
          " records (--max-inspector-records; the analysis keeps every "
          "record in memory, docs/analyze.md#inspector-logs): raise it if "
          "memory allows, or analyze a part of the logs"));
    }
    if (!log.ok()) {
      return absl::Status(log.status().code(),
                          absl::StrCat(path, ": ", log.status().message()));
    }
    records += static_cast<int64_t>(log->ops.size());
    logs.push_back(*std::move(log));
  }
  absl::StatusOr<InspectorJob> job = BuildInspectorJob(std::move(logs), paths);
  if (!job.ok()) return job.status();
  for (size_t i = 0; i < job->traces.size(); ++i) {
    Trace& t = job->traces[i];
    if (absl::Status s = CheckEventTimes(t); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(job->processes[i].file, ": ", s.message()));
    }
    EscapeUnprintableNames(&t);
    job->processes[i].host = t.host;
  }
  std::vector<RankInput> ranks;
  for (size_t i = 0; i < job->processes.size(); ++i) {
    const InspectorProcess& p = job->processes[i];
    RankInput in;
    in.trace = &job->traces[i];
    in.device = 0;
    in.rank = p.rank;
    in.clock_domain = p.clock_domain;
    in.host = p.host;
    in.file = p.file;
    in.pid = p.pid;
    ranks.push_back(std::move(in));
  }
  std::sort(
      ranks.begin(), ranks.end(),
      [](const RankInput& a, const RankInput& b) { return a.rank < b.rank; });
  absl::StatusOr<CollectiveAnalysis> c =
      AnalyzeCollectives(ranks, CollectiveOptions{}, options.analyzer);
  if (!c.ok()) return c.status();
  const std::string job_name = InspectorJobFromPaths(paths);
  return options.json ? RenderJson(*job, *c, job_name, options.pretty)
                      : RenderText(*job, *c, job_name, options.color);
}

}  // namespace bubblewatch
