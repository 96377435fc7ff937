#include "ingest/synthetic/synthetic_inspector_job.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace bubblewatch {
namespace {

// SplitMix64: the jitter of (seed, process, step, slot), independent of
// the order things are computed in.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int64_t Jitter(const InspectorJobSpec& s, int proc, int step, int slot) {
  if (s.jitter_us <= 0) return 0;
  const uint64_t h = Mix(s.seed * 1000003ULL + proc * 7919ULL +
                         step * 104729ULL + slot * 15485863ULL);
  return static_cast<int64_t>(h % static_cast<uint64_t>(s.jitter_us + 1));
}

// One collective record of one process (true times).
struct Rec {
  int comm = 0;  // 0 world, 1 TP, 2 DP.
  int64_t sn = 0;
  int64_t start_us = 0;
  int64_t end_us = 0;
  int64_t bytes = 0;
};

struct Sim {
  std::vector<std::vector<Rec>> recs;  // Per process.
  std::vector<int64_t> wait_us;
};

// One collective among `members`: each starts after its own time, all end
// `transfer` after the last arrival.
void Collective(const std::vector<int>& members, int comm, int64_t sn,
                int64_t transfer, int64_t bytes,
                const std::vector<int64_t>& own, std::vector<int64_t>& ready,
                Sim& sim) {
  int64_t arrival = 0;
  for (int p : members) arrival = std::max(arrival, ready[p] + own[p]);
  const int64_t end = arrival + transfer;
  for (int p : members) {
    const int64_t start = ready[p] + own[p];
    sim.wait_us[p] += arrival - start;
    sim.recs[p].push_back({comm, sn, start, end, bytes});
    ready[p] = end;
  }
}

Sim Simulate(const InspectorJobSpec& s, bool planted) {
  const int n = s.tp * s.dp;
  Sim sim;
  sim.recs.resize(n);
  sim.wait_us.assign(n, 0);
  std::vector<int64_t> ready(n, 0);
  std::vector<int64_t> own(n, 0);
  std::vector<int> all(n);
  for (int p = 0; p < n; ++p) all[p] = p;
  // The start-up all-reduce on the whole job.
  for (int p = 0; p < n; ++p) own[p] = 100 + Jitter(s, p, -1, 0);
  Collective(all, 0, 1, s.dp_transfer_us, 8192, own, ready, sim);
  int64_t tp_sn = 0;
  int64_t dp_sn = 0;
  for (int step = 0; step < s.steps; ++step) {
    for (int j = 0; j < s.tp_per_step; ++j) {
      for (int p = 0; p < n; ++p) {
        own[p] = s.compute_us + Jitter(s, p, step, 1 + j);
        if (planted && p == s.plant && j == 0 && step >= s.plant_from_step &&
            step < s.plant_until_step) {
          own[p] += s.plant_us;
        }
      }
      ++tp_sn;
      for (int d = 0; d < s.dp; ++d) {
        std::vector<int> group;
        for (int t = 0; t < s.tp; ++t) group.push_back(d * s.tp + t);
        Collective(group, 1, tp_sn, s.tp_transfer_us, 1 << 24, own, ready, sim);
      }
    }
    for (int p = 0; p < n; ++p) {
      own[p] = s.dp_compute_us + Jitter(s, p, step, 0);
    }
    ++dp_sn;
    for (int t = 0; t < s.tp; ++t) {
      std::vector<int> group;
      for (int d = 0; d < s.dp; ++d) group.push_back(d * s.tp + t);
      Collective(group, 2, dp_sn, s.dp_transfer_us, 1 << 27, own, ready, sim);
    }
  }
  return sim;
}

}  // namespace

