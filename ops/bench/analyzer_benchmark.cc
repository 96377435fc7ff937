// Analyzer throughput on a synthetic job: 8 devices x 4 streams of kernels,
// each with its cudaLaunchKernel call (correlation-matched) on one launching
// thread per device, plus a sync every 100 kernels. Half the events are
// kernels, half are CPU calls. Reports events/s (items_per_second).
//
//   build/ops/bench/analyzer_benchmark --benchmark_filter=Analyze
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <random>

#include "analysis/bubble_analyzer.h"
#include "analysis/collectives.h"
#include "analysis/rank_digest.h"
#include "benchmark/benchmark.h"
#include "ingest/synthetic/synthetic_straggler.h"

namespace bubblewatch {
namespace {

Trace MakeJob(int64_t total_events) {
  constexpr int kDevices = 8;
  constexpr int kStreams = 4;
  Trace t;
  NameInterner names(&t);
  NameId kernel_names[] = {names.Intern("ampere_sgemm_128x64_tn"),
                           names.Intern("vectorized_elementwise_kernel"),
                           names.Intern("reduce_kernel"),
                           names.Intern("nccl:all_reduce")};
  NameId launch = names.Intern("cudaLaunchKernel");
  NameId sync = names.Intern("cudaStreamSynchronize");
  int64_t per_stream = total_events / 2 / (kDevices * kStreams);
  t.gpu.reserve(per_stream * kDevices * kStreams);
  t.cpu.reserve(per_stream * kDevices * kStreams * 1.02);
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<int64_t> dur(2'000, 40'000), gap(0, 6'000);
  CorrelationId corr = 1;
  // Streams are emitted one after another (each sorted), as readers do.
  for (int d = 0; d < kDevices; ++d) {
    for (int s = 0; s < kStreams; ++s) {
      int64_t now = 1'700'000'000'000'000'000 + s * 1'000;
      int64_t thread_free = 0;  // The launching thread is sequential.
      for (int64_t i = 0; i < per_stream; ++i) {
        int64_t start = now + gap(rng);
        int64_t end = start + dur(rng);
        int64_t launch_start = std::max(thread_free, start - 5'000 - gap(rng));
        thread_free = launch_start + 3'000;
        t.gpu.push_back(GpuActivity{.start_ns = start,
                                    .end_ns = end,
                                    .correlation = corr,
                                    .name = kernel_names[i % 4],
                                    .device = d,
                                    .stream = s});
        t.cpu.push_back(CpuEvent{.start_ns = launch_start,
                                 .end_ns = launch_start + 3'000,
                                 .correlation = corr,
                                 .thread = static_cast<uint64_t>(d * 16 + s),
                                 .name = launch,
                                 .category = CpuEventCategory::kCudaRuntime});
        if (i % 100 == 99) {
          t.cpu.push_back(CpuEvent{.start_ns = end,
                                   .end_ns = end + 20'000,
                                   .thread = static_cast<uint64_t>(d * 16 + s),
                                   .name = sync,
                                   .category = CpuEventCategory::kCudaRuntime});
          now = end + 25'000;
        } else {
          now = end;
        }
        ++corr;
      }
    }
  }
  return t;
}

// Minor page faults (first touches of fresh memory) of the process so far.
int64_t MinorFaults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

// Reports events/s of wall time (items_per_second) and, because this machine
// is shared, of the thread's CPU time (cpu_events_per_s), plus the page faults
// of one analysis: at 10 M events a good part of the time is the kernel
// zeroing fresh pages, so the working set is a figure worth watching.
void BM_AnalyzeTrace(benchmark::State& state) {
  Trace job = MakeJob(state.range(0));
  int64_t events = static_cast<int64_t>(job.gpu.size() + job.cpu.size());
  const int64_t faults_before = MinorFaults();
  const double cpu_before = ThreadCpuSeconds();
  for (auto _ : state) {
    absl::StatusOr<Analysis> a = AnalyzeTrace(job);
    benchmark::DoNotOptimize(a);
    if (!a.ok()) state.SkipWithError("analysis failed");
  }
  state.SetItemsProcessed(state.iterations() * events);
  state.counters["events"] = static_cast<double>(events);
  state.counters["cpu_events_per_s"] =
      static_cast<double>(state.iterations() * events) /
      (ThreadCpuSeconds() - cpu_before);
  state.counters["faults_per_run"] =
      static_cast<double>(MinorFaults() - faults_before) /
      static_cast<double>(state.iterations());
}
BENCHMARK(BM_AnalyzeTrace)
    ->Arg(1'000'000)
    ->Arg(10'000'000)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// `ranks` ranks of `events` events each: a synthetic job with a data-loading
// straggler (13 kernels, 13 launches and a loader range per step, the last
// kernel an all-reduce), on two hosts whose clocks are 5 ms apart.
struct RankJob {
  StragglerJob job;
  std::vector<RankInput> inputs;
  int64_t events = 0;
  int late_rank = 0;
};

RankJob MakeRankJob(int64_t events_per_rank, int ranks) {
  const int kRanks = ranks;
  constexpr int kEventsPerStep = 27;
  StragglerJobOptions options;
  options.ranks = kRanks;
  options.steps = static_cast<int>(events_per_rank / kEventsPerStep);
  options.host_skew_ns = {0, 5'000'000};
  options.ranks_per_host = std::max(1, kRanks / 2);
  options.late_rank = std::min(options.late_rank, kRanks - 1);
  RankJob out;
  out.job = MakeStragglerJob(options);
  out.late_rank = options.late_rank;
  for (int r = 0; r < kRanks; ++r) {
    const Trace& t = out.job.ranks[r];
    out.events += static_cast<int64_t>(t.gpu.size() + t.cpu.size());
    RankInput in;
    in.trace = &t;
    in.device = r % options.ranks_per_host;
    in.rank = r;
    in.clock_domain = t.host;
    out.inputs.push_back(in);
  }
  return out;
}

// The collective analysis: matching, clocks, waits, straggler
// attribution and the analysis of every rank, per core. Compare with
// BM_AnalyzeRanksAlone, the same ranks analyzed one by one without it.
// Peak resident memory of the process so far, in MiB.
double MaxRssMiB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

// Arguments: events per rank, ranks. Besides the speed it reports the peak
// RSS once the job is built (the input traces) and after the analyses, so
// that runs with the same total events over 2, 8 and 64 ranks show whether
// the analysis' memory follows the events or the ranks.
void BM_AnalyzeCollectives(benchmark::State& state) {
  RankJob job = MakeRankJob(state.range(0), static_cast<int>(state.range(1)));
  const double rss_input = MaxRssMiB();
  const double cpu_before = ThreadCpuSeconds();
  for (auto _ : state) {
    absl::StatusOr<CollectiveAnalysis> c = AnalyzeCollectives(job.inputs);
    benchmark::DoNotOptimize(c);
    if (!c.ok() || c->stragglers.empty() ||
        c->stragglers[0].rank != job.late_rank) {
      state.SkipWithError("the planted straggler was not found");
    }
  }
  state.SetItemsProcessed(state.iterations() * job.events);
  state.counters["events"] = static_cast<double>(job.events);
  state.counters["cpu_events_per_s"] =
      static_cast<double>(state.iterations() * job.events) /
      (ThreadCpuSeconds() - cpu_before);
  state.counters["input_peak_rss_mib"] = rss_input;
  state.counters["peak_rss_mib"] = MaxRssMiB();
}

// The cross-rank stage alone (docs/architecture.md#one-job-across-processors):
// AnalyzeDigests over the same job's digests, made once before the loop.
// Items are collective kernels; digest_bytes is their encoding's size.
void BM_AnalyzeDigests(benchmark::State& state) {
  RankJob job = MakeRankJob(state.range(0), static_cast<int>(state.range(1)));
  std::vector<RankDigest> digests;
  int64_t kernels = 0;
  int64_t bytes = 0;
  for (const RankInput& in : job.inputs) {
    absl::StatusOr<RankDigest> d = DigestRank(in);
    if (!d.ok()) {
      state.SkipWithError("a rank could not be digested");
      return;
    }
    kernels += static_cast<int64_t>(d->kernels.size());
    bytes += static_cast<int64_t>(EncodeRankDigest(*d).size());
    digests.push_back(*std::move(d));
  }
  const double cpu_before = ThreadCpuSeconds();
  for (auto _ : state) {
    absl::StatusOr<CollectiveAnalysis> c = AnalyzeDigests(digests);
    benchmark::DoNotOptimize(c);
    if (!c.ok() || c->stragglers.empty() ||
        c->stragglers[0].rank != job.late_rank) {
      state.SkipWithError("the planted straggler was not found");
    }
  }
  state.SetItemsProcessed(state.iterations() * kernels);
  state.counters["kernels"] = static_cast<double>(kernels);
  state.counters["events"] = static_cast<double>(job.events);
  state.counters["digest_bytes"] = static_cast<double>(bytes);
  state.counters["cpu_kernels_per_s"] =
      static_cast<double>(state.iterations() * kernels) /
      (ThreadCpuSeconds() - cpu_before);
}
BENCHMARK(BM_AnalyzeDigests)
    ->Args({1'000'000, 8})
    ->Args({125'000, 64})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_AnalyzeRanksAlone(benchmark::State& state) {
  RankJob job = MakeRankJob(state.range(0), 8);
  const double cpu_before = ThreadCpuSeconds();
  for (auto _ : state) {
    for (const RankInput& in : job.inputs) {
      absl::StatusOr<Analysis> a = AnalyzeTrace(*in.trace);
      benchmark::DoNotOptimize(a);
    }
  }
  state.SetItemsProcessed(state.iterations() * job.events);
  state.counters["events"] = static_cast<double>(job.events);
  state.counters["cpu_events_per_s"] =
      static_cast<double>(state.iterations() * job.events) /
      (ThreadCpuSeconds() - cpu_before);
}
BENCHMARK(BM_AnalyzeRanksAlone)
    ->Arg(1'000'000)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// 8 ranks of 1 M events: the speed target. Then 8 M events in all
// over 2, 8 and 64 ranks, for the memory (run each alone for its peak RSS:
// --benchmark_filter=AnalyzeCollectives/4000000/2$ and so on).
BENCHMARK(BM_AnalyzeCollectives)
    ->Args({1'000'000, 8})
    ->Args({4'000'000, 2})
    ->Args({125'000, 64})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace bubblewatch

BENCHMARK_MAIN();
