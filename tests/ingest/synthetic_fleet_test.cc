#include "ingest/synthetic/synthetic_fleet.h"

#include <algorithm>
#include <climits>
#include <map>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "analysis/bubble_analyzer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ingest/synthetic/synthetic_names.h"

namespace bubblewatch {
namespace {

using ::testing::Each;
using ::testing::Gt;

SyntheticFleetOptions SmallFleet(SyntheticScenario scenario) {
  SyntheticFleetOptions o;
  o.jobs = 1;
  o.gpus_per_job = 2;
  o.duration = absl::Seconds(12);
  o.events_per_second_per_gpu = 20000;
  o.scenario = scenario;
  o.seed = 7;
  o.keep_gaps = true;
  return o;
}

SyntheticJob GenerateOne(const SyntheticFleetOptions& options) {
  absl::StatusOr<std::vector<SyntheticJob>> jobs =
      GenerateSyntheticFleet(options);
  EXPECT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), 1u);
  return std::move(jobs->front());
}

CauseNs TotalCauses(const SyntheticJob& job) {
  CauseNs total{};
  for (const TruthWindow& w : job.truth) {
    for (int c = 0; c < kNumPlantedCauses; ++c) total[c] += w.cause_ns[c];
  }
  return total;
}

PlantedCause Dominant(const CauseNs& causes) {
  return static_cast<PlantedCause>(
      std::max_element(causes.begin(), causes.end()) - causes.begin());
}

bool SameEvents(const Trace& a, const Trace& b) {
  auto gpu_eq = [](const GpuActivity& x, const GpuActivity& y) {
    return x.start_ns == y.start_ns && x.end_ns == y.end_ns &&
           x.correlation == y.correlation && x.name == y.name &&
           x.device == y.device && x.stream == y.stream && x.kind == y.kind &&
           x.bytes == y.bytes && x.pageable == y.pageable;
  };
  auto cpu_eq = [](const CpuEvent& x, const CpuEvent& y) {
    return x.start_ns == y.start_ns && x.end_ns == y.end_ns &&
           x.correlation == y.correlation && x.name == y.name &&
           x.thread == y.thread && x.category == y.category;
  };
  return a.names == b.names &&
         std::equal(a.gpu.begin(), a.gpu.end(), b.gpu.begin(), b.gpu.end(),
                    gpu_eq) &&
         std::equal(a.cpu.begin(), a.cpu.end(), b.cpu.begin(), b.cpu.end(),
                    cpu_eq);
}

