// AnalyzeCollectives (docs/semantics.md#collectives): hand-made jobs with
// known waits and stragglers, a brute-force oracle over random jobs, clock
// skew recovery, bad input; and the analyzer's interval breakdowns it rests
// on.
#include "analysis/collectives.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "analysis/bubble_analyzer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/trace_builder.h"
#include "tests/testing/units.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::testing::TraceBuilder;
using ::testing::HasSubstr;

using testing::kMs;
using testing::kS;
using testing::kUs;

int64_t Cause(const Attribution& a, BubbleCause c) {
  return a[static_cast<int>(c)];
}

RankInput Rank(const Trace& trace, int32_t rank, std::string domain = "host") {
  RankInput in;
  in.trace = &trace;
  in.device = 0;
  in.rank = rank;
  in.clock_domain = std::move(domain);
  in.file = "rank" + std::to_string(rank);
  return in;
}

// --- Interval breakdowns -------------------------------------------------

TEST(IntervalBreakdown, AddsUpAndAgreesWithWindows) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 30; ++round) {
    TraceBuilder b;
    double t = 0;
    uint64_t corr = 1;
    for (int i = 0; i < 40; ++i) {
      t += std::uniform_int_distribution<int>(0, 30)(rng);
      double len = std::uniform_int_distribution<int>(1, 20)(rng);
      b.Launch(t - 3, t - 1, corr);
      if (rng() % 4 == 0) b.Cpu("cudaStreamSynchronize", t - 10, t - 2);
      if (rng() % 5 == 0) b.Cpu("DataLoader.__next__", t - 25, t - 12);
      b.Kernel("k", t, t + len, 7, 0, corr++);
      t += len;
    }
    const Trace trace = b.Build();
    const int64_t window = 50 * kUs;
    std::vector<DeviceInterval> queries;
    for (int64_t w = 0; w < static_cast<int64_t>(t * kUs) + window;
         w += window) {
      queries.push_back({0, w, w + window});
    }
    queries.push_back({0, -100 * kUs, 5 * kUs});  // Before the span.
    queries.push_back({1, 0, 10 * kUs});          // No such device.
    queries.push_back({0, 30 * kUs, 30 * kUs});   // Empty.
    AnalyzerOptions options;
    options.window_ns = window;
    options.breakdown_intervals = queries;
    absl::StatusOr<Analysis> a = AnalyzeTrace(trace, options);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_EQ(a->breakdowns.size(), queries.size());
    for (size_t i = 0; i < queries.size(); ++i) {
      const IntervalBreakdown& bd = a->breakdowns[i];
      EXPECT_EQ(bd.busy_ns + AttributionTotal(bd.bubble) + bd.outside_ns,
                std::max<int64_t>(0, queries[i].end_ns - queries[i].start_ns))
          << "query " << i;
    }
    // Each window's device figures are the breakdown of that window.
    for (const WindowAnalysis& w : a->windows) {
      size_t q = static_cast<size_t>(w.start_ns / window);
      ASSERT_LT(q, queries.size());
      ASSERT_EQ(w.devices.size(), 1u);
      EXPECT_EQ(a->breakdowns[q].busy_ns, w.devices[0].stats.compute_ns);
      EXPECT_EQ(a->breakdowns[q].bubble, w.devices[0].stats.attribution);
    }
    EXPECT_EQ(a->breakdowns[queries.size() - 2].outside_ns, 10 * kUs);
  }
}

// --- Hand-made jobs ------------------------------------------------------

// Two ranks; rank 1's data loader stalls 100 us before the second
// all-reduce, so rank 0 waits 100 us inside it.
struct DataLoaderJob {
  Trace rank0;
  Trace rank1;
  DataLoaderJob() {
    TraceBuilder r0;
    r0.Launch(-2, -1, 1).Kernel("fwd", 0, 100, 7, 0, 1);
    r0.Collective("AllReduce", 100, 150, "0", 1);
    r0.Launch(148, 149, 2).Kernel("fwd", 150, 250, 7, 0, 2);
    r0.Collective("AllReduce", 250, 400, "0", 2);
    rank0 = r0.Build();
    TraceBuilder r1;
    r1.Launch(-2, -1, 1).Kernel("fwd", 0, 100, 7, 0, 1);
    r1.Collective("AllReduce", 100, 150, "0", 1);
    r1.Cpu("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 150,
           248);
    r1.Launch(248, 249, 2).Kernel("fwd", 250, 350, 7, 0, 2);
    r1.Collective("AllReduce", 350, 401, "0", 2);
    rank1 = r1.Build();
  }
};

