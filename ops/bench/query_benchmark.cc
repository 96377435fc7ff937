// "Job J's last hour" as `bubblewatch query` and the HTTP API answer it, on a
// store of realistic size: 360 windows of 10 s through the library
// (QueryJob: scan, decode, rolling figures, summary, top bubbles), the same
// rendered as JSON, and through HTTP on loopback (HttpServer + cpp-httplib
// client, keep-alive, as `bubblewatch serve` runs it); plus the fleet
// ranking and a /metrics page. Latencies are reported as p50/p99 counters.
//
// The store is opened read-only (a RocksDB secondary instance, as `query
// --store` and `serve` open it). If the directory holds no store, one is
// built through Commit: N jobs x H hours of 10 s windows, 8 devices and 3 top
// bubbles per window. A store written by window_store_benchmark works too
// (same job names; its `bench_params` file gives the job count).
// The case, "the job's last hour with the per-rank table for 64
// ranks": BM_QueryJobLastHour64Ranks queries jobs whose every window holds
// a collective analysis of 64 ranks (64 RankWindows, 3 stragglers), the
// period's per-rank table and stragglers included. The store gets
// kRankJobs such jobs ("ranks64-job-NNN", 360 windows each, about 40 MB)
// the first time the benchmark opens it (marker file `ranks64_params`), so
// the 10,000-job store serves both cases; the other cases never read them.
// Parameters, from the environment:
//   BUBBLEWATCH_BENCH_STORE  store directory (default
//                            /var/tmp/bubblewatch-query-bench)
//   BUBBLEWATCH_BENCH_JOBS   jobs when building (default 1000)
//   BUBBLEWATCH_BENCH_HOURS  hours per job when building (default 6)
//
//   BUBBLEWATCH_BENCH_STORE=/var/tmp/bw-bench-10000
//   build/ops/bench/query_benchmark
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "benchmark/benchmark.h"
#include "httplib.h"
#include "serve/http_server.h"
#include "serve/prometheus_metrics.h"
#include "serve/query_report.h"
#include "storage/window_queries.h"
#include "storage/window_store.h"