TEST(SyntheticFleet, SameSeedGivesSameFleetAndTruth) {
  SyntheticFleetOptions options = SmallFleet(SyntheticScenario::kMix);
  options.jobs = 3;
  auto a = GenerateSyntheticFleet(options);
  auto b = GenerateSyntheticFleet(options);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), 3u);
  for (size_t j = 0; j < a->size(); ++j) {
    ASSERT_EQ((*a)[j].ranks.size(), (*b)[j].ranks.size());
    for (size_t r = 0; r < (*a)[j].ranks.size(); ++r) {
      EXPECT_TRUE(SameEvents((*a)[j].ranks[r], (*b)[j].ranks[r]));
    }
    std::string ta, tb;
    WriteTruthJsonLines((*a)[j].job, "x", 10'000'000'000, (*a)[j].truth, &ta);
    WriteTruthJsonLines((*b)[j].job, "x", 10'000'000'000, (*b)[j].truth, &tb);
    EXPECT_EQ(ta, tb);
  }
  options.seed = 8;
  auto c = GenerateSyntheticFleet(options);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(SameEvents((*a)[0].ranks[0], (*c)[0].ranks[0]));
}

TEST(SyntheticFleet, MixCyclesThroughScenariosAndNamesJobs) {
  SyntheticFleetOptions options = SmallFleet(SyntheticScenario::kMix);
  options.jobs = 7;
  options.gpus_per_job = 1;
  options.duration = absl::Seconds(1);
  auto jobs = GenerateSyntheticFleet(options);
  ASSERT_TRUE(jobs.ok());
  const std::vector<std::string> want = {
      "healthy", "sync", "launch", "alloc", "dataloader", "memcpy", "healthy"};
  for (size_t j = 0; j < jobs->size(); ++j) {
    EXPECT_EQ(SyntheticScenarioName((*jobs)[j].scenario), want[j]);
  }
  EXPECT_EQ((*jobs)[0].job, "synthetic-job-000");
  EXPECT_EQ((*jobs)[6].job, "synthetic-job-006");
}

// Mix with multi-rank jobs: jobs 6 and 13 are straggler jobs, each with
// its planted rank, cause and interval in the truth file; every other job
// is the one its scenario alone generates (the same events as before the
// mix had straggler jobs).
TEST(SyntheticFleet, MixPlantsStragglersInEverySeventhMultiRankJob) {
  SyntheticFleetOptions options = SmallFleet(SyntheticScenario::kMix);
  options.jobs = 14;
  options.gpus_per_job = 3;
  options.duration = absl::Seconds(2);
  options.events_per_second_per_gpu = 2000;
  options.keep_gaps = false;
  auto jobs = GenerateSyntheticFleet(options);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 14u);
  const int64_t end_ns =
      options.start_time_ns + absl::ToInt64Nanoseconds(options.duration);
  for (int j = 0; j < 14; ++j) {
    const SyntheticJob& job = (*jobs)[j];
    SCOPED_TRACE(job.job);
    ASSERT_EQ(job.ranks.size(), 3u);
    if (j % 7 != 6) {
      EXPECT_FALSE(job.straggler.has_value());
      const std::vector<std::string> cycle = {
          "healthy", "sync", "launch", "alloc", "dataloader", "memcpy"};
      ASSERT_EQ(SyntheticScenarioName(job.scenario), cycle[j % 6]);
      SyntheticFleetOptions alone = options;
      alone.scenario = job.scenario;
      alone.jobs = j + 1;
      auto reference = GenerateSyntheticFleet(alone);
      ASSERT_TRUE(reference.ok());
      for (int r = 0; r < 3; ++r) {
        EXPECT_TRUE(SameEvents(job.ranks[r], (*reference)[j].ranks[r]))
            << "rank " << r;
      }
      continue;
    }
    EXPECT_EQ(job.scenario, SyntheticScenario::kStraggler);
    ASSERT_TRUE(job.straggler.has_value());
    const StragglerTruth& t = *job.straggler;
    EXPECT_GE(t.late_rank, 0);
    EXPECT_LT(t.late_rank, 3);
    // It comes and goes: late from after the start to before the end.
    EXPECT_GT(t.late_start_ns, options.start_time_ns);
    EXPECT_LT(t.late_start_ns, t.late_end_ns);
    EXPECT_LT(t.late_end_ns, end_ns);
    EXPECT_GT(t.planted_wait_ns, 0);
    for (const Trace& rank : job.ranks) {
      EXPECT_EQ(rank.job, job.job);
      EXPECT_FALSE(rank.collectives.empty()) << "rank " << rank.rank;
    }
    // The straggler scenario's own job of that index, the same.
    SyntheticFleetOptions alone = options;
    alone.scenario = SyntheticScenario::kStraggler;
    alone.jobs = j + 1;
    auto reference = GenerateSyntheticFleet(alone);
    ASSERT_TRUE(reference.ok());
    EXPECT_EQ(StragglerTruthJsonLine(job),
              StragglerTruthJsonLine((*reference)[j]));
    const std::string line = StragglerTruthJsonLine(job);
    EXPECT_THAT(line, ::testing::HasSubstr(
                          absl::StrCat("\"rank\":", t.late_rank, ",")));
    EXPECT_THAT(line, ::testing::HasSubstr(absl::StrCat(
                          "\"cause\":\"", StragglerCauseName(t.cause), "\"")));
    EXPECT_THAT(line, ::testing::HasSubstr(
                          absl::StrCat("\"start_ns\":", t.late_start_ns)));
  }
  // With one GPU per job there is nothing to straggle: job 6 stays healthy
  // (MixCyclesThroughScenariosAndNamesJobs).
}

