// The window store's reads as `query` uses them, on a store of
// realistic size: "job J's last hour" (360 windows of 10 s) through the
// library, with p50/p99 latency counters; the fleet reads; and Commit
// throughput at the processor's steady state.
//
// The big store is built once through Commit and cached in a directory (the
// parameters are recorded in it; a mismatch rebuilds). Parameters, from the
// environment:
//   BUBBLEWATCH_BENCH_STORE    store directory
//                              (default
//                              /var/tmp/bubblewatch-window-store-bench)
//   BUBBLEWATCH_BENCH_JOBS     jobs (default 10000)
//   BUBBLEWATCH_BENCH_HOURS    hours of 10 s windows per job (default 6)
//   BUBBLEWATCH_BENCH_DEVICES  GPUs per job, each with its stats (default 8)
//
//   BUBBLEWATCH_BENCH_JOBS=1000 build-storage/ops/bench/window_store_benchmark
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "benchmark/benchmark.h"
#include "storage/window_store.h"

namespace bubblewatch {
namespace {

constexpr int64_t kWindowNs = 10'000'000'000;
constexpr int64_t kHourNs = 3'600'000'000'000;
// A window-aligned epoch time (2023-11-14), so starts look real.
constexpr int64_t kFirstStartNs = 1'700'000'000'000'000'000;
constexpr int kTopBubbles = 3;  // The processor's default per window.

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoll(v) : fallback;
}

struct Params {
  std::string dir;
  int64_t jobs;
  int64_t hours;
  int64_t devices;

  int64_t windows_per_job() const { return hours * kHourNs / kWindowNs; }
  std::string Signature() const {
    return absl::StrFormat("jobs=%d hours=%d devices=%d format=1", jobs, hours,
                           devices);
  }
};

const Params& GetParams() {
  static const Params* params = [] {
    const char* dir = std::getenv("BUBBLEWATCH_BENCH_STORE");
    return new Params{.dir = dir != nullptr && *dir != '\0'
                                 ? dir
                                 : "/var/tmp/bubblewatch-window-store-bench",
                      .jobs = EnvInt("BUBBLEWATCH_BENCH_JOBS", 10000),
                      .hours = EnvInt("BUBBLEWATCH_BENCH_HOURS", 6),
                      .devices = EnvInt("BUBBLEWATCH_BENCH_DEVICES", 8)};
  }();
  return *params;
}

std::string JobName(int64_t i) { return absl::StrFormat("job-%05d", i); }

const char* const kKernels[] = {"ampere_sgemm_128x64_tn",
                                "vectorized_elementwise_kernel",
                                "reduce_kernel",
                                "nccl:all_reduce",
                                "cutlass_80_tensorop_gemm",
                                "softmax_warp_forward",
                                "layer_norm_fwd",
                                "flash_fwd_kernel"};
const char* const kBlamed[] = {"cudaStreamSynchronize", "aten::item",
                               "cudaLaunchKernel",      "cudaMalloc",
                               "DataLoader.__next__",   "cudaMemcpyAsync"};

// Plausible numbers: ns values vary like real ones (so compression sees
// realistic entropy), names come from a small vocabulary.
class WindowMaker {
 public:
  explicit WindowMaker(int64_t devices) : devices_(devices) {}