namespace bubblewatch {
namespace {

constexpr int64_t kWindowNs = 10'000'000'000;
constexpr int64_t kFirstStartNs = 1'700'000'000'000'000'000;

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoll(v) : fallback;
}

std::string StoreDir() {
  const char* dir = std::getenv("BUBBLEWATCH_BENCH_STORE");
  return dir != nullptr && *dir != '\0' ? dir
                                        : "/var/tmp/bubblewatch-query-bench";
}

std::string JobName(int64_t i) { return absl::StrFormat("job-%05d", i); }

constexpr int64_t kRankJobs = 20;
constexpr int32_t kRanks = 64;
std::string RankJobName(int64_t i) {
  return absl::StrFormat("ranks64-job-%03d", i);
}

[[noreturn]] void Die(const absl::Status& status) {
  absl::FPrintF(stderr, "query_benchmark: %s\n", status.ToString());
  std::exit(1);
}

// A window with the shape the processor writes: 8 devices, 3 top bubbles,
// numbers that vary like real ones.
WindowSummary MakeWindow(std::mt19937_64& rng, const std::string& job,
                         int64_t start) {
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  WindowSummary s;
  s.job = job;
  s.window.start_ns = start;
  s.window.end_ns = start + kWindowNs;
  for (int32_t d = 0; d < 8; ++d) {
    UtilizationStats u;
    u.span_ns = kWindowNs - uniform(0, 1'000'000);
    u.compute_ns = uniform(u.span_ns / 4, u.span_ns);
    u.bubble_ns = u.span_ns - u.compute_ns;
    int64_t left = u.bubble_ns;
    for (int c = 0; c < kNumBubbleCauses - 1; ++c) {
      u.attribution[c] = uniform(0, left / 2);
      left -= u.attribution[c];
    }
    u.attribution[kNumBubbleCauses - 1] = left;
    u.largest_bubble_ns = uniform(0, std::min<int64_t>(u.bubble_ns, 1e9));
    u.largest_bubble_start_ns = start + uniform(0, kWindowNs / 2);
    u.culprit_before_bubble = KernelRef{"ampere_sgemm_128x64_tn", start,
                                        u.largest_bubble_start_ns, 7};
    UtilizationStats& j = s.window.job;
    j.span_ns += u.span_ns;
    j.compute_ns += u.compute_ns;
    j.bubble_ns += u.bubble_ns;
    for (int c = 0; c < kNumBubbleCauses; ++c) {
      j.attribution[c] += u.attribution[c];
    }
    if (u.largest_bubble_ns > j.largest_bubble_ns) {
      j.largest_bubble_ns = u.largest_bubble_ns;
      j.largest_bubble_start_ns = u.largest_bubble_start_ns;
      j.culprit_before_bubble = u.culprit_before_bubble;
    }
    s.window.devices.push_back(
        DeviceWindow{.device = d, .stats = u, .kernels = uniform(2000, 40000)});
  }
  for (int i = 0; i < 3; ++i) {
    BubbleReport b;
    b.device = static_cast<int32_t>(uniform(0, 7));
    b.start_ns = start + uniform(0, kWindowNs / 2);
    b.end_ns = b.start_ns + uniform(100'000, 50'000'000);
    b.before = KernelRef{"flash_fwd_kernel", b.start_ns - 5000, b.start_ns, 7};
    b.after = KernelRef{"layer_norm_fwd", b.end_ns, b.end_ns + 5000, 7};
    b.cause = static_cast<BubbleCause>(uniform(0, kNumBubbleCauses - 1));
    b.attribution[static_cast<int>(b.cause)] = b.end_ns - b.start_ns;
    b.blamed = "cudaStreamSynchronize";
    s.window.top_bubbles.push_back(b);
  }
  s.gpu_events = uniform(10'000, 400'000);
  s.cpu_events = uniform(10'000, 400'000);
  return s;
}

// MakeWindow plus the collective analysis of a 64-rank job (8 hosts of 8
// GPUs): every rank's figures, the 3 stragglers the processor keeps, the
// counts; numbers that vary like real ones.
WindowSummary MakeRankWindow(std::mt19937_64& rng, const std::string& job,
                             int64_t start) {
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  WindowSummary s = MakeWindow(rng, job, start);
  WindowCollectives& c = s.collectives.emplace();
  c.key = 0;  // pg_seq.
  c.matched = uniform(1000, 2000) / kRanks * kRanks;
  c.kernels = c.matched * kRanks;
  c.unsynchronized = uniform(0, 5);
  c.used = c.matched - c.unsynchronized;
  for (int32_t r = 0; r < kRanks; ++r) {
    RankWindow w;
    w.rank = r;
    w.host = absl::StrFormat("%s-node-%02d", job, r / 8);
    w.device = r % 8;
    w.span_ns = kWindowNs - uniform(0, 1'000'000);
    w.compute_ns = uniform(w.span_ns / 2, w.span_ns);
    w.comm_ns = uniform(w.span_ns / 10, w.span_ns / 4);
    w.comm_exposed_ns = uniform(0, w.comm_ns);
    w.comm_wait_ns = uniform(0, w.comm_exposed_ns);
    w.wait_caused_ns = uniform(0, 50'000'000);
    w.arrived_last = uniform(0, 30);
    w.clock_offset_ns = uniform(-2'000'000, 2'000'000);
    c.ranks.push_back(std::move(w));
  }
  for (int i = 0; i < 3; ++i) {
    StragglerWindow st;
    st.rank = static_cast<int32_t>(uniform(0, kRanks - 1));
    st.wait_caused_ns = uniform(10'000'000, 900'000'000) / (i + 1);
    st.arrived_last = uniform(1, 200);
    st.compute_ns = uniform(0, st.wait_caused_ns / 3);
    st.comm_ns = uniform(0, st.wait_caused_ns / 10);
    st.causes[static_cast<int>(BubbleCause::kDataLoading)] =
        st.wait_caused_ns - st.compute_ns - st.comm_ns;
    c.stragglers.push_back(st);
  }
  return s;
}

// Adds the kRankJobs 64-rank jobs to the store at `dir` once.
void EnsureRankJobs(WindowStore& store, const std::string& dir) {
  if (std::ifstream(dir + "/ranks64_params").good()) return;
  absl::FPrintF(stderr, "adding %d jobs of %d ranks x 360 windows to %s\n",
                kRankJobs, kRanks, dir);
  std::mt19937_64 rng(64);
  for (int64_t j = 0; j < kRankJobs; ++j) {
    StoreBatch batch;
    for (int64_t i = 0; i < 360; ++i) {
      batch.windows.push_back(
          MakeRankWindow(rng, RankJobName(j), kFirstStartNs + i * kWindowNs));
    }
    batch.jobs.push_back(JobUpdate{.job = RankJobName(j),
                                   .last_event_ns = kFirstStartNs,
                                   .last_seen_wall = absl::Now()});
    if (absl::Status st = store.Commit(batch); !st.ok()) Die(st);
  }
  std::ofstream(dir + "/ranks64_params")
      << absl::StrFormat("jobs=%d ranks=%d windows=360\n", kRankJobs, kRanks);
}

// The number of jobs in the store at `dir`, building it first if needed.
int64_t EnsureStore(const std::string& dir) {
  std::ifstream in(dir + "/bench_params");
  std::string line;
  std::smatch m;
  if (std::getline(in, line) &&
      std::regex_search(line, m, std::regex("jobs=([0-9]+)"))) {
    return std::stoll(m[1]);
  }
  const int64_t jobs = EnvInt("BUBBLEWATCH_BENCH_JOBS", 1000);
  const int64_t windows = EnvInt("BUBBLEWATCH_BENCH_HOURS", 6) * 360;
  absl::FPrintF(stderr, "building %d jobs x %d windows in %s\n", jobs, windows,
                dir);
  {
    WindowStoreOptions options;
    options.write_buffer_bytes = int64_t{128} << 20;
    auto store = OpenRocksDbWindowStore(dir, options);
    if (!store.ok()) Die(store.status());
    std::mt19937_64 rng(7);
    for (int64_t j = 0; j < jobs; ++j) {
      StoreBatch batch;
      for (int64_t i = 0; i < windows; ++i) {
        batch.windows.push_back(
            MakeWindow(rng, JobName(j), kFirstStartNs + i * kWindowNs));
      }
      batch.jobs.push_back(JobUpdate{.job = JobName(j),
                                     .last_event_ns = kFirstStartNs,
                                     .last_seen_wall = absl::Now()});
      if (absl::Status s = (*store)->Commit(batch); !s.ok()) Die(s);
      if ((j + 1) % 1000 == 0) {
        absl::FPrintF(stderr, "  %d jobs written\n", j + 1);
      }
    }
  }
  std::ofstream(dir + "/bench_params") << absl::StrFormat(
      "jobs=%d hours=%d devices=8 format=query\n", jobs, windows / 360);
  return jobs;
}

double MsSince(std::chrono::steady_clock::time_point t0);

struct Fixture {
  std::unique_ptr<WindowStoreReader> store;
  int64_t jobs = 0;
};

Fixture& GetFixture() {
  static Fixture* f = [] {
    auto* fx = new Fixture;
    const std::string dir = StoreDir();
    fx->jobs = EnsureStore(dir);
    {
      // A store built before the running sums existed gets them here, once
      // (the processor's store does when it opens); later opens are a
      // marker read.
      const auto t0 = std::chrono::steady_clock::now();
      auto primary = OpenRocksDbWindowStore(dir);
      if (!primary.ok()) Die(primary.status());
      absl::FPrintF(stderr, "opened read-write in %.0f ms\n", MsSince(t0));
      EnsureRankJobs(**primary, dir);
    }
    auto store = OpenRocksDbWindowStoreReadOnly(dir);
    if (!store.ok()) Die(store.status());
    fx->store = *std::move(store);
    absl::FPrintF(stderr, "%d jobs; %s\n", fx->jobs, fx->store->Describe());
    return fx;
  }();
  return *f;
}

// Nearest-rank percentiles of `ms` as counters PREFIXp50_ms, PREFIXp99_ms.
void Report(benchmark::State& state, const std::string& prefix,
            std::vector<double>& ms) {
  if (ms.empty()) return;
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) {
    return ms[std::min(ms.size() - 1, static_cast<size_t>(q * ms.size()))];
  };
  state.counters[prefix + "p50_ms"] = at(0.50);
  state.counters[prefix + "p99_ms"] = at(0.99);
}

// CPU time of the whole process (client and server threads), in ms: on a
// shared 2-core machine wall time also counts waiting for a core, so both
// are reported.
double ProcessCpuMs() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - t0)
      .count();
}