// The lockstep scenario (the healthy baseline): the straggler
// scenario's jobs with no rank late. Every rank carries the same all-reduce
// instances (group, Seq), the ranks' arrivals differ by jitter only, the
// step follows the rate, and the truth line says nothing was planted.
TEST(SyntheticFleet, LockstepJobsMatchCollectivesWithNoRankLate) {
  for (double rate : {20000.0, 100.0}) {
    SCOPED_TRACE(absl::StrCat("rate ", rate));
    SyntheticFleetOptions options = SmallFleet(SyntheticScenario::kLockstep);
    options.gpus_per_job = 4;
    options.jobs = 2;
    options.duration = absl::Seconds(rate > 1000 ? 2 : 60);
    options.events_per_second_per_gpu = rate;
    auto jobs = GenerateSyntheticFleet(options);
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    ASSERT_EQ(jobs->size(), 2u);
    for (const SyntheticJob& job : *jobs) {
      SCOPED_TRACE(job.job);
      EXPECT_EQ(job.scenario, SyntheticScenario::kLockstep);
      ASSERT_TRUE(job.straggler.has_value());
      EXPECT_EQ(job.straggler->late_rank, -1);
      EXPECT_EQ(job.straggler->planted_wait_ns, 0);
      EXPECT_EQ(job.straggler->late_start_ns, 0);
      ASSERT_EQ(job.ranks.size(), 4u);
      const size_t steps = job.ranks[0].collectives.size();
      ASSERT_GT(steps, 3u);
      size_t events = 0;
      for (const Trace& r : job.ranks) {
        events += r.gpu.size() + r.cpu.size();
        ASSERT_EQ(r.collectives.size(), steps) << "rank " << r.rank;
      }
      // About the rate: 27 events a step.
      const double per_s = static_cast<double>(events) / 4 /
                           absl::ToDoubleSeconds(options.duration);
      EXPECT_GT(per_s, rate * 0.8);
      EXPECT_LT(per_s, rate * 1.2);
      // Lockstep: step s's all-reduce has Seq s on every rank, and no rank
      // arrives much later than the others (jitter, not a straggler: well
      // under 10 % of a step).
      const Trace& r0 = job.ranks[0];
      const int64_t step_ns =
          r0.collectives[1].start_ns - r0.collectives[0].start_ns;
      int64_t worst_spread = 0;
      for (size_t s = 0; s < steps; ++s) {
        int64_t first = INT64_MAX, last = INT64_MIN;
        for (const Trace& r : job.ranks) {
          const CollectiveKernel& c = r.collectives[s];
          EXPECT_EQ(c.seq, static_cast<int64_t>(s));
          EXPECT_EQ(c.group_size, 4);
          first = std::min(first, c.start_ns);
          last = std::max(last, c.start_ns);
        }
        worst_spread = std::max(worst_spread, last - first);
      }
      EXPECT_GT(worst_spread, 0) << "no jitter at all";
      EXPECT_LT(worst_spread, step_ns / 10);
      const std::string line = StragglerTruthJsonLine(job);
      EXPECT_THAT(line, ::testing::HasSubstr("\"scenario\":\"lockstep\""));
      EXPECT_THAT(line, ::testing::HasSubstr("\"rank\":-1,"));
      EXPECT_THAT(line, ::testing::HasSubstr("\"cause\":\"none\""));
    }
  }
  SyntheticFleetOptions one_gpu = SmallFleet(SyntheticScenario::kLockstep);
  one_gpu.gpus_per_job = 1;
  EXPECT_FALSE(GenerateSyntheticFleet(one_gpu).ok());
  EXPECT_EQ(ParseSyntheticScenario("lockstep"), SyntheticScenario::kLockstep);
}