  WindowSummary Make(const std::string& job, int64_t start_ns) {
    WindowSummary s;
    s.job = job;
    s.window.start_ns = start_ns;
    s.window.end_ns = start_ns + kWindowNs;
    for (int64_t d = 0; d < devices_; ++d) {
      DeviceWindow dw{.device = static_cast<int32_t>(d),
                      .stats = Stats(start_ns),
                      .kernels = Uniform(2'000, 40'000)};
      s.window.job.span_ns += dw.stats.span_ns;
      s.window.job.compute_ns += dw.stats.compute_ns;
      s.window.job.bubble_ns += dw.stats.bubble_ns;
      for (int c = 0; c < kNumBubbleCauses; ++c) {
        s.window.job.attribution[c] += dw.stats.attribution[c];
      }
      if (dw.stats.largest_bubble_ns > s.window.job.largest_bubble_ns) {
        s.window.job.largest_bubble_ns = dw.stats.largest_bubble_ns;
        s.window.job.largest_bubble_start_ns = dw.stats.largest_bubble_start_ns;
        s.window.job.culprit_before_bubble = dw.stats.culprit_before_bubble;
      }
      s.window.devices.push_back(std::move(dw));
    }
    for (int i = 0; i < kTopBubbles; ++i) {
      BubbleReport b;
      b.device = static_cast<int32_t>(Uniform(0, devices_ - 1));
      b.start_ns = start_ns + Uniform(0, kWindowNs / 2);
      b.end_ns = b.start_ns + Uniform(100'000, 50'000'000);
      b.before = Kernel(b.start_ns - Uniform(1'000, 500'000), b.start_ns);
      b.after = Kernel(b.end_ns, b.end_ns + Uniform(1'000, 500'000));
      b.attribution[Uniform(0, kNumBubbleCauses - 1)] = b.end_ns - b.start_ns;
      b.cause = static_cast<BubbleCause>(Uniform(0, kNumBubbleCauses - 1));
      b.blamed = kBlamed[Uniform(0, std::size(kBlamed) - 1)];
      s.window.top_bubbles.push_back(std::move(b));
    }
    s.gpu_events = Uniform(10'000, 400'000);
    s.cpu_events = Uniform(10'000, 400'000);
    s.late_events = Uniform(0, 3) == 0 ? Uniform(1, 50) : 0;
    return s;
  }

 private:
  int64_t Uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  KernelRef Kernel(int64_t start, int64_t end) {
    return KernelRef{.name = kKernels[Uniform(0, std::size(kKernels) - 1)],
                     .start_ns = start,
                     .end_ns = end,
                     .stream = static_cast<int32_t>(Uniform(7, 20))};
  }
  UtilizationStats Stats(int64_t start_ns) {
    UtilizationStats u;
    u.span_ns = kWindowNs - Uniform(0, 1'000'000);
    u.compute_ns = Uniform(u.span_ns / 4, u.span_ns);
    u.bubble_ns = u.span_ns - u.compute_ns;
    int64_t left = u.bubble_ns;
    for (int c = 0; c < kNumBubbleCauses - 1; ++c) {
      u.attribution[c] = Uniform(0, left / 2);
      left -= u.attribution[c];
    }
    u.attribution[kNumBubbleCauses - 1] = left;
    u.largest_bubble_ns =
        Uniform(0, std::min<int64_t>(u.bubble_ns, 1'000'000'000));
    u.largest_bubble_start_ns = start_ns + Uniform(0, kWindowNs / 2);
    u.culprit_before_bubble =
        Kernel(u.largest_bubble_start_ns - Uniform(1'000, 500'000),
               u.largest_bubble_start_ns);
    return u;
  }

  int64_t devices_;
  std::mt19937_64 rng_{12345};
};

int64_t DirBytes(const std::string& dir) {
  int64_t total = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec)) total += static_cast<int64_t>(e.file_size(ec));
  }
  return total;
}

void Die(const absl::Status& status) {
  absl::FPrintF(stderr, "window_store_benchmark: %s\n", status.ToString());
  std::exit(1);
}

// Builds the store unless the directory already holds one with the same
// parameters. Jobs are written one after another, 6 h at a time (sorted
// keys keep compaction cheap); each Commit also carries the job's update and
// a partition's progress, as the processor's do.
void BuildStoreIfNeeded(const Params& p) {
  const std::string marker = p.dir + "/bench_params";
  {
    std::ifstream in(marker);
    std::string line;
    if (std::getline(in, line) && line == p.Signature()) return;
  }
  std::error_code ec;
  std::filesystem::remove_all(p.dir, ec);
  WindowStoreOptions options;
  options.write_buffer_bytes = int64_t{128} << 20;  // Fewer, larger flushes.
  absl::StatusOr<std::unique_ptr<WindowStore>> store =
      OpenRocksDbWindowStore(p.dir, options);
  if (!store.ok()) Die(store.status());
  WindowMaker maker(p.devices);
  const auto t0 = std::chrono::steady_clock::now();
  int64_t windows = 0;
  for (int64_t j = 0; j < p.jobs; ++j) {
    const std::string job = JobName(j);
    const int64_t n = p.windows_per_job();
    constexpr int64_t kBatch = 360;
    for (int64_t i = 0; i < n; i += kBatch) {
      StoreBatch batch;
      for (int64_t k = i; k < std::min(n, i + kBatch); ++k) {
        batch.windows.push_back(maker.Make(job, kFirstStartNs + k * kWindowNs));
      }
      batch.jobs.push_back(
          JobUpdate{.job = job,
                    .last_event_ns = batch.windows.back().window.end_ns,
                    .last_seen_wall = absl::Now(),
                    .state = std::string(200, 's')});
      batch.progress.push_back(
          {"bubblewatch.events", static_cast<int32_t>(j % 12), j, j + 1});
      windows += static_cast<int64_t>(batch.windows.size());
      absl::Status s = (*store)->Commit(batch);
      if (!s.ok()) Die(s);
    }
    if ((j + 1) % 500 == 0) {
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count();
      absl::FPrintF(stderr, "  %d jobs, %d windows, %.0f s, %.0f windows/s\n",
                    j + 1, windows, secs, windows / secs);
    }
  }
  store->reset();  // Close: flushes nothing new; compactions finish later.
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  std::ofstream(marker) << p.Signature() << "\n";
  absl::FPrintF(stderr,
                "built %d windows (%s) in %.1f s: %.0f windows/s, %.2f GB on "
                "disk\n",
                windows, p.Signature(), secs, windows / secs,
                DirBytes(p.dir) / 1e9);
}

// The stores the read benchmarks share, opened (and built) once, closed by
// main(): destroying a RocksDB instance during static destruction crashes.
std::unique_ptr<WindowStoreReader> primary;
std::unique_ptr<WindowStoreReader> secondary;

WindowStoreReader& Store(bool read_only) {
  std::unique_ptr<WindowStoreReader>& slot = read_only ? secondary : primary;
  if (slot == nullptr) {
    const Params& p = GetParams();
    BuildStoreIfNeeded(p);
    if (read_only) {
      auto s = OpenRocksDbWindowStoreReadOnly(p.dir);
      if (!s.ok()) Die(s.status());
      slot = std::move(s).value();
    } else {
      auto s = OpenRocksDbWindowStore(p.dir);
      if (!s.ok()) Die(s.status());
      slot = std::move(s).value();
    }
    absl::FPrintF(stderr, "%s\n", slot->Describe());
  }
  return *slot;
}

// CPU time of the calling thread, in ms: on a shared 2-core machine wall
// time also counts waiting for a core; both are reported.
double ThreadCpuMs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void ReportLatencies(benchmark::State& state, const std::string& prefix,
                     std::vector<double>& ms) {
  if (ms.empty()) return;
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) {
    return ms[std::min(ms.size() - 1, static_cast<size_t>(q * ms.size()))];
  };
  state.counters[prefix + "p50_ms"] = at(0.50);
  state.counters[prefix + "p99_ms"] = at(0.99);
  if (prefix.empty()) state.counters["max_ms"] = ms.back();
}