TEST(AnalyzeCollectives, TheLateRanksDataLoaderIsBlamedForTheWait) {
  DataLoaderJob job;
  std::vector<RankInput> ranks = {Rank(job.rank0, 0), Rank(job.rank1, 1)};
  CollectiveOptions options;
  options.keep_instances = true;
  absl::StatusOr<CollectiveAnalysis> c = AnalyzeCollectives(ranks, options);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->key, CollectiveKey::kProcessGroupSeq);
  EXPECT_EQ(c->matched, 2);
  EXPECT_EQ(c->used, 2);
  EXPECT_EQ(c->unmatched, 0);
  EXPECT_EQ(c->unsynchronized, 0);
  ASSERT_EQ(c->ranks.size(), 2u);
  EXPECT_EQ(c->ranks[0].comm_wait_ns, 100 * kUs);
  EXPECT_EQ(c->ranks[1].comm_wait_ns, 0);
  EXPECT_EQ(c->ranks[0].comm_ns, 200 * kUs);
  EXPECT_EQ(c->ranks[0].comm_exposed_ns, 200 * kUs);
  EXPECT_EQ(c->ranks[1].wait_caused_ns, 100 * kUs);
  EXPECT_EQ(c->ranks[1].arrived_last, 1);
  // Instance 1: both start at 100; ties go to the lowest rank.
  EXPECT_EQ(c->ranks[0].arrived_last, 1);
  // busy_useful = (busy 400 - wait 100) / span 400.
  EXPECT_DOUBLE_EQ(c->ranks[0].busy_useful_utilization(), 0.75);
  ASSERT_EQ(c->stragglers.size(), 1u);
  const Straggler& s = c->stragglers[0];
  EXPECT_EQ(s.rank, 1);
  EXPECT_EQ(s.wait_caused_ns, 100 * kUs);
  // Rank 1's gap before its kernel at 250: 98 us in the data loader, then
  // 2 us of launching; the wait is split in proportion.
  EXPECT_EQ(Cause(s.causes, BubbleCause::kDataLoading), 98 * kUs);
  EXPECT_EQ(AttributionTotal(s.causes) + s.compute_ns + s.comm_ns, 100 * kUs);
  EXPECT_EQ(s.compute_ns, 0);
  EXPECT_EQ(s.unattributed_ns, 0);
  ASSERT_EQ(c->instances.size(), 2u);
  EXPECT_EQ(c->instances[1].late_rank, 1);
  EXPECT_EQ(c->instances[1].arrival_ns, 350 * kUs);
  // The first instance has no previous sync point: nothing to explain it
  // with, but it caused no wait either.
  EXPECT_EQ(c->unattributed, 0);
  // The analyses of both traces come back, so nobody analyzes twice.
  ASSERT_EQ(c->analyses.size(), 2u);
  EXPECT_EQ(c->analyses[1].devices[0].stats.compute_ns, 301 * kUs);
}

TEST(AnalyzeCollectives, SlowerComputeIsBlamedOnCompute) {
  TraceBuilder r0, r1;
  for (TraceBuilder* b : {&r0, &r1}) {
    b->Kernel("fwd", 0, 100).Collective("AllReduce", 100, 150, "0", 1);
  }
  r0.Kernel("bwd", 150, 250).Collective("AllReduce", 250, 420, "0", 2);
  r1.Kernel("bwd", 150, 400).Collective("AllReduce", 400, 420, "0", 2);
  Trace t0 = r0.Build(), t1 = r1.Build();
  std::vector<RankInput> ranks = {Rank(t0, 0), Rank(t1, 1)};
  absl::StatusOr<CollectiveAnalysis> c = AnalyzeCollectives(ranks);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->stragglers.size(), 1u);
  EXPECT_EQ(c->stragglers[0].rank, 1);
  EXPECT_EQ(c->stragglers[0].wait_caused_ns, 150 * kUs);
  EXPECT_EQ(c->stragglers[0].compute_ns, 150 * kUs);
}