TEST(SyntheticFleet, RanksCarryIdentityAndStartAtStartTime) {
  SyntheticFleetOptions options = SmallFleet(SyntheticScenario::kHealthy);
  options.start_time_ns = 1'800'000'000'000'000'000;
  SyntheticJob job = GenerateOne(options);
  ASSERT_EQ(job.ranks.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    const Trace& t = job.ranks[r];
    EXPECT_EQ(t.job, job.job);
    EXPECT_EQ(t.rank, r);
    EXPECT_EQ(t.world_size, 2);
    EXPECT_EQ(t.names.size(), static_cast<size_t>(kNumSyntheticNames));
    for (const GpuActivity& a : t.gpu) {
      EXPECT_EQ(a.device, r);
      EXPECT_GE(a.start_ns, options.start_time_ns);
      EXPECT_LT(a.start_ns, a.end_ns);
    }
    for (const CpuEvent& e : t.cpu) {
      EXPECT_GE(e.start_ns, options.start_time_ns);
      EXPECT_LE(e.start_ns, e.end_ns);
    }
  }
}

TEST(SyntheticFleet, EventRateIsRoughlyTheRequestedOne) {
  SyntheticJob job = GenerateOne(SmallFleet(SyntheticScenario::kHealthy));
  for (const Trace& t : job.ranks) {
    const double rate = (t.gpu.size() + t.cpu.size()) / 12.0;
    EXPECT_GT(rate, 20000 * 0.8);
    EXPECT_LT(rate, 20000 * 1.2);
  }
}

TEST(SyntheticFleet, EveryGpuActivityHasItsLaunchCallOnTheLaunchingThread) {
  SyntheticJob job = GenerateOne(SmallFleet(SyntheticScenario::kSync));
  for (const Trace& t : job.ranks) {
    absl::flat_hash_map<CorrelationId, const CpuEvent*> calls;
    std::set<uint64_t> threads;
    for (const CpuEvent& e : t.cpu) {
      threads.insert(e.thread);
      if (e.correlation == kNoCorrelation) continue;
      EXPECT_TRUE(calls.emplace(e.correlation, &e).second);
    }
    EXPECT_EQ(threads.size(), 1u);
    std::set<int32_t> streams;
    for (const GpuActivity& a : t.gpu) {
      streams.insert(a.stream);
      auto it = calls.find(a.correlation);
      ASSERT_NE(it, calls.end()) << t.Name(a.name);
      EXPECT_LT(it->second->start_ns, a.start_ns);
      const absl::string_view call = t.Name(it->second->name);
      if (a.kind == GpuActivityKind::kKernel) {
        EXPECT_EQ(call, "cudaLaunchKernel");
      } else {
        EXPECT_EQ(call, "cudaMemcpyAsync");
      }
    }
    EXPECT_GE(streams.size(), 3u);  // Compute, copy and NCCL streams.
  }
}

// Busy intervals and gaps recomputed from the trace itself: the truth's gaps
// must be exactly the gaps of the union of kernel intervals.
std::vector<std::pair<int64_t, int64_t>> KernelUnionGaps(const Trace& t) {
  std::vector<std::pair<int64_t, int64_t>> kernels;
  for (const GpuActivity& a : t.gpu) {
    if (a.kind == GpuActivityKind::kKernel) {
      kernels.emplace_back(a.start_ns, a.end_ns);
    }
  }
  std::sort(kernels.begin(), kernels.end());
  std::vector<std::pair<int64_t, int64_t>> gaps;
  int64_t busy_end = kernels.empty() ? 0 : kernels.front().second;
  for (const auto& [s, e] : kernels) {
    if (s > busy_end) gaps.emplace_back(busy_end, s);
    busy_end = std::max(busy_end, e);
  }
  return gaps;
}

class ScenarioTest : public ::testing::TestWithParam<SyntheticScenario> {};

TEST_P(ScenarioTest, TruthGapsAreExactlyTheGapsOfTheKernelUnion) {
  SyntheticJob job = GenerateOne(SmallFleet(GetParam()));
  for (const Trace& t : job.ranks) {
    std::vector<std::pair<int64_t, int64_t>> truth_gaps;
    for (const PlantedGap& g : job.gaps) {
      if (g.device == t.rank) truth_gaps.emplace_back(g.start_ns, g.end_ns);
    }
    EXPECT_EQ(truth_gaps, KernelUnionGaps(t));
  }
}

