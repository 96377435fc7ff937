#include "ingest/synthetic/synthetic_parallel_job.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/json_writer.h"
#include "ingest/synthetic/synthetic_parallel_plan.h"
#include "ingest/synthetic/synthetic_rng.h"
#include "ingest/synthetic/synthetic_step.h"

namespace bubblewatch {
namespace {

// Each rank's NCCL stream per kind of group (one stream per communicator,
// as ProcessGroupNCCL has).
constexpr int32_t kTensorStream = 21;
constexpr int32_t kDataStream = 22;
constexpr int32_t kPipePrevStream = 23;
constexpr int32_t kPipeNextStream = 25;

// Builds one rank's trace in true time.
class RankTraceBuilder {
 public:
  RankTraceBuilder(const ParallelJobOptions& o, const ParallelPlan& plan,
                   int rank)
      : names_(&trace_), device_(rank % o.tp) {
    trace_.rank = rank;
    trace_.world_size = o.world_size > 0 ? o.world_size : o.tp * o.dp * o.pp;
    trace_.job = o.job;
    if (o.host_names) trace_.host = absl::StrCat("host-", rank / o.tp);
    trace_.source_format = "synthetic";
    // A launching thread as Kineto folds it: pid << 32 | tid.
    const uint64_t pid = 4000 + static_cast<uint64_t>(rank);
    thread_ = (pid << 32) | pid;
    gemm_ = names_.Intern("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n");
    launch_ = names_.Intern("cudaLaunchKernel");
    launch_ex_ = names_.Intern("cudaLaunchKernelExC");
    loader_ = names_.Intern(
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__");
    sync_ = names_.Intern("cudaStreamSynchronize");
    dtype_ = names_.Intern("Float");
    for (const ParallelGroup& g : plan.groups) {
      group_names_.push_back(names_.Intern(g.shown_name));
      group_ranks_.push_back(names_.Intern(g.shown_ranks_text));
    }
  }

  void Cpu(NameId name, int64_t start, int64_t end, CpuEventCategory category,
           CorrelationId corr = kNoCorrelation) {
    CpuEvent e;
    e.start_ns = start;
    e.end_ns = end;
    e.correlation = corr;
    e.thread = thread_;
    e.name = name;
    e.category = category;
    trace_.cpu.push_back(e);
  }

  void Step(int step, int64_t start, int64_t end) {
    Cpu(names_.Intern(absl::StrCat("ProfilerStep#", step)), start, end,
        CpuEventCategory::kUserAnnotation);
  }
  void Loader(int64_t start, int64_t end) {
    Cpu(loader_, start, end, CpuEventCategory::kUserAnnotation);
  }
  void Sync(int64_t start, int64_t end) {
    Cpu(sync_, start, end, CpuEventCategory::kCudaRuntime);
  }

  // A compute kernel launched at `at`.
  void Compute(int64_t at, int64_t start, int64_t end) {
    const CorrelationId corr = ++correlation_;
    Cpu(launch_, at, at + kParallelLaunchCallNs, CpuEventCategory::kCudaRuntime,
        corr);
    Gpu(gemm_, start, end, kComputeStream, corr);
  }

  // The launch of a collective at `at` (its record_param_comms-like op and
  // the launch call); returns the correlation for CollectiveKernel().
  CorrelationId LaunchCollective(int64_t at, absl::string_view op) {
    const CorrelationId corr = ++correlation_;
    Cpu(names_.Intern(absl::StrCat("nccl:", op)), at,
        at + kParallelLaunchCallNs + 1, CpuEventCategory::kCpuOp);
    Cpu(launch_ex_, at + 1, at + kParallelLaunchCallNs,
        CpuEventCategory::kCudaRuntime, corr);
    return corr;
  }

  void CollectiveKernel(const ParallelGroup& group, int group_index,
                        int64_t seq, bool send, int32_t stream, int64_t start,
                        int64_t end, CorrelationId corr, int tp) {
    const char* kernel = nullptr;
    const char* collective = nullptr;
    int64_t in_elements = 1 << 22, out_elements = 1 << 22;
    switch (group.kind) {
      case ParallelGroupKind::kTensor:
        kernel =
            "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, "
            "ncclWork*)";
        collective = "_allgather_base";
        in_elements = 1 << 20;
        out_elements = int64_t{1 << 20} * tp;
        break;
      case ParallelGroupKind::kData:
        kernel =
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned "
            "long, ncclWork*)";
        collective = "allreduce";
        break;
      case ParallelGroupKind::kPipe:
        kernel =
            "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, "
            "ncclWork*)";
        collective = send ? "send" : "recv";
        in_elements = out_elements = 1 << 20;
        break;
    }
    const NameId name = names_.Intern(kernel);
    Gpu(name, start, end, stream, corr);
    bubblewatch::CollectiveKernel c;
    c.start_ns = start;
    c.end_ns = end;
    c.device = device_;
    c.stream = stream;
    c.kernel_name = name;
    c.collective = names_.Intern(collective);
    c.process_group = group_names_[group_index];
    c.group_ranks = group_ranks_[group_index];
    c.dtype = dtype_;
    c.seq = seq;
    c.in_elements = in_elements;
    c.out_elements = out_elements;
    c.group_size = static_cast<int32_t>(group.shown_size);
    if (group.kind == ParallelGroupKind::kPipe) {
      c.peer = group.ranks[0] == trace_.rank ? group.ranks[1] : group.ranks[0];
      // PyTorch records a point-to-point call with the group's next
      // collective Seq, which point-to-point calls do not advance.
      if (group.shown_size > 2) c.seq = 1;
    }
    trace_.collectives.push_back(c);
  }

  // Moves every time from true time to the host's clock.
  void ApplyClock(int64_t offset_ns, double drift_ppm, int64_t reference_ns) {
    auto local = [&](int64_t t) {
      return t + offset_ns +
             std::llround(drift_ppm * 1e-6 *
                          static_cast<double>(t - reference_ns));
    };
    for (GpuActivity& a : trace_.gpu) {
      a.start_ns = local(a.start_ns);
      a.end_ns = local(a.end_ns);
    }
    for (CpuEvent& e : trace_.cpu) {
      e.start_ns = local(e.start_ns);
      e.end_ns = local(e.end_ns);
    }
    for (bubblewatch::CollectiveKernel& c : trace_.collectives) {
      c.start_ns = local(c.start_ns);
      c.end_ns = local(c.end_ns);
    }
  }

  Trace Take() && { return std::move(trace_); }

 private:
  void Gpu(NameId name, int64_t start, int64_t end, int32_t stream,
           CorrelationId corr) {
    GpuActivity a;
    a.start_ns = start;
    a.end_ns = end;
    a.correlation = corr;
    a.name = name;
    a.device = device_;
    a.stream = stream;
    trace_.gpu.push_back(a);
  }

  Trace trace_;
  NameInterner names_;
  int32_t device_;
  uint64_t thread_ = 0;
  CorrelationId correlation_ = 0;
  NameId gemm_, launch_, launch_ex_, loader_, sync_, dtype_;
  std::vector<NameId> group_names_, group_ranks_;
};

struct SimResult {
  std::vector<std::vector<int64_t>> starts;  // Per instance, per member.
  std::vector<int64_t> ends;                 // Per instance.
  int64_t end_ns = 0;                        // The last GPU work's end.
};

int64_t Wait(const SimResult& sim, int instance) {
  const std::vector<int64_t>& s = sim.starts[instance];
  const int64_t arrival = *std::max_element(s.begin(), s.end());
  int64_t wait = 0;
  for (int64_t start : s) wait += arrival - start;
  return wait;
}

// The latest arrival minus the earliest.
int64_t Spread(const SimResult& sim, int instance) {
  const auto [lo, hi] = std::minmax_element(sim.starts[instance].begin(),
                                            sim.starts[instance].end());
  return *hi - *lo;
}

int MemberIndex(const ParallelGroup& g, int rank) {
  return static_cast<int>(
      std::lower_bound(g.ranks.begin(), g.ranks.end(), rank) - g.ranks.begin());
}

// Runs the ranks' programs: each rank runs until a collective not every
// member has reached, in turns, until all are done. `builders`, when given,
// receive the events (true time).
SimResult Simulate(const ParallelJobOptions& o, const ParallelPlan& plan,
                   const std::vector<std::vector<ParallelOp>>& programs,
                   std::vector<RankTraceBuilder>* builders) {
  const int world = static_cast<int>(programs.size());
  SimResult sim;
  sim.starts.resize(plan.instances.size());
  sim.ends.assign(plan.instances.size(), -1);
  std::vector<int> arrived(plan.instances.size(), 0);
  for (size_t i = 0; i < plan.instances.size(); ++i) {
    sim.starts[i].assign(plan.groups[plan.instances[i].group].ranks.size(), 0);
  }
  struct RankState {
    size_t pc = 0;
    int64_t host = 0;      // The launching thread's time.
    int64_t gpu_free = 0;  // When the GPU's earlier work is done.
    int64_t step_start = 0;
    bool waiting = false;  // Arrived at the collective at pc.
    CorrelationId corr = kNoCorrelation;
  };
  std::vector<RankState> state(world);
  for (RankState& s : state) s.host = s.gpu_free = o.start_time_ns;
  bool done = false;
  while (!done) {
    done = true;
    bool progress = false;
    for (int r = 0; r < world; ++r) {
      RankState& s = state[r];
      RankTraceBuilder* b = builders != nullptr ? &(*builders)[r] : nullptr;
      const std::vector<ParallelOp>& prog = programs[r];
      while (s.pc < prog.size()) {
        const ParallelOp& op = prog[s.pc];
        if (op.kind == ParallelOpKind::kCollective) {
          const PlannedCollective& inst = plan.instances[op.instance];
          const ParallelGroup& g = plan.groups[inst.group];
          const int member = MemberIndex(g, r);
          if (!s.waiting) {
            // Launched now; starts when this GPU reaches it.
            const int64_t start =
                std::max(s.gpu_free, s.host + kParallelLaunchToKernelNs);
            sim.starts[op.instance][member] = start;
            if (b != nullptr) {
              const char* name =
                  g.kind == ParallelGroupKind::kTensor ? "_all_gather_base"
                  : g.kind == ParallelGroupKind::kData ? "all_reduce"
                  : op.send                            ? "send"
                                                       : "recv";
              s.corr = b->LaunchCollective(s.host, name);
            }
            s.host += kParallelLaunchGapNs;
            s.waiting = true;
            progress = true;
            if (++arrived[op.instance] == static_cast<int>(g.ranks.size())) {
              const std::vector<int64_t>& st = sim.starts[op.instance];
              sim.ends[op.instance] =
                  *std::max_element(st.begin(), st.end()) + inst.transfer_ns;
            }
          }
          if (sim.ends[op.instance] < 0) break;  // Others still to come.
          const int64_t end = sim.ends[op.instance];
          if (b != nullptr) {
            int32_t stream = kDataStream;
            if (g.kind == ParallelGroupKind::kTensor) stream = kTensorStream;
            if (g.kind == ParallelGroupKind::kPipe) {
              stream = inst.group == plan.prev_group[r] ? kPipePrevStream
                                                        : kPipeNextStream;
            }
            b->CollectiveKernel(g, inst.group, inst.seq, op.send, stream,
                                sim.starts[op.instance][member], end, s.corr,
                                o.tp);
          }
          s.gpu_free = end;
          s.waiting = false;
        } else {
          switch (op.kind) {
            case ParallelOpKind::kStepBegin:
              s.step_start = s.host;
              break;
            case ParallelOpKind::kLoader: {
              const int64_t start = s.host + 5 * kNsPerUs;
              if (b != nullptr) b->Loader(start, start + op.ns);
              s.host = start + op.ns + 2 * kNsPerUs;
              break;
            }
            case ParallelOpKind::kCompute: {
              const int64_t start =
                  std::max(s.gpu_free, s.host + kParallelLaunchToKernelNs);
              if (b != nullptr) b->Compute(s.host, start, start + op.ns);
              s.gpu_free = start + op.ns;
              s.host += kParallelLaunchGapNs;
              break;
            }
            case ParallelOpKind::kSync:
              if (op.active) {
                // .item(): the host waits for the queue to drain, then is
                // held `ns` longer before it can launch again.
                const int64_t until = std::max(s.host, s.gpu_free) + op.ns;
                if (b != nullptr) b->Sync(s.host, until);
                s.host = until + 2 * kNsPerUs;
              }
              break;
            case ParallelOpKind::kStepEnd:
              if (s.host < s.gpu_free) {
                if (b != nullptr) b->Sync(s.host, s.gpu_free);
                s.host = s.gpu_free;
              }
              s.host += 10 * kNsPerUs;
              if (b != nullptr) b->Step(op.step, s.step_start, s.host);
              break;
            case ParallelOpKind::kCollective:
              break;
          }
        }
        ++s.pc;
        progress = true;
      }
      if (s.pc < prog.size()) done = false;
      sim.end_ns = std::max(sim.end_ns, s.gpu_free);
    }
    // Programs are built in one global order, so someone always moves.
    BW_CHECK(done || progress);
  }
  return sim;
}

}  // namespace

int64_t ParallelJobTruth::ClockOffsetAt(int rank, int64_t true_ns) const {
  const int host = rank / tp;
  return host_offset_ns[host] +
         std::llround(host_drift_ppm[host] * 1e-6 *
                      static_cast<double>(true_ns - start_time_ns));
}

ParallelJob MakeParallelJob(const ParallelJobOptions& options) {
  ParallelJobOptions o = options;
  o.tp = std::max(1, o.tp);
  o.dp = std::max(1, o.dp);
  o.pp = std::max(1, o.pp);
  o.steps = std::max(1, o.steps);
  const int world = o.tp * o.dp * o.pp;
  const int hosts = o.dp * o.pp;
  for (const PlantedRoot& root : o.roots) {
    BW_CHECK(root.rank >= 0 && root.rank < world);
    BW_CHECK(root.step >= 0 && root.steps >= 1 &&
             root.step + root.steps <= o.steps);
  }
  const ParallelPlan plan = MakeParallelPlan(o);

  ParallelJob job;
  ParallelJobTruth& truth = job.truth;
  truth.tp = o.tp;
  truth.dp = o.dp;
  truth.pp = o.pp;
  truth.start_time_ns = o.start_time_ns;
  // Clocks from their own stream: the same whatever the job's shape.
  SyntheticRng clock_rng(o.seed ^ 0x636c6f636b73ULL);
  for (int h = 0; h < hosts; ++h) {
    const int64_t offset =
        o.max_clock_offset_ns > 0
            ? clock_rng.Uniform(-o.max_clock_offset_ns, o.max_clock_offset_ns)
            : 0;
    const double drift = clock_rng.Between(-o.max_drift_ppm, o.max_drift_ppm);
    truth.host_offset_ns.push_back(
        o.clock_offset_ns.empty()
            ? offset
            : o.clock_offset_ns[h % o.clock_offset_ns.size()]);
    truth.host_drift_ppm.push_back(
        o.drift_ppm.empty() ? drift : o.drift_ppm[h % o.drift_ppm.size()]);
  }

  std::vector<RankTraceBuilder> builders;
  builders.reserve(world);
  for (int r = 0; r < world; ++r) builders.emplace_back(o, plan, r);
  const SimResult full =
      Simulate(o, plan, ProgramsWithRoots(plan, o.roots), &builders);
  const SimResult none =
      o.roots.empty() ? full
                      : Simulate(o, plan, ProgramsWithRoots(plan, {}), nullptr);
  std::vector<SimResult> without;  // Without root i.
  for (size_t i = 0; i < o.roots.size(); ++i) {
    std::vector<PlantedRoot> rest = o.roots;
    rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(i));
    without.push_back(
        Simulate(o, plan, ProgramsWithRoots(plan, rest), nullptr));
  }