TEST(AnalyzeCollectives, EndsThatDisagreeAreUnsynchronizedAndNotUsed) {
  TraceBuilder r0, r1;
  r0.Collective("SendRecv", 0, 100).Collective("SendRecv", 200, 300);
  // The second pair ends 1 ms apart: not one implicit sync.
  r1.Collective("SendRecv", 10, 100).Collective("SendRecv", 210, 1300);
  Trace t0 = r0.Build(), t1 = r1.Build();
  std::vector<RankInput> ranks = {Rank(t0, 0), Rank(t1, 1)};
  absl::StatusOr<CollectiveAnalysis> c = AnalyzeCollectives(ranks);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->key, CollectiveKey::kStreamOrder);
  EXPECT_EQ(c->matched, 2);
  EXPECT_EQ(c->unsynchronized, 1);
  EXPECT_EQ(c->used, 1);
  EXPECT_EQ(c->ranks[0].comm_wait_ns, 10 * kUs);
}

TEST(AnalyzeCollectives, ACollectiveMissingOnARankIsUnmatched) {
  TraceBuilder r0, r1;
  r0.Collective("AllReduce", 0, 100, "0")
      .Collective("AllReduce", 200, 300, "0");
  r1.Collective("AllReduce", 0, 100, "0");
  Trace t0 = r0.Build(), t1 = r1.Build();
  std::vector<RankInput> ranks = {Rank(t0, 0), Rank(t1, 1)};
  absl::StatusOr<CollectiveAnalysis> c = AnalyzeCollectives(ranks);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->key, CollectiveKey::kProcessGroupOrder);
  EXPECT_EQ(c->matched, 1);
  EXPECT_EQ(c->unmatched, 1);
}

TEST(AnalyzeCollectives, GroupRanksNameTheExpectedMembers) {
  // Group "sub" holds ranks 0 and 1 only; rank 2 is not missing from it.
  TraceBuilder r0, r1, r2;
  r0.Collective("AllReduce", 0, 100, "sub", 1, 24, 0, "[0, 1]");
  r1.Collective("AllReduce", 20, 100, "sub", 1, 24, 0, "[0, 1]");
  r2.Kernel("k", 0, 100);
  Trace t0 = r0.Build(), t1 = r1.Build(), t2 = r2.Build();
  std::vector<RankInput> ranks = {Rank(t0, 0), Rank(t1, 1), Rank(t2, 2)};
  absl::StatusOr<CollectiveAnalysis> c = AnalyzeCollectives(ranks);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->matched, 1);
  EXPECT_EQ(c->unmatched, 0);
  EXPECT_EQ(c->ranks[0].comm_wait_ns, 20 * kUs);
}

TEST(AnalyzeCollectives, ASingleRankHasNothingToMatch) {
  DataLoaderJob job;
  std::vector<RankInput> ranks = {Rank(job.rank0, 0)};
  absl::StatusOr<CollectiveAnalysis> c = AnalyzeCollectives(ranks);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->matched, 0);
  EXPECT_EQ(c->unmatched, 2);
  EXPECT_EQ(c->ranks[0].comm_wait_ns, 0);
  EXPECT_EQ(c->ranks[0].comm_ns, 200 * kUs);
}

// A rank keeps the rank its trace says, alone too: a window in which only
// one rank had events, and those only on the CPU (no kernel, so device 0),
// is still that rank's (a job split by host digests its ranks per host and
// window: docs/architecture.md#one-job-across-processors). A single export
// of several devices, which says no rank, numbers its ranks by device.
TEST(RanksOfTraces, ARankAloneKeepsItsRank) {
  Trace cpu_only = TraceBuilder().Cpu("DataLoader", 0, 50).Build();
  cpu_only.rank = 13;
  cpu_only.world_size = 16;
  const std::vector<Trace> one = {cpu_only};
  std::vector<RankInput> ranks = RanksOfTraces(one, {"host-6/13"});
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].rank, 13);
  EXPECT_EQ(ranks[0].device, 0);

  const std::vector<Trace> node = {TraceBuilder()
                                       .Kernel("k", 0, 10, 7, 2, 1)
                                       .Kernel("k", 0, 10, 7, 5, 2)
                                       .Build()};
  ranks = RanksOfTraces(node, {"node.sqlite"});
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[0].rank, 2);
  EXPECT_EQ(ranks[1].rank, 5);
}