// Times `query job J --store`'s work for the last hour of jobs drawn by
// `job_of` from a seeded generator: every result must hold 360 windows and,
// with `ranks` > 0, a per-rank table of that many ranks; with range(0) != 0
// it is also rendered as `query job --json` does.
void TimeLastHourQueries(benchmark::State& state, uint64_t seed,
                         const std::function<std::string(uint64_t)>& job_of,
                         size_t ranks) {
  Fixture& fx = GetFixture();
  const bool render = state.range(0) != 0;
  std::mt19937_64 rng(seed);
  std::vector<double> ms, cpu_ms;
  for (auto _ : state) {
    const std::string job = job_of(rng());
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = ProcessCpuMs();
    auto r = QueryJob(*fx.store, job, JobPeriod::Last(absl::Hours(1)));
    if (!r.ok()) Die(r.status());
    if (r->windows.size() != 360) Die(absl::InternalError("not 360 windows"));
    if (ranks > 0 &&
        (!r->collectives || r->collectives->ranks.size() != ranks)) {
      Die(absl::InternalError("no per-rank table of the job's ranks"));
    }
    if (render) benchmark::DoNotOptimize(RenderJobReportJson(*r, false));
    ms.push_back(MsSince(t0));
    cpu_ms.push_back(ProcessCpuMs() - cpu0);
  }
  Report(state, "", ms);
  Report(state, "cpu_", cpu_ms);
}