  int64_t smallest_extra = 0;
  for (size_t i = 0; i < o.roots.size(); ++i) {
    smallest_extra = i == 0 ? o.roots[i].extra_ns
                            : std::min(smallest_extra, o.roots[i].extra_ns);
  }
  truth.end_ns = full.end_ns;
  truth.job_ns = full.end_ns - o.start_time_ns;
  truth.job_ns_without_stragglers = none.end_ns - o.start_time_ns;
  for (size_t i = 0; i < o.roots.size(); ++i) {
    truth.roots.push_back({o.roots[i], full.end_ns - without[i].end_ns});
  }
  for (int r = 0; r < world; ++r) {
    ParallelRankTruth rt;
    rt.rank = r;
    rt.host = r / o.tp;
    rt.tp_index = r % o.tp;
    rt.dp_index = (r / o.tp) % o.dp;
    rt.stage = r / (o.tp * o.dp);
    truth.ranks.push_back(rt);
  }
  for (size_t i = 0; i < plan.instances.size(); ++i) {
    const PlannedCollective& inst = plan.instances[i];
    const ParallelGroup& g = plan.groups[inst.group];
    ParallelInstanceTruth it;
    it.group = g.name;
    it.seq = inst.seq;
    it.collective = g.kind == ParallelGroupKind::kTensor ? "_allgather_base"
                    : g.kind == ParallelGroupKind::kData ? "allreduce"
                                                         : "send/recv";
    it.step = inst.step;
    it.members.assign(g.ranks.begin(), g.ranks.end());
    it.start_ns = full.starts[i];
    it.end_ns = full.ends[i];
    it.arrival_ns = *std::max_element(it.start_ns.begin(), it.start_ns.end());
    for (size_t m = 0; m < it.members.size(); ++m) {
      if (it.start_ns[m] == it.arrival_ns && it.late_rank < 0) {
        it.late_rank = it.members[m];
      }
      truth.ranks[it.members[m]].comm_wait_ns += it.arrival_ns - it.start_ns[m];
    }
    it.wait_ns = Wait(full, static_cast<int>(i));
    // Rooted when the roots together spread the arrivals; then the root is
    // the one whose absence narrows them most (the first of equals).
    const int64_t spread = Spread(full, static_cast<int>(i));
    if (!o.roots.empty() &&
        2 * (spread - Spread(none, static_cast<int>(i))) >= smallest_extra) {
      int64_t best = 0;
      for (size_t root = 0; root < o.roots.size(); ++root) {
        const int64_t narrower =
            spread - Spread(without[root], static_cast<int>(i));
        if (it.root < 0 || narrower > best) {
          best = narrower;
          it.root = static_cast<int>(root);
          it.root_rank = o.roots[root].rank;
        }
      }
    }
    truth.instances.push_back(std::move(it));
  }