TEST(AnalyzeCollectives, BadInputIsAClearError) {
  DataLoaderJob job;
  std::vector<RankInput> twice = {Rank(job.rank0, 3), Rank(job.rank1, 3)};
  absl::StatusOr<CollectiveAnalysis> c = AnalyzeCollectives(twice);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("rank 3 appears twice"));

  Trace a = job.rank0, b = job.rank1;
  a.job = "train-a";
  b.job = "train-b";
  std::vector<RankInput> jobs = {Rank(a, 0), Rank(b, 1)};
  c = AnalyzeCollectives(jobs);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("different jobs"));

  EXPECT_FALSE(AnalyzeCollectives({}).ok());
}

TEST(AnalyzeCollectives, SeqGoingBackwardsIsSkippedAndCounted) {
  TraceBuilder r0, r1;
  r0.Collective("AllReduce", 0, 100, "0", 5)
      .Collective("AllReduce", 200, 300, "0", 4)  // Backwards.
      .Collective("AllReduce", 400, 500, "0", 6);
  r1.Collective("AllReduce", 0, 100, "0", 5)
      .Collective("AllReduce", 400, 500, "0", 6);
  Trace t0 = r0.Build(), t1 = r1.Build();
  std::vector<RankInput> ranks = {Rank(t0, 0), Rank(t1, 1)};
  absl::StatusOr<CollectiveAnalysis> c = AnalyzeCollectives(ranks);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->seq_backwards, 1);
  EXPECT_EQ(c->matched, 2);
  EXPECT_EQ(c->unmatched, 0);
}

// A Seq that skips ahead is counted as a jump (its own counter, beside the
// unmatched instances it leaves behind); the kernel is kept and matches its
// partner. A step of one is not a jump, nor is the first kernel of a group.
TEST(AnalyzeCollectives, SeqJumpingAheadIsCountedAndKept) {
  TraceBuilder r0, r1;
  r0.Collective("AllReduce", 0, 100, "0", 5)
      .Collective("AllReduce", 200, 300, "0", 6)
      .Collective("AllReduce", 400, 500, "0", 7)
      .Collective("AllReduce", 600, 700, "0", 8);
  r1.Collective("AllReduce", 0, 100, "0", 5)
      .Collective("AllReduce", 400, 500, "0", 7)  // Jumps over 6.
      .Collective("AllReduce", 600, 700, "0", 8);
  Trace t0 = r0.Build(), t1 = r1.Build();
  std::vector<RankInput> ranks = {Rank(t0, 0), Rank(t1, 1)};
  absl::StatusOr<CollectiveAnalysis> c = AnalyzeCollectives(ranks);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->seq_jumps, 1);
  EXPECT_EQ(c->seq_backwards, 0);
  EXPECT_EQ(c->matched, 3);    // 5, 7, 8.
  EXPECT_EQ(c->unmatched, 1);  // 6: rank 0 only.

  // Without the gap: no jump, nothing unmatched.
  TraceBuilder steady;
  steady.Collective("AllReduce", 0, 100, "0", 5)
      .Collective("AllReduce", 200, 300, "0", 6)
      .Collective("AllReduce", 400, 500, "0", 7)
      .Collective("AllReduce", 600, 700, "0", 8);
  Trace t2 = steady.Build();
  ranks = {Rank(t0, 0), Rank(t2, 1)};
  c = AnalyzeCollectives(ranks);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->seq_jumps, 0);
  EXPECT_EQ(c->unmatched, 0);
}