// Through the library: what `bubblewatch query job J --store` computes.
void BM_QueryJobLastHour(benchmark::State& state) {
  const int64_t jobs = GetFixture().jobs;
  TimeLastHourQueries(
      state, 42,
      [jobs](uint64_t r) { return JobName(static_cast<int64_t>(r % jobs)); },
      0);
}
BENCHMARK(BM_QueryJobLastHour)
    ->ArgName("json")
    ->Arg(0)
    ->Arg(1)
    ->Iterations(2000)
    ->Unit(benchmark::kMillisecond);

// a 64-rank job's last hour through the library, with the
// per-rank table and the stragglers of the period (QueryJob sums the 360
// windows' collective analyses); json:1 renders it as `query job --json`
// does (ranks[] and stragglers[] for the period and in each window).
// Target: p99 <= 5 ms on the 10,000-job store.
void BM_QueryJobLastHour64Ranks(benchmark::State& state) {
  TimeLastHourQueries(
      state, 44,
      [](uint64_t r) {
        return RankJobName(static_cast<int64_t>(r % kRankJobs));
      },
      kRanks);
}
BENCHMARK(BM_QueryJobLastHour64Ranks)
    ->ArgName("json")
    ->Arg(0)
    ->Arg(1)
    ->Iterations(2000)
    ->Unit(benchmark::kMillisecond);

// For comparison: the store's part alone (the job's record and a Scan of
// its last 360 windows, decoded), without the report QueryJob builds.
void BM_StoreScanLastHour(benchmark::State& state) {
  Fixture& fx = GetFixture();
  std::mt19937_64 rng(42);
  std::vector<double> ms, cpu_ms;
  for (auto _ : state) {
    const std::string job = JobName(static_cast<int64_t>(rng() % fx.jobs));
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = ProcessCpuMs();
    auto info = fx.store->Job(job);
    if (!info.ok() || !info->has_value()) Die(info.status());
    auto windows = fx.store->Scan(
        job,
        absl::FromUnixNanos((*info)->latest_window_start_ns + kWindowNs) -
            absl::Hours(1),
        absl::InfiniteFuture());
    if (!windows.ok()) Die(windows.status());
    benchmark::DoNotOptimize(windows);
    ms.push_back(MsSince(t0));
    cpu_ms.push_back(ProcessCpuMs() - cpu0);
  }
  Report(state, "", ms);
  Report(state, "cpu_", cpu_ms);
}
BENCHMARK(BM_StoreScanLastHour)
    ->Iterations(2000)
    ->Unit(benchmark::kMillisecond);

