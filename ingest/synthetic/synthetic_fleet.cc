#include "ingest/synthetic/synthetic_fleet.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <fstream>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/json_writer.h"
#include "ingest/synthetic/synthetic_names.h"
#include "ingest/synthetic/synthetic_parallel_job.h"
#include "ingest/synthetic/synthetic_rank.h"
#include "ingest/synthetic/synthetic_step.h"

namespace bubblewatch {
namespace {

constexpr std::array<absl::string_view, 9> kScenarioNames = {
    "healthy", "sync",      "launch", "alloc",   "dataloader",
    "memcpy",  "straggler", "mix",    "lockstep"};

// The scenarios `mix` cycles through, by job index.
constexpr std::array<SyntheticScenario, 6> kMixedScenarios = {
    SyntheticScenario::kHealthy,    SyntheticScenario::kSync,
    SyntheticScenario::kLaunch,     SyntheticScenario::kAlloc,
    SyntheticScenario::kDataloader, SyntheticScenario::kMemcpy};

// Job `j`'s scenario under `mix`: kMixedScenarios in turn, except that
// every 7th job (j mod 7 = 6) of a fleet with multi-rank jobs is a straggler
// job. Every other job keeps the scenario (and so the events) it had before
// straggler jobs joined the mix.
SyntheticScenario MixedScenario(int j, int gpus_per_job) {
  if (gpus_per_job >= 2 && j % 7 == 6) return SyntheticScenario::kStraggler;
  return kMixedScenarios[j % kMixedScenarios.size()];
}

std::vector<std::string> SyntheticNameTable() {
  std::vector<std::string> names;
  names.reserve(kSyntheticNames.size());
  for (absl::string_view name : kSyntheticNames) {
    names.emplace_back(name.data(), name.size());
  }
  return names;
}

uint64_t RankSeed(uint64_t seed, int job, int rank) {
  uint64_t state = seed;
  uint64_t mixed = SplitMix64(&state);
  mixed ^= (static_cast<uint64_t>(job) + 1) * 0xd6e8feb86659fd93ULL;
  mixed ^= (static_cast<uint64_t>(rank) + 1) * 0xa0761d6478bd642fULL;
  return SplitMix64(&mixed);
}

Trace GenerateRank(const SyntheticFleetOptions& options, const std::string& job,
                   SyntheticScenario scenario, int job_index, int rank,
                   TruthAccumulator* truth, std::vector<PlantedGap>* gaps) {
  Trace trace;
  trace.names = SyntheticNameTable();
  trace.job = job;
  trace.host = absl::StrFormat("%s-node-%02d", job, rank / 8);
  trace.rank = rank;
  trace.world_size = options.gpus_per_job;
  trace.source_format = "synthetic";
  const double seconds = absl::ToDoubleSeconds(options.duration);
  const auto expected_events =
      static_cast<size_t>(seconds * options.events_per_second_per_gpu * 1.05);
  trace.gpu.reserve(expected_events * 2 / 5);
  trace.cpu.reserve(expected_events * 7 / 10);

  // One process per rank; its launching thread is the main thread.
  const uint64_t pid = 4000 + static_cast<uint64_t>(rank);
  RankSimulator sim(
      /*device=*/rank, /*thread=*/(pid << 32) | pid,
      /*correlation_base=*/(static_cast<uint64_t>(rank) + 1) << 40,
      options.start_time_ns, options.events_per_second_per_gpu,
      RankSeed(options.seed, job_index, rank), &trace, truth, gaps);
  const int64_t end_ns =
      options.start_time_ns + absl::ToInt64Nanoseconds(options.duration);
  for (int64_t step = 0; sim.host_now() < end_ns; ++step) {
    sim.Run(BuildStepPlan(scenario, step, sim.rng()));
  }
  sim.Finish();
  return trace;
}

// Gives rank `rank`'s trace the identity every fleet rank has: device =
// rank, and a launching thread and correlation ids of its own (the ranges
// GenerateRank uses). The generators of multi-rank jobs number devices per
// host and ids per process from the same start on every rank, as real ranks
// do; but the processor analyzes a job's ranks as one trace, where device
// numbers, threads and correlation ids are job-wide
// (docs/semantics.md#multi-device): shared ones would pair one rank's kernel
// with another rank's launch call (a data-loader stall read as a 3 ms
// launch) and merge the timelines of two hosts' device 0.
void GiveRankOwnIds(int rank, Trace* trace) {
  const uint64_t pid = 4000 + static_cast<uint64_t>(rank);
  const CorrelationId base = (static_cast<uint64_t>(rank) + 1) << 40;
  absl::flat_hash_map<uint64_t, uint64_t> threads;
  for (CpuEvent& e : trace->cpu) {
    auto [it, inserted] = threads.try_emplace(e.thread, 0);
    if (inserted) it->second = (pid << 32) | (pid + threads.size() - 1);
    e.thread = it->second;
    if (e.correlation != kNoCorrelation) e.correlation |= base;
  }
  for (GpuActivity& a : trace->gpu) {
    a.device = rank;
    if (a.correlation != kNoCorrelation) a.correlation |= base;
  }
  for (CollectiveKernel& c : trace->collectives) c.device = rank;
}

// A generated StragglerJob as a fleet job: its hosts named like the other
// scenarios' (8 ranks a host), each rank with ids of its own.
SyntheticJob ToSyntheticJob(const SyntheticFleetOptions& options,
                            const std::string& name, SyntheticScenario scenario,
                            StragglerJob generated) {
  SyntheticJob job;
  job.job = name;
  job.scenario = scenario;
  job.truth_window_ns = options.truth_window_ns;
  for (Trace& rank : generated.ranks) {
    rank.host = absl::StrFormat("%s-node-%02d", name, rank.rank / 8);
    GiveRankOwnIds(rank.rank, &rank);
    job.ranks.push_back(std::move(rank));
  }
  job.straggler = generated.truth;
  return job;
}

// A healthy step of MakeStragglerJob's default shape takes about 6.1 ms
// (loader 0.5, 12 kernels of 0.4, transfer 0.8, launch latencies) and emits
// 27 events per rank (the loader range, 13 launches, 13 kernels).
constexpr int64_t kStragglerStepNs = 6'100'000;
constexpr double kStragglerStepEvents = 27;

// The tensor x data parallel shape (TP, DP) of job `job_index` of the
// straggler and lockstep scenarios, or none: every third job (j mod 3 = 2)
// with an even number of ranks, at least 4, is a TP x DP job of
// synthetic_parallel_job.h, TP 4 when that leaves two DP groups or more,
// else TP 2.
std::optional<std::pair<int, int>> TensorDataShape(int job_index, int gpus) {
  if (job_index % 3 != 2 || gpus < 4 || gpus % 2 != 0) return std::nullopt;
  const int tp = gpus % 4 == 0 && gpus >= 8 ? 4 : 2;
  return std::pair(tp, gpus / tp);
}

// A healthy step of MakeParallelJob's default shape: the loader, 3 phases of
// 4 kernels, the all-gather and the all-reduce transfers, launch latencies;
// per rank 2 events per kernel and collective (launch and kernel), the
// loader range and the synchronize.
int64_t ParallelStepNs(const ParallelJobOptions& p) {
  return p.loader_ns + 3 * p.kernels_per_phase * p.kernel_ns + p.all_gather_ns +
         p.all_reduce_ns + 100'000;
}
constexpr double kParallelStepEvents = 2 * (3 * 4 + 2) + 2;

// A TP x DP job for the straggler scenario (`plant`: one root, drawn as the
// flat jobs' stragglers are: rank, cause and late steps, 3 ms a step) or the
// lockstep one (no root, times scaled to the rate). Hosts are the job's TP
// groups, their clocks up to 5 ms apart.
SyntheticJob GenerateTensorDataJob(const SyntheticFleetOptions& options,
                                   const std::string& name,
                                   std::pair<int, int> shape, uint64_t* state,
                                   bool plant) {
  ParallelJobOptions p;
  p.job = name;
  p.tp = shape.first;
  p.dp = shape.second;
  p.host_names = true;
  p.start_time_ns = options.start_time_ns;
  p.seed = SplitMix64(state);
  if (!plant) {
    const double scale = std::max(
        0.05, kParallelStepEvents * 1e9 / options.events_per_second_per_gpu /
                  static_cast<double>(ParallelStepNs(p)));
    for (int64_t* ns :
         {&p.kernel_ns, &p.kernel_jitter_ns, &p.loader_ns, &p.loader_jitter_ns,
          &p.all_gather_ns, &p.all_reduce_ns, &p.send_recv_ns}) {
      *ns = static_cast<int64_t>(static_cast<double>(*ns) * scale);
    }
  }
  p.steps = static_cast<int>(std::clamp<int64_t>(
      absl::ToInt64Nanoseconds(options.duration) / ParallelStepNs(p), 4,
      10'000'000));
  StragglerTruth truth;
  truth.late_rank = -1;
  int from = 0, until = 0;
  if (plant) {
    truth.late_rank = static_cast<int>(
        SplitMix64(state) % static_cast<uint64_t>(options.gpus_per_job));
    truth.cause = static_cast<StragglerCause>(SplitMix64(state) % 3);
    const int64_t from_pct = 10 + static_cast<int64_t>(SplitMix64(state) % 31);
    const int64_t length_pct =
        20 + static_cast<int64_t>(SplitMix64(state) % 31);
    from = static_cast<int>(p.steps * from_pct / 100);
    until = std::max(from + 1,
                     static_cast<int>(p.steps * (from_pct + length_pct) / 100));
    p.roots.push_back(PlantedRoot{.rank = truth.late_rank,
                                  .step = from,
                                  .extra_ns = 3'000'000,
                                  .cause = truth.cause,
                                  .steps = until - from});
  }
  ParallelJob generated = MakeParallelJob(p);
  const ParallelJobTruth& t = generated.truth;
  // True time, as the flat jobs' truth: from the end of the step before the
  // first late one to the end of the last late step's collectives.
  truth.late_start_ns = plant && from == 0 ? p.start_time_ns : 0;
  for (const ParallelInstanceTruth& i : t.instances) {
    if (!plant) break;
    if (i.step == from - 1) {
      truth.late_start_ns = std::max(truth.late_start_ns, i.end_ns);
    }
    if (i.step == until - 1) {
      truth.late_end_ns = std::max(truth.late_end_ns, i.end_ns);
    }
    if (i.root_rank == truth.late_rank && i.root >= 0) {
      truth.planted_wait_all_steps_ns += i.wait_ns;
      if (i.step > from) truth.planted_wait_ns += i.wait_ns;
    }
  }
  truth.end_ns = t.end_ns;
  truth.host_skew_ns = t.host_offset_ns;
  SyntheticJob job;
  job.job = name;
  job.scenario =
      plant ? SyntheticScenario::kStraggler : SyntheticScenario::kLockstep;
  job.truth_window_ns = options.truth_window_ns;
  for (Trace& rank : generated.ranks) {
    rank.job = name;
    rank.host = absl::StrFormat("%s-node-%02d", name, rank.rank / p.tp);
    rank.source_format = "synthetic";
    GiveRankOwnIds(rank.rank, &rank);
    job.ranks.push_back(std::move(rank));
  }
  job.straggler = truth;
  return job;
}

// Job `job_index` of the straggler scenario (`plant`: a StragglerJob whose
// late rank, cause and late steps are drawn from the seed) or of the lockstep
// scenario (the same job with no rank late, its step stretched or shrunk to
// the rate), over about `duration`; a TP x DP job instead where
// TensorDataShape says so.
SyntheticJob GenerateStragglerJob(const SyntheticFleetOptions& options,
                                  const std::string& name, int job_index,
                                  bool plant) {
  uint64_t state = RankSeed(options.seed, job_index, -1);
  if (std::optional<std::pair<int, int>> shape =
          TensorDataShape(job_index, options.gpus_per_job)) {
    return GenerateTensorDataJob(options, name, *shape, &state, plant);
  }
  StragglerJobOptions o;
  o.job = name;
  o.ranks = options.gpus_per_job;
  o.ranks_per_host = 8;
  o.start_time_ns = options.start_time_ns;
  o.seed = SplitMix64(&state);
  int64_t step_ns = kStragglerStepNs;
  if (!plant) {
    // Scale the step's times (not the few-microsecond launch offsets) so
    // that a step lasts 27 events at the rate; no shorter than 0.05 x,
    // where a 20 us kernel still outlasts the 6 us between launches.
    const double scale = std::max(
        0.05, kStragglerStepEvents * 1e9 / options.events_per_second_per_gpu /
                  static_cast<double>(kStragglerStepNs));
    auto scaled = [scale](int64_t ns) {
      return static_cast<int64_t>(static_cast<double>(ns) * scale);
    };
    o.kernel_ns = scaled(o.kernel_ns);
    o.loader_ns = scaled(o.loader_ns);
    o.transfer_ns = scaled(o.transfer_ns);
    step_ns = std::max<int64_t>(1, scaled(kStragglerStepNs));
  }
  o.steps = static_cast<int>(std::clamp<int64_t>(
      absl::ToInt64Nanoseconds(options.duration) / step_ns, 4, 10'000'000));
  if (!plant) {
    o.late_rank = -1;
    o.late_from_step = 0;
    o.late_until_step = 0;
    return ToSyntheticJob(options, name, SyntheticScenario::kLockstep,
                          MakeStragglerJob(o));
  }
  o.late_rank = static_cast<int>(SplitMix64(&state) %
                                 static_cast<uint64_t>(options.gpus_per_job));
  o.cause = static_cast<StragglerCause>(SplitMix64(&state) % 3);
  const int64_t from_pct = 10 + static_cast<int64_t>(SplitMix64(&state) % 31);
  const int64_t length_pct = 20 + static_cast<int64_t>(SplitMix64(&state) % 31);
  o.late_from_step = static_cast<int>(o.steps * from_pct / 100);
  o.late_until_step =
      std::max(o.late_from_step + 1,
               static_cast<int>(o.steps * (from_pct + length_pct) / 100));
  return ToSyntheticJob(options, name, SyntheticScenario::kStraggler,
                        MakeStragglerJob(o));
}

}  // namespace

absl::string_view SyntheticScenarioName(SyntheticScenario scenario) {
  return kScenarioNames[static_cast<int>(scenario)];
}

std::optional<SyntheticScenario> ParseSyntheticScenario(
    absl::string_view name) {
  for (size_t i = 0; i < kScenarioNames.size(); ++i) {
    if (kScenarioNames[i] == name) return static_cast<SyntheticScenario>(i);
  }
  return std::nullopt;
}

Trace SyntheticJob::MergedTrace() const {
  Trace merged;
  merged.names = SyntheticNameTable();
  merged.job = job;
  merged.world_size = ranks.empty() ? -1 : ranks.front().world_size;
  merged.host = ranks.size() == 1 ? ranks.front().host : "";
  merged.source_format = "synthetic";
  size_t gpu = 0;
  size_t cpu = 0;
  for (const Trace& r : ranks) {
    gpu += r.gpu.size();
    cpu += r.cpu.size();
  }
  merged.gpu.reserve(gpu);
  merged.cpu.reserve(cpu);
  // Ranks of the bubble scenarios share the synthetic name table; a
  // straggler job's ranks have tables of their own, remapped here.
  NameInterner interner(&merged);
  std::vector<NameId> remap;
  auto name = [&remap](NameId id) { return id == kNoName ? id : remap[id]; };
  for (const Trace& r : ranks) {
    remap.clear();
    bool identity = true;
    for (size_t i = 0; i < r.names.size(); ++i) {
      remap.push_back(interner.Intern(r.names[i]));
      identity &= remap.back() == i;
    }
    if (identity) {
      merged.gpu.insert(merged.gpu.end(), r.gpu.begin(), r.gpu.end());
      merged.cpu.insert(merged.cpu.end(), r.cpu.begin(), r.cpu.end());
    } else {
      for (GpuActivity a : r.gpu) {
        a.name = remap[a.name];
        merged.gpu.push_back(a);
      }
      for (CpuEvent e : r.cpu) {
        e.name = remap[e.name];
        merged.cpu.push_back(e);
      }
    }
    for (CollectiveKernel c : r.collectives) {
      c.kernel_name = name(c.kernel_name);
      c.collective = name(c.collective);
      c.process_group = name(c.process_group);
      c.group_ranks = name(c.group_ranks);
      c.dtype = name(c.dtype);
      merged.collectives.push_back(c);
    }
  }
  return merged;
}

absl::StatusOr<std::vector<SyntheticJob>> GenerateSyntheticFleet(
    const SyntheticFleetOptions& options) {
  if (options.jobs < 1 || options.gpus_per_job < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("need at least one job and one GPU per job, got ",
                     options.jobs, " and ", options.gpus_per_job));
  }
  if (options.duration <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the duration must be positive");
  }
  if (!(options.events_per_second_per_gpu > 0)) {
    return absl::InvalidArgumentError("the event rate must be positive");
  }
  if (options.truth_window_ns < 1'000'000) {
    return absl::InvalidArgumentError("truth windows must be >= 1 ms");
  }
  if (options.scenario == SyntheticScenario::kStraggler ||
      options.scenario == SyntheticScenario::kLockstep) {
    const bool plant = options.scenario == SyntheticScenario::kStraggler;
    if (options.gpus_per_job < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("the ", SyntheticScenarioName(options.scenario),
                       " scenario needs at least 2 GPUs per job"));
    }
    std::vector<SyntheticJob> jobs;
    for (int j = 0; j < options.jobs; ++j) {
      jobs.push_back(GenerateStragglerJob(
          options, absl::StrFormat("%s-%03d", options.job_prefix, j), j,
          plant));
    }
    return jobs;
  }
  // Ranks are independent (own seed, own device), so they are generated in
  // parallel; each has its own truth, concatenated per job in rank order.
  struct RankResult {
    Trace trace;
    std::vector<TruthWindow> truth;
    std::vector<PlantedGap> gaps;
  };
  const int num_ranks = options.jobs * options.gpus_per_job;
  std::vector<RankResult> results(num_ranks);
  std::vector<std::string> names(options.jobs);
  std::vector<SyntheticScenario> scenarios(options.jobs);
  for (int j = 0; j < options.jobs; ++j) {
    names[j] = absl::StrFormat("%s-%03d", options.job_prefix, j);
    scenarios[j] = options.scenario == SyntheticScenario::kMix
                       ? MixedScenario(j, options.gpus_per_job)
                       : options.scenario;
  }
  std::atomic<int> next{0};
  auto work = [&] {
    for (int i = next++; i < num_ranks; i = next++) {
      const int j = i / options.gpus_per_job;
      const int r = i % options.gpus_per_job;
      if (scenarios[j] == SyntheticScenario::kStraggler) continue;
      TruthAccumulator truth(options.truth_window_ns);
      RankResult& result = results[i];
      result.trace = GenerateRank(options, names[j], scenarios[j], j, r, &truth,
                                  options.keep_gaps ? &result.gaps : nullptr);
      result.truth = truth.Windows();
    }
  };
  const int threads = std::clamp<int>(std::thread::hardware_concurrency(), 1,
                                      std::min(num_ranks, 16));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();

  std::vector<SyntheticJob> jobs(options.jobs);
  for (int j = 0; j < options.jobs; ++j) {
    SyntheticJob& job = jobs[j];
    if (scenarios[j] == SyntheticScenario::kStraggler) {
      job = GenerateStragglerJob(options, names[j], j, /*plant=*/true);
      continue;
    }
    job.job = names[j];
    job.scenario = scenarios[j];
    job.truth_window_ns = options.truth_window_ns;
    for (int r = 0; r < options.gpus_per_job; ++r) {
      RankResult& result = results[j * options.gpus_per_job + r];
      job.ranks.push_back(std::move(result.trace));
      job.truth.insert(job.truth.end(), result.truth.begin(),
                       result.truth.end());
      job.gaps.insert(job.gaps.end(),
                      std::make_move_iterator(result.gaps.begin()),
                      std::make_move_iterator(result.gaps.end()));
    }
  }
  return jobs;
}