InspectorJobLogs GenerateInspectorJob(const InspectorJobSpec& s) {
  InspectorJobLogs out;
  const int n = s.tp * s.dp;
  const Sim sim = Simulate(s, true);
  const Sim base = Simulate(s, false);
  InspectorJobTruth& truth = out.truth;
  truth.wait_us = sim.wait_us;
  for (int p = 0; p < n; ++p) {
    truth.total_wait_us += sim.wait_us[p];
    truth.planted_wait_us += sim.wait_us[p] - base.wait_us[p];
  }
  const int per_host = std::max(1, s.procs_per_host);
  for (int p = 0; p < n; ++p) {
    const int host = p / per_host;
    const std::string hostname = absl::StrFormat("node%02d", host);
    const int64_t pid = 4100 + 17 * p;
    truth.hosts.push_back(hostname);
    truth.pids.push_back(pid);
    const int64_t skew =
        s.skew_us.empty() ? 0 : s.skew_us[host % s.skew_us.size()];
    const int d = p / s.tp;
    const int t = p % s.tp;
    struct Comm {
      std::string id;
      std::string name;
      int rank;
      int n_ranks;
      int nnodes;
      const char* op;
    };
    const int hosts_total = (n + per_host - 1) / per_host;
    const Comm comms[3] = {
        {"0x5eed00000000a11", "world", p, n, hosts_total, "AllReduce"},
        {absl::StrFormat("0x7a00000000%04x", d), absl::StrCat("TP Group ", d),
         t, s.tp, std::max(1, (s.tp + per_host - 1) / per_host), "AllGather"},
        {absl::StrFormat("0xd900000000%04x", t), absl::StrCat("DP Group ", t),
         d, s.dp, std::min(s.dp, hosts_total), "AllReduce"}};
    auto header = [&](const Comm& c) {
      return absl::StrCat("{\"id\":\"", c.id, "\",\"comm_name\":\"", c.name,
                          "\",\"rank\":", c.rank, ",\"n_ranks\":", c.n_ranks,
                          ",\"nnodes\":", c.nnodes, "}");
    };
    auto metadata = [&](int64_t dump_us) {
      return absl::StrCat("{\"inspector_output_format_version\":\"", s.version,
                          "\",\"git_rev\":\"synthetic\",\"rec_mechanism\":"
                          "\"nccl_profiler_interface\",\"dump_timestamp_us\":",
                          dump_us, ",\"hostname\":\"", hostname,
                          "\",\"pid\":", pid, "}");
    };
    auto record = [&](const Comm& c, const Rec& r) {
      const int64_t exec = r.end_us - r.start_us;
      const double algobw =
          exec > 0 ? static_cast<double>(r.bytes) / (exec * 1e3) : 0.0;
      std::string body = absl::StrCat(
          "{\"coll\":\"", c.op,
          "\",\"coll_algo\":\"RING\",\"coll_proto\":\"SIMPLE\",\"coll_sn\":",
          r.sn, ",\"coll_msg_size_bytes\":", r.bytes,
          ",\"coll_exec_time_us\":", exec,
          ",\"coll_timing_source\":\"kernel_gpu\",\"coll_algobw_gbs\":",
          absl::StrFormat("%.6f", algobw),
          ",\"coll_busbw_gbs\":", absl::StrFormat("%.6f", algobw * 1.5));
      if (s.verbose) {
        const int64_t start = s.start_us + r.start_us + skew;
        const int64_t stop = s.start_us + r.end_us + skew;
        absl::StrAppend(
            &body,
            ",\"event_trace_sn\":{\"coll_start_sn\":1,\"coll_stop_sn\":2,"
            "\"kernel_events\":[{\"channel_id\":0,\"kernel_start_sn\":3,"
            "\"kernel_stop_sn\":6,\"kernel_record_sn\":5},{\"channel_id\":1,"
            "\"kernel_start_sn\":4,\"kernel_stop_sn\":8,\"kernel_record_sn\":"
            "7}]},\"event_trace_ts\":{\"coll_start_ts\":",
            start - 40, ",\"coll_stop_ts\":", start - 35,
            ",\"kernel_events\":[{\"channel_id\":0,\"kernel_start_ts\":", start,
            ",\"kernel_stop_ts\":", stop - 1,
            ",\"kernel_record_ts\":", stop - 1,
            "},{\"channel_id\":1,\"kernel_start_ts\":", start + 1,
            ",\"kernel_stop_ts\":", stop, ",\"kernel_record_ts\":", stop,
            "}]}");
      }
      body.push_back('}');
      return body;
    };
    // Dumps: after every dump_every_steps steps' worth of records, each
    // communicator's new records behind its marker.
    std::string text;
    const std::vector<Rec>& recs = sim.recs[p];
    std::vector<std::vector<Rec>> pending(3);
    const int per_step = s.tp_per_step + 1;
    const int every = std::max(1, s.dump_every_steps);
    int64_t dropped_total = 0;
    auto dump = [&](int64_t dump_us) {
      for (int c = 0; c < 3; ++c) {
        int64_t dropped_now = 0;
        if (c == 1 && p == s.drop_process) {
          dropped_now = std::erase_if(pending[c], [&](const Rec& r) {
            return r.sn >= s.drop_from_sn &&
                   r.sn < s.drop_from_sn + s.drop_count;
          });
          dropped_total += dropped_now;
          truth.dropped += dropped_now;
        }
        if (pending[c].empty() && dropped_now == 0) continue;
        if (s.version != "v4.0") {
          absl::StrAppend(
              &text, "{\"header\":", header(comms[c]),
              ",\"metadata\":", metadata(dump_us),
              ",\"dump_stats\":{\"coll_records\":", pending[c].size(),
              ",\"coll_dropped_total\":", c == 1 ? dropped_total : 0,
              ",\"coll_dropped_since_last_dump\":", dropped_now,
              ",\"p2p_records\":0,\"p2p_dropped_total\":0,"
              "\"p2p_dropped_since_last_dump\":0}}\n");
        }
        const bool bare = s.version >= "v4.3";
        for (const Rec& r : pending[c]) {
          if (bare) {
            absl::StrAppend(&text, "{\"coll_perf\":", record(comms[c], r),
                            "}\n");
          } else {
            absl::StrAppend(&text, "{\"header\":", header(comms[c]),
                            ",\"metadata\":", metadata(dump_us),
                            ",\"coll_perf\":", record(comms[c], r), "}\n");
          }
          ++truth.coll_records;
        }
        pending[c].clear();
      }
    };
    for (size_t i = 0; i < recs.size(); ++i) {
      pending[recs[i].comm].push_back(recs[i]);
      // Record 0 is the start-up all-reduce; then per_step a step.
      const bool step_done = i > 0 && (i % per_step) == 0;
      const int steps_done = static_cast<int>(i / per_step);
      if (step_done && steps_done % every == 0) {
        dump(s.start_us + recs[i].end_us + skew + 100);
      }
    }
    dump(s.start_us + (recs.empty() ? 0 : recs.back().end_us) + skew + 100);
    out.files.push_back(
        {absl::StrCat(hostname, "-pid", pid, ".log"), std::move(text)});
  }
  return out;
}

}  // namespace bubblewatch
