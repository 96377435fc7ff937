// The straggler threshold (docs/semantics.md#stragglers) measured where it
// matters: how many windows of healthy multi-rank jobs name a straggler
// (false alarms), and how many windows of jobs with a planted straggler
// name the planted rank (detections), under the rule as it was (every rank
// that caused any wait) and under the threshold given.
//
// Each job is cut into event-time windows as the processor cuts it
// (docs/semantics.md#streaming-collectives: each rank's events that start
// in the window, one trace per rank) and each window goes through
// AnalyzeWindowCollectives, the processor's own call. Jobs:
//   - healthy: the synthetic fleet's lockstep jobs (2, 3 and 4 ranks;
//     matched all-reduces, jitter only), and TP x DP jobs of the parallel
//     job generator (4 x 2 and 4 x 4 ranks, three process groups kinds,
//     host clocks apart) with jitter and no root;
//   - planted: the fleet's straggler scenario (4 and 8 ranks; a rank late
//     by data loading, host sync or compute for a part of the run) and
//     TP x DP jobs with a root late in a run of steps.
// A planted window is one where the planted rank was late for at least
// --min-late-share of the window; windows it overlaps less are neither
// counted as detections nor as false alarms. Prints the figures and, per
// kind, the largest top-straggler share (its wait caused over the window's
// collective time) seen in healthy windows and the smallest in planted
// ones: the margin the threshold sits in.
//
// usage: straggler_noise_bench [--healthy-jobs 50] [--minutes 30]
//          [--tpdp-minutes 10] [--share 0.10] [--floor-us 100]
//          [--min-late-share 0.5]
// Exit 1 when, under the given threshold, a healthy window names a
// straggler or a planted window misses its rank.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "analysis/collective_windows.h"
#include "analysis/collectives.h"
#include "ingest/synthetic/synthetic_fleet.h"
#include "ingest/synthetic/synthetic_parallel_job.h"