// Through HTTP on loopback, as `bubblewatch serve` answers
// GET /api/v1/jobs/J/windows?last=1h (one keep-alive connection).
void BM_HttpJobLastHour(benchmark::State& state) {
  Fixture& fx = GetFixture();
  HttpServerOptions options;
  options.port = 0;
  auto server = HttpServer::Bind(options, fx.store.get());
  if (!server.ok()) Die(server.status());
  std::thread serving([&] { (void)(*server)->Serve(); });
  httplib::Client client((*server)->url());
  client.set_keep_alive(true);
  std::mt19937_64 rng(43);
  std::vector<double> ms, cpu_ms;
  int64_t bytes = 0;
  for (auto _ : state) {
    const std::string path = "/api/v1/jobs/" +
                             JobName(static_cast<int64_t>(rng() % fx.jobs)) +
                             "/windows?last=1h";
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = ProcessCpuMs();
    httplib::Result r = client.Get(path.c_str());
    if (!r || r->status != 200) Die(absl::InternalError("HTTP failure"));
    ms.push_back(MsSince(t0));
    cpu_ms.push_back(ProcessCpuMs() - cpu0);
    bytes += static_cast<int64_t>(r->body.size());
  }
  (*server)->Stop();
  serving.join();
  Report(state, "", ms);
  Report(state, "cpu_", cpu_ms);
  state.counters["reply_KiB"] =
      bytes / 1024.0 / std::max<int64_t>(1, ms.size());
}
BENCHMARK(BM_HttpJobLastHour)->Iterations(2000)->Unit(benchmark::kMillisecond);

// The latest window of every job, ranked by bubble ratio (what `query fleet
// --top 20` did before it ranked a period; /metrics reads the same).
void BM_QueryFleetTop20(benchmark::State& state) {
  Fixture& fx = GetFixture();
  for (auto _ : state) {
    auto r = QueryFleetLatest(
        *fx.store, FleetOrder{.metric = FleetOrder::Metric::kBubbleRatio}, 20);
    if (!r.ok()) Die(r.status());
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_QueryFleetTop20)->Iterations(5)->Unit(benchmark::kMillisecond);

// `query fleet --top 20`: every job's windows of the fleet's last hour,
// summed and ranked by bubble time (360 windows per job in a store built
// here), from the running sums (two seeks per job); p50/p99 over the
// iterations, wall and process CPU.
void FleetPeriodQueries(benchmark::State& state, const JobPeriod& period,
                        bool by_scan) {
  Fixture& fx = GetFixture();
  int64_t windows = 0;
  std::vector<double> ms, cpu_ms;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = ProcessCpuMs();
    auto r = by_scan ? QueryFleetByScan(*fx.store, period, FleetOrder{}, 20)
                     : QueryFleet(*fx.store, period, FleetOrder{}, 20);
    if (!r.ok()) Die(r.status());
    ms.push_back(MsSince(t0));
    cpu_ms.push_back(ProcessCpuMs() - cpu0);
    windows = r->all.stats.windows;
    benchmark::DoNotOptimize(r);
  }
  Report(state, "", ms);
  Report(state, "cpu_", cpu_ms);
  state.counters["windows"] = static_cast<double>(windows);
}

void BM_QueryFleetLastHourTop20(benchmark::State& state) {
  FleetPeriodQueries(state, JobPeriod::Last(absl::Hours(1)), false);
}
BENCHMARK(BM_QueryFleetLastHourTop20)
    ->Iterations(50)
    ->Unit(benchmark::kMillisecond);

// `query fleet --from --to` over 30 min in the middle of the store's first
// hour, edges at odd ns (inside windows): each job's last window in the
// period is not its newest, so one more window read per job.
void BM_QueryFleetFromToTop20(benchmark::State& state) {
  FleetPeriodQueries(
      state,
      JobPeriod::Between(kFirstStartNs + 15 * 60 * 1'000'000'000LL + 1234567,
                         kFirstStartNs + 45 * 60 * 1'000'000'000LL + 7654321),
      false);
}
BENCHMARK(BM_QueryFleetFromToTop20)
    ->Iterations(20)
    ->Unit(benchmark::kMillisecond);

// The reference: the same last hour from every window (QueryFleetByScan,
// what QueryFleet did before the running sums). Tens of seconds on 10,000
// jobs; one iteration.
void BM_QueryFleetLastHourByScanTop20(benchmark::State& state) {
  FleetPeriodQueries(state, JobPeriod::Last(absl::Hours(1)), true);
}
BENCHMARK(BM_QueryFleetLastHourByScanTop20)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// One /metrics page with the default 100 per-job series sets.
void BM_MetricsPage(benchmark::State& state) {
  Fixture& fx = GetFixture();
  for (auto _ : state) {
    auto page =
        RenderPrometheusMetrics(*fx.store, kDefaultMetricsTopJobs, nullptr);
    if (!page.ok()) Die(page.status());
    state.counters["page_KiB"] = page->size() / 1024.0;
  }
}
BENCHMARK(BM_MetricsPage)->Iterations(3)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace bubblewatch

BENCHMARK_MAIN();