TEST_P(ScenarioTest, CausesAddUpToEachGapAndEachWindow) {
  SyntheticJob job = GenerateOne(SmallFleet(GetParam()));
  ASSERT_FALSE(job.gaps.empty());
  int64_t gap_total = 0;
  for (const PlantedGap& g : job.gaps) {
    ASSERT_FALSE(g.segments.empty());
    EXPECT_EQ(g.segments.front().start_ns, g.start_ns);
    EXPECT_EQ(g.segments.back().end_ns, g.end_ns);
    for (size_t i = 0; i < g.segments.size(); ++i) {
      EXPECT_LT(g.segments[i].start_ns, g.segments[i].end_ns);
      if (i > 0) {
        EXPECT_EQ(g.segments[i - 1].end_ns, g.segments[i].start_ns);
      }
    }
    gap_total += g.end_ns - g.start_ns;
  }
  int64_t window_total = 0;
  for (const TruthWindow& w : job.truth) {
    int64_t sum = 0;
    for (int64_t ns : w.cause_ns) sum += ns;
    EXPECT_EQ(sum, w.bubble_ns);
    EXPECT_EQ(w.window_start_ns % 10'000'000'000, 0);
    EXPECT_LE(w.compute_ns + w.bubble_ns, 10'000'000'000);
    window_total += w.bubble_ns;
  }
  EXPECT_EQ(window_total, gap_total);
  EXPECT_EQ(TotalCauses(job)[static_cast<int>(PlantedCause::kUnattributed)], 0);
}

INSTANTIATE_TEST_SUITE_P(
    AllScenarios, ScenarioTest,
    ::testing::Values(SyntheticScenario::kHealthy, SyntheticScenario::kSync,
                      SyntheticScenario::kLaunch, SyntheticScenario::kAlloc,
                      SyntheticScenario::kDataloader,
                      SyntheticScenario::kMemcpy),
    [](const auto& info) {
      return std::string(SyntheticScenarioName(info.param));
    });

double BubbleRatio(const SyntheticJob& job) {
  int64_t bubble = 0, span = 0;
  for (const TruthWindow& w : job.truth) {
    bubble += w.bubble_ns;
    span += w.bubble_ns + w.compute_ns;
  }
  return static_cast<double>(bubble) / span;
}

TEST(SyntheticFleet, HealthyJobsHaveFewBubbles) {
  SyntheticJob job = GenerateOne(SmallFleet(SyntheticScenario::kHealthy));
  EXPECT_LT(BubbleRatio(job), 0.02);
}

TEST(SyntheticFleet, EachScenarioPlantsItsOwnCauseAsTheLargest) {
  const std::map<SyntheticScenario, PlantedCause> want = {
      {SyntheticScenario::kSync, PlantedCause::kHostSync},
      {SyntheticScenario::kLaunch, PlantedCause::kLaunchOverhead},
      {SyntheticScenario::kAlloc, PlantedCause::kAllocator},
      {SyntheticScenario::kDataloader, PlantedCause::kDataLoading},
      {SyntheticScenario::kMemcpy, PlantedCause::kMemcpy},
  };
  for (const auto& [scenario, cause] : want) {
    SyntheticJob job = GenerateOne(SmallFleet(scenario));
    EXPECT_EQ(Dominant(TotalCauses(job)), cause)
        << SyntheticScenarioName(scenario);
    EXPECT_GT(BubbleRatio(job), 0.02) << SyntheticScenarioName(scenario);
  }
}

TEST(SyntheticFleet, LargestSyncGapIsMostlyHostSync) {
  SyntheticJob job = GenerateOne(SmallFleet(SyntheticScenario::kSync));
  // The host synchronized, logged for a while, then launched: apart from the
  // .item() copy at its start and the launch (or a prefetch copy) at its end,
  // the gap is the host waiting.
  const PlantedGap& g = *std::max_element(
      job.gaps.begin(), job.gaps.end(), [](const auto& a, const auto& b) {
        return a.end_ns - a.start_ns < b.end_ns - b.start_ns;
      });
  int64_t host_sync = 0;
  for (const GapSegment& s : g.segments) {
    if (s.cause == PlantedCause::kHostSync) host_sync += s.end_ns - s.start_ns;
  }
  EXPECT_GT(host_sync, 0.9 * (g.end_ns - g.start_ns));
  EXPECT_GT(g.end_ns - g.start_ns, 1'000'000);  // Over a millisecond.
}

// The processor analyzes a job's ranks as one trace, taking device
// numbers, threads and correlation ids as job-wide
// (docs/semantics.md#multi-device). A straggler job's merged trace must
// therefore give each rank's device the attribution the rank's own trace
// gives it: a data-loading straggler's stall (a DataLoader span before its
// launches) stays data_loading and does not become launch_overhead by
// pairing its kernels with another rank's launch calls of the same id.
TEST(SyntheticFleet, StragglerJobsMergeWithoutSharingIds) {
  SyntheticFleetOptions options = SmallFleet(SyntheticScenario::kStraggler);
  options.jobs = 5;
  options.gpus_per_job = 8;
  options.duration = absl::Seconds(2);
  // Job 2 (TP x DP) and job 4 (all-reduce only) are late by data loading.
  options.seed = 1;
  options.keep_gaps = false;
  auto jobs = GenerateSyntheticFleet(options);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  std::set<size_t> data_loading_hosts;  // 1: all-reduce only; 2: TP x DP.
  for (const SyntheticJob& job : *jobs) {
    SCOPED_TRACE(job.job);
    ASSERT_TRUE(job.straggler.has_value());
    std::map<uint64_t, int> thread_rank;
    std::map<CorrelationId, int> correlation_rank;
    for (const Trace& t : job.ranks) {
      for (const GpuActivity& a : t.gpu) ASSERT_EQ(a.device, t.rank);
      for (const CpuEvent& e : t.cpu) {
        EXPECT_EQ(thread_rank.try_emplace(e.thread, t.rank).first->second,
                  t.rank);
        if (e.correlation == kNoCorrelation) continue;
        EXPECT_EQ(
            correlation_rank.try_emplace(e.correlation, t.rank).first->second,
            t.rank);
      }
    }
    absl::StatusOr<Analysis> merged = AnalyzeTrace(job.MergedTrace());
    ASSERT_TRUE(merged.ok()) << merged.status();
    ASSERT_EQ(merged->devices.size(), job.ranks.size());
    for (const Trace& t : job.ranks) {
      absl::StatusOr<Analysis> alone = AnalyzeTrace(t);
      ASSERT_TRUE(alone.ok()) << alone.status();
      ASSERT_EQ(alone->devices.size(), 1u);
      EXPECT_EQ(merged->devices[t.rank].stats.attribution,
                alone->devices[0].stats.attribution)
          << "rank " << t.rank;
    }
    const StragglerTruth& truth = *job.straggler;
    if (truth.cause != StragglerCause::kDataLoading) continue;
    std::set<std::string> hosts;
    for (const Trace& t : job.ranks) hosts.insert(t.host);
    data_loading_hosts.insert(hosts.size());
    const Attribution& late =
        merged->devices[truth.late_rank].stats.attribution;
    const int64_t loading = late[static_cast<int>(BubbleCause::kDataLoading)];
    const int64_t launch = late[static_cast<int>(BubbleCause::kLaunchOverhead)];
    EXPECT_GT(loading, 10 * launch)
        << "data_loading " << loading << " ns, launch_overhead " << launch
        << " ns on the late rank " << truth.late_rank;
  }
  EXPECT_THAT(data_loading_hosts, ::testing::ElementsAre(1u, 2u));
}

// Job 2 of the straggler and lockstep scenarios with 4 ranks is TP 2 x DP 2
// (docs/produce.md): two hosts, an all-gather group per host and an
// all-reduce group per TP index; in lockstep no root and about the rate's
// events, in straggler its root drawn with a truth like the flat jobs'.
TEST(SyntheticFleet, EveryThirdMultiRankJobIsTensorDataParallel) {
  for (SyntheticScenario scenario :
       {SyntheticScenario::kLockstep, SyntheticScenario::kStraggler}) {
    for (double rate : {20000.0, 100.0}) {
      if (scenario == SyntheticScenario::kStraggler && rate < 1000) continue;
      SCOPED_TRACE(
          absl::StrCat(SyntheticScenarioName(scenario), " rate ", rate));
      SyntheticFleetOptions options = SmallFleet(scenario);
      options.gpus_per_job = 4;
      options.jobs = 3;
      options.keep_gaps = false;
      options.duration = absl::Seconds(rate > 1000 ? 2 : 60);
      options.events_per_second_per_gpu = rate;
      auto jobs = GenerateSyntheticFleet(options);
      ASSERT_TRUE(jobs.ok()) << jobs.status();
      const SyntheticJob& job = (*jobs)[2];
      ASSERT_EQ(job.ranks.size(), 4u);
      std::set<std::string> hosts;
      std::map<std::string, std::set<int>> groups;  // Name -> ranks.
      size_t events = 0;
      for (const Trace& r : job.ranks) {
        hosts.insert(r.host);
        events += r.gpu.size() + r.cpu.size();
        for (const CollectiveKernel& c : r.collectives) {
          groups[std::string(r.Name(c.process_group))].insert(r.rank);
          EXPECT_EQ(c.group_size, 2);
        }
      }
      EXPECT_EQ(hosts.size(), 2u);
      EXPECT_EQ(groups.size(), 4u);  // 2 TP, 2 DP.
      ASSERT_TRUE(job.straggler.has_value());
      if (scenario == SyntheticScenario::kLockstep) {
        EXPECT_EQ(job.straggler->late_rank, -1);
        const double per_s = static_cast<double>(events) / 4 /
                             absl::ToDoubleSeconds(options.duration);
        EXPECT_GT(per_s, rate * 0.7);
        EXPECT_LT(per_s, rate * 1.3);
      } else {
        const StragglerTruth& t = *job.straggler;
        EXPECT_GE(t.late_rank, 0);
        EXPECT_LT(t.late_rank, 4);
        EXPECT_GT(t.late_start_ns, options.start_time_ns);
        EXPECT_LT(t.late_start_ns, t.late_end_ns);
        EXPECT_GT(t.planted_wait_ns, 0);
        EXPECT_GE(t.planted_wait_all_steps_ns, t.planted_wait_ns);
      }
    }
  }
}

TEST(SyntheticFleet, MergedTraceHoldsEveryRank) {
  SyntheticJob job = GenerateOne(SmallFleet(SyntheticScenario::kAlloc));
  Trace merged = job.MergedTrace();
  EXPECT_EQ(merged.job, job.job);
  EXPECT_EQ(merged.gpu.size(),
            job.ranks[0].gpu.size() + job.ranks[1].gpu.size());
  EXPECT_EQ(merged.cpu.size(),
            job.ranks[0].cpu.size() + job.ranks[1].cpu.size());
}

TEST(SyntheticFleet, RejectsBadOptions) {
  SyntheticFleetOptions o;
  o.jobs = 0;
  EXPECT_EQ(GenerateSyntheticFleet(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = SyntheticFleetOptions();
  o.events_per_second_per_gpu = 0;
  EXPECT_EQ(GenerateSyntheticFleet(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SyntheticScenarioNames, RoundTrip) {
  for (int i = 0; i <= static_cast<int>(SyntheticScenario::kMix); ++i) {
    auto s = static_cast<SyntheticScenario>(i);
    EXPECT_EQ(ParseSyntheticScenario(SyntheticScenarioName(s)), s);
  }
  EXPECT_EQ(ParseSyntheticScenario("nope"), std::nullopt);
}

}  // namespace
}  // namespace bubblewatch