  for (int r = 0; r < world; ++r) {
    const int host = r / o.tp;
    builders[r].ApplyClock(truth.host_offset_ns[host],
                           truth.host_drift_ppm[host], o.start_time_ns);
    job.ranks.push_back(std::move(builders[r]).Take());
  }
  return job;
}

std::string ParallelJobTruthJson(const ParallelJobTruth& truth) {
  JsonWriter w(1);
  w.BeginObject();
  w.Key("tp").Int(truth.tp).Key("dp").Int(truth.dp).Key("pp").Int(truth.pp);
  w.Key("start_time_ns").Int(truth.start_time_ns);
  w.Key("end_ns").Int(truth.end_ns);
  w.Key("job_ns").Int(truth.job_ns);
  w.Key("job_ns_without_stragglers").Int(truth.job_ns_without_stragglers);
  w.Key("hosts").BeginArray();
  for (size_t h = 0; h < truth.host_offset_ns.size(); ++h) {
    w.BeginObject();
    w.Key("host").Int(static_cast<int64_t>(h));
    w.Key("clock_offset_ns").Int(truth.host_offset_ns[h]);
    w.Key("drift_ppm").Double(truth.host_drift_ppm[h]);
    w.EndObject();
  }
  w.EndArray();
  w.Key("ranks").BeginArray();
  for (const ParallelRankTruth& r : truth.ranks) {
    w.BeginObject();
    w.Key("rank").Int(r.rank).Key("host").Int(r.host);
    w.Key("tp_index").Int(r.tp_index).Key("dp_index").Int(r.dp_index);
    w.Key("stage").Int(r.stage);
    w.Key("comm_wait_ns").Int(r.comm_wait_ns);
    w.EndObject();
  }
  w.EndArray();
  w.Key("roots").BeginArray();
  for (const ParallelRootTruth& r : truth.roots) {
    w.BeginObject();
    w.Key("rank").Int(r.root.rank).Key("step").Int(r.root.step);
    // One step unless the root lasts (the key absent then, as before).
    if (r.root.steps != 1) w.Key("steps").Int(r.root.steps);
    w.Key("extra_ns").Int(r.root.extra_ns);
    w.Key("cause").String(StragglerCauseName(r.root.cause));
    w.Key("saved_ns").Int(r.saved_ns);
    w.EndObject();
  }
  w.EndArray();
  w.Key("instances").BeginArray();
  for (const ParallelInstanceTruth& i : truth.instances) {
    w.BeginObject();
    w.Key("group").String(i.group).Key("seq").Int(i.seq);
    w.Key("collective").String(i.collective).Key("step").Int(i.step);
    w.Key("members").BeginArray();
    for (int32_t m : i.members) w.Int(m);
    w.EndArray();
    w.Key("start_ns").BeginArray();
    for (int64_t s : i.start_ns) w.Int(s);
    w.EndArray();
    w.Key("arrival_ns").Int(i.arrival_ns).Key("end_ns").Int(i.end_ns);
    w.Key("late_rank").Int(i.late_rank).Key("wait_ns").Int(i.wait_ns);
    w.Key("root").Int(i.root).Key("root_rank").Int(i.root_rank);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  std::string out = std::move(w).Take();
  out += "\n";
  return out;
}

}  // namespace bubblewatch