// A process group has one size: ranks stating two are refused, with the
// group, both ranks and their sizes; sizes that agree, or that are not
// given, are fine.
TEST(AnalyzeCollectives, GroupSizesThatDisagreeAreRefused) {
  TraceBuilder r0, r1;
  r0.Collective("AllReduce", 0, 100, "0", 5)
      .Collective("AllReduce", 200, 300, "0", 6);
  r1.Collective("AllReduce", 0, 100, "0", 5)
      .Collective("AllReduce", 200, 300, "0", 6);
  Trace t0 = r0.Build(), t1 = r1.Build();
  for (CollectiveKernel& c : t0.collectives) c.group_size = 2;
  t1.collectives[0].group_size = 2;
  std::vector<RankInput> ranks = {Rank(t0, 0), Rank(t1, 1)};
  ASSERT_TRUE(AnalyzeCollectives(ranks).ok());  // Rank 1's Seq 6: not given.
  t1.collectives[1].group_size = 4;
  ranks = {Rank(t0, 0), Rank(t1, 1)};
  absl::StatusOr<CollectiveAnalysis> c = AnalyzeCollectives(ranks);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(),
              HasSubstr("group size disagrees in process group '0': rank 0 "
                        "says 2 (Seq 5), rank 1 says 4 (Seq 6)"));
}

// --- Clocks --------------------------------------------------------------

TEST(AnalyzeCollectives, PlantedClockSkewIsRecoveredWithin50Us) {
  std::mt19937_64 rng(11);
  const std::vector<int64_t> skew_us = {0, 5000, -5000, 3217};
  std::vector<Trace> traces(skew_us.size());
  std::vector<TraceBuilder> builders(skew_us.size());
  double t = 1000;
  for (int i = 0; i < 40; ++i) {
    std::vector<double> starts;
    for (size_t r = 0; r < skew_us.size(); ++r) {
      starts.push_back(t + std::uniform_int_distribution<int>(0, 400)(rng));
    }
    const double end = *std::max_element(starts.begin(), starts.end()) + 200;
    for (size_t r = 0; r < skew_us.size(); ++r) {
      // Ends agree within +-10 us in true time.
      const double jitter = std::uniform_int_distribution<int>(-10, 10)(rng);
      builders[r].Collective("AllReduce", starts[r] + skew_us[r],
                             end + jitter + skew_us[r], "0", i);
    }
    t = end + 1000;
  }
  std::vector<RankInput> ranks;
  for (size_t r = 0; r < skew_us.size(); ++r) {
    traces[r] = builders[r].Build();
    ranks.push_back(
        Rank(traces[r], static_cast<int32_t>(r), "host" + std::to_string(r)));
  }
  absl::StatusOr<CollectiveAnalysis> c = AnalyzeCollectives(ranks);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->used, 40);
  for (size_t r = 0; r < skew_us.size(); ++r) {
    EXPECT_NEAR(c->ranks[r].clock_offset_ns, skew_us[r] * kUs, 50 * kUs)
        << "rank " << r;
    EXPECT_EQ(c->ranks[r].clock_corrected, r != 0);
  }
}

TEST(AnalyzeCollectives, TooFewInstancesLeaveTheClockUncorrected) {
  TraceBuilder r0, r1;
  r0.Collective("AllReduce", 0, 100, "0", 1);
  r1.Collective("AllReduce", 5020, 5100, "0", 1);
  Trace t0 = r0.Build(), t1 = r1.Build();
  std::vector<RankInput> ranks = {Rank(t0, 0, "a"), Rank(t1, 1, "b")};
  absl::StatusOr<CollectiveAnalysis> c = AnalyzeCollectives(ranks);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->ranks[1].clock_corrected);
  EXPECT_EQ(c->ranks[1].clock_offset_ns, 0);
  EXPECT_EQ(c->unsynchronized, 1);
}

// A tensor × data-parallel job: 4 hosts × 4 GPUs, one file (clock domain)
// per rank. Tensor-parallel all-gathers within each host, data-parallel
// all-reduces across hosts: rank 0 shares an instance with 7 of the 16
// ranks only, so the others' clocks follow from chains of instances.
// Host h's clock reads true + offset + drift × true / 1 s; rank 13 computes
// 1.5 ms longer before every all-reduce.
struct TpDpJob {
  static constexpr int kHosts = 4;
  static constexpr int kGpus = 4;
  static constexpr int kRanks = kHosts * kGpus;
  static constexpr int kLate = 13;
  std::vector<int64_t> offset_ns;
  std::vector<double> drift_ns_per_s;
  int64_t end_ns = 0;  // The last true end.
  std::vector<Trace> traces;