namespace bubblewatch {
namespace {

constexpr int64_t kWindowNs = 10'000'000'000;

struct Options {
  int healthy_jobs = 50;
  double minutes = 30;
  double tpdp_minutes = 10;
  double share = 0.10;
  double floor_us = 100;
  double min_late_share = 0.5;
};

// What a planted job planted: rank late in [start, end); rank -1: healthy.
struct Plant {
  int rank = -1;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

struct Tally {
  int64_t windows = 0;       // Windows with a collective analysis.
  int64_t named_before = 0;  // ... naming a straggler, rule before.
  int64_t named = 0;         // ... under the threshold.
  int64_t planted = 0;       // Windows the plant covers enough.
  int64_t right = 0;         // ... naming the planted rank first.
  int64_t skipped = 0;       // Planted: overlapped too little.
  int64_t partly_named = 0;  // ... naming the planted rank anyway.
  double max_share = 0;      // Healthy: largest top share.
  double min_share = 1e9;    // Planted: smallest planted-rank share.
};

// Each rank's events starting in [start, end), as the processor cuts them.
std::vector<Trace> Cut(const std::vector<Trace>& ranks, int64_t start,
                       int64_t end) {
  auto inside = [&](int64_t t) { return t >= start && t < end; };
  std::vector<Trace> out;
  for (const Trace& r : ranks) {
    Trace t;
    t.names = r.names;
    t.job = r.job;
    t.host = r.host;
    t.rank = r.rank;
    t.world_size = r.world_size;
    for (const GpuActivity& a : r.gpu) {
      if (inside(a.start_ns)) t.gpu.push_back(a);
    }
    for (const CpuEvent& e : r.cpu) {
      if (inside(e.start_ns)) t.cpu.push_back(e);
    }
    for (const CollectiveKernel& c : r.collectives) {
      if (inside(c.start_ns)) t.collectives.push_back(c);
    }
    if (!t.gpu.empty() || !t.cpu.empty()) out.push_back(std::move(t));
  }
  return out;
}

void Measure(const std::vector<Trace>& ranks, const Plant& plant,
             const CollectiveOptions& threshold, double min_late_share,
             Tally* tally) {
  int64_t first = INT64_MAX, last = INT64_MIN;
  for (const Trace& r : ranks) {
    for (const GpuActivity& a : r.gpu) {
      first = std::min(first, a.start_ns);
      last = std::max(last, a.start_ns);
    }
  }
  CollectiveOptions before;  // The rule before: every rank that caused.
  before.min_straggler_wait_ns = 0;
  before.min_straggler_share = 0;
  for (int64_t w = first - first % kWindowNs; w <= last; w += kWindowNs) {
    const std::vector<Trace> traces = Cut(ranks, w, w + kWindowNs);
    std::vector<std::string> labels;
    for (const Trace& t : traces) {
      labels.push_back(absl::StrCat(t.host, "/", t.rank));
    }
    absl::StatusOr<std::optional<WindowCollectives>> kept =
        AnalyzeWindowCollectives(traces, labels, threshold);
    absl::StatusOr<std::optional<WindowCollectives>> all =
        AnalyzeWindowCollectives(traces, labels, before);
    if (!all.ok() || !kept.ok()) {
      std::fprintf(
          stderr, "window refused: %s\n",
          std::string((all.ok() ? kept.status() : all.status()).message())
              .c_str());
      std::exit(2);
    }
    if (!kept->has_value() || !all->has_value()) continue;
    const WindowCollectives& a = **all;
    const WindowCollectives& k = **kept;
    int64_t comm = 0;
    for (const RankWindow& r : a.ranks) comm += r.comm_ns;
    auto share_of = [&](int rank) {
      for (const StragglerWindow& s : a.stragglers) {
        if (s.rank == rank && comm > 0) {
          return static_cast<double>(s.wait_caused_ns) /
                 static_cast<double>(comm);
        }
      }
      return 0.0;
    };
    const bool named_before = !a.stragglers.empty();
    const bool named = !k.stragglers.empty();
    const int64_t overlap =
        plant.rank < 0
            ? 0
            : std::max<int64_t>(0, std::min(plant.end_ns, w + kWindowNs) -
                                       std::max(plant.start_ns, w));
    if (overlap == 0) {
      // Healthy, or a planted job outside its plant.
      ++tally->windows;
      tally->named_before += named_before;
      tally->named += named;
      if (named_before) {
        tally->max_share =
            std::max(tally->max_share, share_of(a.stragglers[0].rank));
      }
      continue;
    }
    if (static_cast<double>(overlap) <
        min_late_share * static_cast<double>(kWindowNs)) {
      ++tally->skipped;
      tally->partly_named += named && k.stragglers[0].rank == plant.rank;
      continue;
    }
    ++tally->planted;
    tally->right += named && k.stragglers[0].rank == plant.rank;
    tally->min_share = std::min(tally->min_share, share_of(plant.rank));
  }
}

void Print(const char* what, const Tally& t) {
  std::printf(
      "%-34s %6lld windows: named a straggler %6lld before, %4lld now "
      "(largest top share %.2f%%)",
      what, static_cast<long long>(t.windows),
      static_cast<long long>(t.named_before), static_cast<long long>(t.named),
      100 * t.max_share);
  if (t.planted > 0 || t.skipped > 0) {
    std::printf(
        "; planted windows %lld, planted rank named first %lld "
        "(smallest planted share %.1f%%); partly covered %lld, named in %lld",
        static_cast<long long>(t.planted), static_cast<long long>(t.right),
        100 * t.min_share, static_cast<long long>(t.skipped),
        static_cast<long long>(t.partly_named));
  }
  std::printf("\n");
  std::fflush(stdout);
}

int Main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const double v = std::atof(argv[i + 1]);
    if (flag == "--healthy-jobs") {
      o.healthy_jobs = static_cast<int>(v);
    } else if (flag == "--minutes") {
      o.minutes = v;
    } else if (flag == "--tpdp-minutes") {
      o.tpdp_minutes = v;
    } else if (flag == "--share") {
      o.share = v;
    } else if (flag == "--floor-us") {
      o.floor_us = v;
    } else if (flag == "--min-late-share") {
      o.min_late_share = v;
    } else {
      std::fprintf(stderr, "straggler_noise_bench: unknown flag %s\n",
                   flag.c_str());
      return 2;
    }
  }
  CollectiveOptions threshold;
  threshold.min_straggler_share = o.share;
  threshold.min_straggler_wait_ns = static_cast<int64_t>(o.floor_us * 1e3);
  std::printf(
      "threshold: max(%.0f us, %.1f%% of the window's collective time); "
      "windows of 10 s\n",
      o.floor_us, 100 * o.share);
  bool ok = true;