std::string StragglerTruthJsonLine(const SyntheticJob& job) {
  const StragglerTruth& t = *job.straggler;
  const bool planted = t.late_rank >= 0;
  std::string host;
  for (const Trace& r : job.ranks) {
    if (r.rank == t.late_rank) host = r.host;
  }
  JsonWriter j;
  j.BeginObject();
  j.Key("job").String(job.job);
  j.Key("scenario").String(SyntheticScenarioName(job.scenario));
  j.Key("scope").String("straggler");
  j.Key("ranks").Int(static_cast<int64_t>(job.ranks.size()));
  j.Key("rank").Int(t.late_rank);
  j.Key("host").String(host);
  j.Key("cause").String(planted ? StragglerCauseName(t.cause) : "none");
  j.Key("start_ns").Int(t.late_start_ns);
  j.Key("end_ns").Int(t.late_end_ns);
  j.Key("planted_wait_ns").Int(t.planted_wait_ns);
  j.EndObject();
  return j.str() + "\n";
}

absl::Status WriteSyntheticTruthFile(const std::vector<SyntheticJob>& jobs,
                                     absl::string_view path) {
  std::string text;
  for (const SyntheticJob& job : jobs) {
    if (job.straggler) {
      text += StragglerTruthJsonLine(job);
      continue;
    }
    WriteTruthJsonLines(job.job, SyntheticScenarioName(job.scenario),
                        job.truth_window_ns, job.truth, &text);
  }
  const std::string file(path.data(), path.size());
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) {
    return absl::UnavailableError(
        absl::StrCat("cannot write the truth file ", file));
  }
  return absl::OkStatus();
}

}  // namespace bubblewatch