  int64_t Local(int rank, int64_t true_ns) const {
    const int h = rank / kGpus;
    return true_ns + offset_ns[h] +
           static_cast<int64_t>(drift_ns_per_s[h] *
                                static_cast<double>(true_ns) / 1e9);
  }
  // The truth the analysis should find for `rank` at true time `t`.
  int64_t TrueOffset(int rank, int64_t true_ns) const {
    return Local(rank, true_ns) - true_ns;
  }
};

TpDpJob MakeTpDpJob(int steps, int64_t step_ns, std::vector<double> drift) {
  TpDpJob job;
  job.offset_ns = {0, 2'100 * kUs, -1'700 * kUs, 4'300 * kUs};
  job.drift_ns_per_s = std::move(drift);
  std::mt19937_64 rng(23);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::vector<TraceBuilder> b(TpDpJob::kRanks);
  auto collective = [&](int r, const std::string& type,
                        const std::string& group, const std::string& members,
                        int64_t seq, int64_t start, int64_t end) {
    b[r].Collective(type, job.Local(r, start) / 1e3, job.Local(r, end) / 1e3,
                    group, seq, 24, 0, members);
  };
  for (int s = 0; s < steps; ++s) {
    const int64_t base = s * step_ns + 1 * kMs;
    std::vector<int64_t> ready(TpDpJob::kRanks);
    for (int r = 0; r < TpDpJob::kRanks; ++r) {
      ready[r] = base + 1'000 * kUs + uniform(0, 200) * kUs;
      b[r].Kernel("gemm", job.Local(r, base) / 1e3,
                  job.Local(r, ready[r]) / 1e3);
    }
    // All-gathers within each host.
    std::vector<int64_t> after(TpDpJob::kRanks);
    for (int h = 0; h < TpDpJob::kHosts; ++h) {
      std::string members = "[";
      int64_t arrival = 0;
      for (int g = 0; g < TpDpJob::kGpus; ++g) {
        const int r = h * TpDpJob::kGpus + g;
        absl::StrAppend(&members, g == 0 ? "" : ", ", r);
        arrival = std::max(arrival, ready[r]);
      }
      members += "]";
      for (int g = 0; g < TpDpJob::kGpus; ++g) {
        const int r = h * TpDpJob::kGpus + g;
        after[r] = arrival + 300 * kUs + uniform(-5, 5) * kUs;
        collective(r, "AllGather", absl::StrCat("tp", h), members, s, ready[r],
                   after[r]);
      }
    }
    // Compute, then all-reduces across hosts.
    for (int r = 0; r < TpDpJob::kRanks; ++r) {
      const int64_t done = after[r] + 2'000 * kUs + uniform(0, 200) * kUs +
                           (r == TpDpJob::kLate ? 1'500 * kUs : 0);
      b[r].Kernel("gemm", job.Local(r, after[r]) / 1e3,
                  job.Local(r, done) / 1e3);
      ready[r] = done;
    }
    for (int g = 0; g < TpDpJob::kGpus; ++g) {
      std::string members = "[";
      int64_t arrival = 0;
      for (int h = 0; h < TpDpJob::kHosts; ++h) {
        const int r = h * TpDpJob::kGpus + g;
        absl::StrAppend(&members, h == 0 ? "" : ", ", r);
        arrival = std::max(arrival, ready[r]);
      }
      members += "]";
      for (int h = 0; h < TpDpJob::kHosts; ++h) {
        const int r = h * TpDpJob::kGpus + g;
        const int64_t end = arrival + 500 * kUs + uniform(-5, 5) * kUs;
        collective(r, "AllReduce", absl::StrCat("dp", g), members, s, ready[r],
                   end);
        job.end_ns = std::max(job.end_ns, end);
      }
    }
  }
  for (TraceBuilder& t : b) job.traces.push_back(t.Build());
  return job;
}

void ExpectTpDpJobSolved(const TpDpJob& job, int steps) {
  std::vector<RankInput> ranks;
  for (int r = 0; r < TpDpJob::kRanks; ++r) {
    ranks.push_back(Rank(job.traces[r], r, absl::StrCat("file:rank", r)));
  }
  absl::StatusOr<CollectiveAnalysis> c = AnalyzeCollectives(ranks);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->matched, steps * 2 * TpDpJob::kGpus);
  EXPECT_EQ(c->unsynchronized, 0);
  EXPECT_EQ(c->used, c->matched);
  // The offset at the start (the clock origin is the first instance's end,
  // about 2.5 ms in) and, from the drift, at the end.
  const int64_t first_end = 2'500 * kUs;
  for (int r = 0; r < TpDpJob::kRanks; ++r) {
    const RankCollectiveStats& s = c->ranks[r];
    EXPECT_TRUE(s.clock_connected) << "rank " << r;
    EXPECT_EQ(s.clock_corrected, r != 0) << "rank " << r;
    EXPECT_NEAR(s.clock_offset_ns, job.TrueOffset(r, first_end), 20 * kUs)
        << "rank " << r;
    const double seconds = static_cast<double>(job.end_ns - first_end) / 1e9;
    EXPECT_NEAR(s.clock_offset_ns + s.clock_drift_ns_per_s * seconds,
                job.TrueOffset(r, job.end_ns), 20 * kUs)
        << "rank " << r;
    EXPECT_LT(s.clock_residual_ns, 10 * kUs) << "rank " << r;
    EXPECT_GE(s.clock_instances, steps) << "rank " << r;
  }
  ASSERT_FALSE(c->stragglers.empty());
  EXPECT_EQ(c->stragglers[0].rank, TpDpJob::kLate);
  // Last in every all-reduce, and in some all-gathers of its host.
  EXPECT_GE(c->ranks[TpDpJob::kLate].arrived_last, steps);
}

TEST(AnalyzeCollectives, TensorDataParallelClocksAreSolvedThroughChains) {
  const TpDpJob job = MakeTpDpJob(40, 20 * kMs, {0, 0, 0, 0});
  ExpectTpDpJobSolved(job, 40);
}

// A 35-minute job whose host clocks drift up to 1.5 ms apart: one constant
// offset per domain would leave most instances unsynchronized.
TEST(AnalyzeCollectives, TensorDataParallelClocksFollowDrift) {
  const TpDpJob job = MakeTpDpJob(210, 10 * kS, {0, 700, -500, 300});
  ExpectTpDpJobSolved(job, 210);
}

// --- Brute-force oracle --------------------------------------------------

// The spec's matching, synchronization, arrival and waits, written the
// slow way on a microsecond grid: one clock, keys by (group, Seq).
struct OracleInstance {
  bool matched = false;
  bool synchronized = false;
  int32_t late = -1;
  int64_t arrival_us = 0;
  std::map<int32_t, int64_t> wait_us;
};

std::map<std::pair<std::string, int64_t>, OracleInstance> Oracle(
    const std::vector<Trace>& traces) {
  std::map<std::pair<std::string, int64_t>,
           std::map<int32_t, std::vector<const CollectiveKernel*>>>
      by_key;
  for (size_t r = 0; r < traces.size(); ++r) {
    for (const CollectiveKernel& c : traces[r].collectives) {
      by_key[{std::string(traces[r].Name(c.process_group)), c.seq}]
            [static_cast<int32_t>(r)]
                .push_back(&c);
    }
  }
  std::map<std::pair<std::string, int64_t>, OracleInstance> out;
  for (const auto& [key, per_rank] : by_key) {
    OracleInstance& o = out[key];
    o.matched = per_rank.size() == traces.size();
    for (const auto& [r, v] : per_rank) o.matched &= v.size() == 1;
    if (!o.matched) continue;
    int64_t min_end = INT64_MAX, max_end = INT64_MIN, shortest = INT64_MAX;
    for (const auto& [r, v] : per_rank) {
      min_end = std::min(min_end, v[0]->end_ns);
      max_end = std::max(max_end, v[0]->end_ns);
      shortest = std::min(shortest, v[0]->end_ns - v[0]->start_ns);
    }
    o.synchronized =
        max_end - min_end <=
        std::max<int64_t>(50 * kUs, static_cast<int64_t>(0.05 * shortest));
    if (!o.synchronized) continue;
    int64_t arrival = INT64_MIN;
    for (const auto& [r, v] : per_rank) {
      if (v[0]->start_ns > arrival) {
        arrival = v[0]->start_ns;
        o.late = r;
      }
    }
    o.arrival_us = arrival / kUs;
    for (const auto& [r, v] : per_rank) {
      int64_t wait = 0;
      for (int64_t t = v[0]->start_ns / kUs;
           t < std::min(v[0]->end_ns, arrival) / kUs; ++t) {
        bool computing = false;
        for (const GpuActivity& a : traces[r].gpu) {
          if (a.start_ns <= t * kUs && (t + 1) * kUs <= a.end_ns &&
              !IsCollectiveKernelName(traces[r].Name(a.name))) {
            computing = true;
          }
        }
        if (!computing) ++wait;
      }
      o.wait_us[r] = wait;
    }
  }
  return out;
}

TEST(AnalyzeCollectives, AgreesWithABruteForceOracleOnRandomJobs) {
  std::mt19937_64 rng(2024);
  auto uniform = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  for (int round = 0; round < 60; ++round) {
    const int n = uniform(2, 5);
    std::vector<TraceBuilder> builders(n);
    double t = 0;
    const int instances = uniform(3, 25);
    for (int i = 0; i < instances; ++i) {
      std::vector<double> starts(n);
      for (int r = 0; r < n; ++r) {
        double s = t + uniform(0, 300);
        // Compute before and sometimes overlapping the collective.
        builders[r].Kernel("gemm", s - uniform(5, 60), s + uniform(-5, 40));
        starts[r] = s;
      }
      const double end =
          *std::max_element(starts.begin(), starts.end()) + uniform(10, 200);
      const int dropped = uniform(0, 9) == 0 ? uniform(0, n - 1) : -1;
      for (int r = 0; r < n; ++r) {
        if (r == dropped) continue;
        double e = end;
        if (uniform(0, 14) == 0) e += uniform(60, 500);  // Not in sync.
        builders[r].Collective("AllReduce", starts[r], e, "pg", i);
      }
      t = end + uniform(50, 400);
    }
    std::vector<Trace> traces;
    for (TraceBuilder& b : builders) traces.push_back(b.Build());
    std::vector<RankInput> ranks;
    for (int r = 0; r < n; ++r) ranks.push_back(Rank(traces[r], r));
    CollectiveOptions options;
    options.keep_instances = true;
    absl::StatusOr<CollectiveAnalysis> c = AnalyzeCollectives(ranks, options);
    ASSERT_TRUE(c.ok()) << c.status();
    const auto oracle = Oracle(traces);
    int64_t matched = 0, unsynchronized = 0, used = 0;
    for (const auto& [key, o] : oracle) {
      matched += o.matched;
      unsynchronized += o.matched && !o.synchronized;
      used += o.synchronized;
    }
    EXPECT_EQ(c->matched, matched) << "round " << round;
    EXPECT_EQ(c->unmatched, static_cast<int64_t>(oracle.size()) - matched);
    EXPECT_EQ(c->unsynchronized, unsynchronized);
    ASSERT_EQ(static_cast<int64_t>(c->instances.size()), used);
    for (const CollectiveInstance& inst : c->instances) {
      const OracleInstance& o = oracle.at({inst.group, inst.key});
      EXPECT_EQ(inst.late_rank, o.late) << "round " << round;
      EXPECT_EQ(inst.arrival_ns, o.arrival_us * kUs);
      for (const CollectiveInstance::Part& p : inst.parts) {
        EXPECT_EQ(p.wait_ns, o.wait_us.at(p.rank) * kUs)
            << "round " << round << " seq " << inst.key << " rank " << p.rank;
      }
    }
  }
}

}  // namespace
}  // namespace bubblewatch