  // Healthy fleet jobs: lockstep, 2, 3 and 4 ranks, 10 events/s per GPU
  // (2.7 s steps) as the live test sends them.
  for (int gpus = 2; gpus <= 4; ++gpus) {
    Tally lockstep;
    SyntheticFleetOptions f;
    f.scenario = SyntheticScenario::kLockstep;
    f.jobs = o.healthy_jobs / 3 + (gpus == 2 ? o.healthy_jobs % 3 : 0);
    f.gpus_per_job = gpus;
    f.duration = absl::Seconds(o.minutes * 60);
    f.events_per_second_per_gpu = 10;
    f.seed = 20;
    absl::StatusOr<std::vector<SyntheticJob>> jobs = GenerateSyntheticFleet(f);
    if (!jobs.ok()) return 2;
    for (const SyntheticJob& j : *jobs) {
      Measure(j.ranks, Plant{}, threshold, o.min_late_share, &lockstep);
    }
    Print(absl::StrCat("healthy lockstep, ", gpus, " ranks",
                       gpus == 4 ? " (a third TP x DP)" : "")
              .c_str(),
          lockstep);
    ok &= lockstep.named == 0;
  }

  // Healthy TP x DP jobs: steps of about 0.35 s (kernels of 20 ms, 2 %
  // jitter), host clocks up to 5 ms apart, no root.
  auto tpdp = [&](int tp, int dp, int steps, uint64_t seed) {
    ParallelJobOptions p;
    p.job = absl::StrCat("tpdp-", tp, "x", dp, "-", seed);
    p.tp = tp;
    p.dp = dp;
    p.steps = steps;
    p.kernel_ns = 20'000'000;
    p.kernel_jitter_ns = 400'000;
    p.loader_ns = 30'000'000;
    p.loader_jitter_ns = 1'000'000;
    p.all_gather_ns = 15'000'000;
    p.all_reduce_ns = 60'000'000;
    p.host_names = true;
    p.seed = seed;
    return p;
  };
  const int tpdp_steps = static_cast<int>(o.tpdp_minutes * 60 / 0.35);
  Tally parallel;
  for (const auto& [tp, dp] : {std::pair{4, 2}, std::pair{4, 4}}) {
    for (uint64_t seed = 1; seed <= 2; ++seed) {
      ParallelJob job = MakeParallelJob(tpdp(tp, dp, tpdp_steps, seed));
      Measure(job.ranks, Plant{}, threshold, o.min_late_share, &parallel);
    }
  }
  Print("healthy TP x DP (4x2, 4x4)", parallel);
  ok &= parallel.named == 0;

  // Planted fleet stragglers: 4 and 8 ranks, 60 s, the default rate.
  Tally planted;
  for (int gpus : {4, 8}) {
    SyntheticFleetOptions f;
    f.scenario = SyntheticScenario::kStraggler;
    f.jobs = 6;
    f.gpus_per_job = gpus;
    f.duration = absl::Seconds(60);
    f.seed = 5;
    absl::StatusOr<std::vector<SyntheticJob>> jobs = GenerateSyntheticFleet(f);
    if (!jobs.ok()) return 2;
    for (const SyntheticJob& j : *jobs) {
      Measure(j.ranks,
              Plant{j.straggler->late_rank, j.straggler->late_start_ns,
                    j.straggler->late_end_ns},
              threshold, o.min_late_share, &planted);
    }
  }
  Print("planted fleet stragglers (4, 8)", planted);
  ok &= planted.right == planted.planted && planted.named == 0;

  // Planted TP x DP roots: one rank 10 % of a step late (compute, data
  // loading, host sync) in a run of 60 steps (21 s) of 150.
  Tally roots;
  int cause = 0;
  for (const auto& [tp, dp] : {std::pair{4, 2}, std::pair{4, 4}}) {
    for (int root_rank : {1, tp * dp - 2}) {
      ParallelJobOptions p = tpdp(tp, dp, 150, 3 + root_rank);
      const auto c = static_cast<StragglerCause>(cause++ % 3);
      for (int step = 50; step < 110; ++step) {
        p.roots.push_back(PlantedRoot{.rank = root_rank,
                                      .step = step,
                                      .extra_ns = 35'000'000,
                                      .cause = c});
      }
      ParallelJob job = MakeParallelJob(p);
      // Late from the end of step 49's instances to the end of step 109's.
      int64_t start = 0, end = 0;
      for (const ParallelInstanceTruth& i : job.truth.instances) {
        if (i.step == 49) start = std::max(start, i.end_ns);
        if (i.step == 109) end = std::max(end, i.end_ns);
      }
      Measure(job.ranks, Plant{root_rank, start, end}, threshold,
              o.min_late_share, &roots);
    }
  }
  Print("planted TP x DP roots (4x2, 4x4)", roots);
  ok &= roots.right == roots.planted && roots.named == 0;
  std::printf("%s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace bubblewatch

int main(int argc, char** argv) { return bubblewatch::Main(argc, argv); }