// "Job J's last hour": the job's record (latest window) and a Scan of the
// 360 windows ending there, fully decoded; random jobs. `read_only` reads
// through a secondary instance, as `bubblewatch query --store` does while
// the processor runs.
void LastHour(benchmark::State& state, bool read_only) {
  WindowStoreReader& store = Store(read_only);
  const Params& p = GetParams();
  std::mt19937_64 rng(42);
  std::vector<double> ms, cpu_ms;
  int64_t windows = 0;
  for (auto _ : state) {
    const std::string job = JobName(static_cast<int64_t>(rng() % p.jobs));
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = ThreadCpuMs();
    auto info = store.Job(job);
    if (!info.ok()) Die(info.status());
    if (!info->has_value()) Die(absl::NotFoundError(job));
    const int64_t from = (*info)->latest_window_start_ns + kWindowNs - kHourNs;
    auto got =
        store.Scan(job, absl::FromUnixNanos(from), absl::InfiniteFuture());
    if (!got.ok()) Die(got.status());
    ms.push_back(std::chrono::duration<double, std::milli>(
                     std::chrono::steady_clock::now() - t0)
                     .count());
    cpu_ms.push_back(ThreadCpuMs() - cpu0);
    windows += static_cast<int64_t>(got->size());
    benchmark::DoNotOptimize(got);
  }
  ReportLatencies(state, "", ms);
  ReportLatencies(state, "cpu_", cpu_ms);
  state.counters["windows_per_query"] =
      static_cast<double>(windows) / std::max<int64_t>(1, ms.size());
  state.counters["block_cache_MiB"] =
      store.MemoryUsage().block_cache_usage / double{1 << 20};
}

void BM_JobLastHour(benchmark::State& state) { LastHour(state, false); }
BENCHMARK(BM_JobLastHour)->Iterations(3000)->Unit(benchmark::kMillisecond);

void BM_JobLastHourReadOnly(benchmark::State& state) { LastHour(state, true); }
BENCHMARK(BM_JobLastHourReadOnly)
    ->Iterations(3000)
    ->Unit(benchmark::kMillisecond);

void BM_LatestOfEveryJob(benchmark::State& state) {
  WindowStoreReader& store = Store(false);
  int64_t n = 0;
  for (auto _ : state) {
    auto got = store.LatestOfEveryJob();
    if (!got.ok()) Die(got.status());
    n = static_cast<int64_t>(got->size());
  }
  state.counters["jobs"] = static_cast<double>(n);
}
BENCHMARK(BM_LatestOfEveryJob)->Unit(benchmark::kMillisecond);

void BM_ListJobs(benchmark::State& state) {
  WindowStoreReader& store = Store(false);
  for (auto _ : state) {
    auto got = store.ListJobs();
    if (!got.ok()) Die(got.status());
    benchmark::DoNotOptimize(got);
  }
}
BENCHMARK(BM_ListJobs)->Unit(benchmark::kMillisecond);

// A periodic retention pass over every job when nothing has expired (the
// store holds exactly `hours` per job and retention is that long): the
// steady-state cost of the pass, one scan of the job records. (The untimed
// first pass also records each job's oldest window in stores built before
// records had it.)
void BM_ApplyRetentionPass(benchmark::State& state) {
  auto* store = dynamic_cast<WindowStore*>(&Store(false));
  const absl::Duration retention = absl::Hours(GetParams().hours);
  auto first = store->ApplyRetention(retention);
  if (!first.ok()) Die(first.status());
  int64_t deleted = first->windows_deleted;
  for (auto _ : state) {
    auto stats = store->ApplyRetention(retention);
    if (!stats.ok()) Die(stats.status());
    deleted += stats->windows_deleted;
  }
  state.counters["windows_deleted"] = static_cast<double>(deleted);
}
BENCHMARK(BM_ApplyRetentionPass)->Unit(benchmark::kMillisecond);

// The processor's steady state on a fresh store: every 10 s, 1,000 jobs
// close a window each; one Commit per 100 windows with their job updates
// (200-byte state) and a partition's progress.
void BM_CommitSteadyState(benchmark::State& state) {
  const std::string dir = GetParams().dir + "-commit";
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  auto store = OpenRocksDbWindowStore(dir);
  if (!store.ok()) Die(store.status());
  WindowMaker maker(GetParams().devices);
  int64_t step = 0, windows = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<StoreBatch> batches(10);
    for (int j = 0; j < 1000; ++j) {
      StoreBatch& b = batches[j / 100];
      const std::string job = JobName(j);
      b.windows.push_back(maker.Make(job, kFirstStartNs + step * kWindowNs));
      b.jobs.push_back(JobUpdate{.job = job,
                                 .last_event_ns = kFirstStartNs,
                                 .last_seen_wall = absl::Now(),
                                 .state = std::string(200, 's')});
    }
    for (int i = 0; i < 10; ++i) {
      batches[i].progress.push_back({"bubblewatch.events", i, step, step});
    }
    state.ResumeTiming();
    for (const StoreBatch& b : batches) {
      absl::Status s = (*store)->Commit(b);
      if (!s.ok()) Die(s);
    }
    windows += 1000;
    ++step;
  }
  state.SetItemsProcessed(windows);
  store->reset();
  std::filesystem::remove_all(dir, ec);
}
BENCHMARK(BM_CommitSteadyState)->Unit(benchmark::kMillisecond);

}  // namespace

void CloseStores() {
  secondary.reset();
  primary.reset();
}

}  // namespace bubblewatch

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  bubblewatch::CloseStores();
  return 0;
}
