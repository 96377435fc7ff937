// Root cause across process groups (docs/semantics.md#root-cause): a rank
// that arrives late at a collective because it waited for another rank in
// an earlier collective of another group is not a straggler; its blame
// passes to the rank it waited for. Checked on a causal simulation of a
// tensor x data parallel job: TP groups inside a "host", DP groups across.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "analysis/collectives.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/analysis/trace_builder.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::testing::TraceBuilder;

// A TP x DP job, simulated causally in µs: each step every rank computes
// `c1`, joins its TP all-gather (which starts when its last member arrives
// and takes `ag`), computes `c2`, joins its DP all-reduce (`ar`). Rank r is
// in TP group r / tp and DP group r % tp.
struct Job {
  int tp = 2;
  int dp = 2;
  int steps = 6;
  double c1 = 1000, c2 = 1000, ag = 100, ar = 200;
  // (rank, step) -> extra compute before its all-gather.
  std::vector<std::tuple<int, int, double>> plants;
  // Set by Run: the end of the job's last collective (it starts at 0).
  mutable double end_us = 0;

  std::vector<Trace> Run() const {
    const int n = tp * dp;
    std::vector<TraceBuilder> b(n);
    std::vector<double> ready(n, 0);
    std::vector<int64_t> seq_tp(dp, 0), seq_dp(tp, 0);
    auto group_ranks = [](const std::vector<int>& members) {
      return absl::StrCat("[", absl::StrJoin(members, ", "), "]");
    };
    // One collective of `members`: each starts at its ready time, all end
    // at the last arrival plus `transfer`.
    auto collective = [&](const std::string& type, const std::string& group,
                          int64_t seq, const std::vector<int>& members,
                          double transfer) {
      double arrival = 0;
      for (int r : members) arrival = std::max(arrival, ready[r]);
      for (int r : members) {
        b[r].Collective(type, ready[r], arrival + transfer, group, seq, 24, 0,
                        group_ranks(members));
        ready[r] = arrival + transfer;
      }
    };
    for (int step = 0; step < steps; ++step) {
      for (int r = 0; r < n; ++r) {
        double extra = 0;
        for (const auto& [rank, s, ns] : plants) {
          if (rank == r && s == step) extra += ns;
        }
        b[r].Kernel("gemm_fwd", ready[r], ready[r] + c1 + extra);
        ready[r] += c1 + extra;
      }
      for (int g = 0; g < dp; ++g) {
        std::vector<int> members;
        for (int i = 0; i < tp; ++i) members.push_back(g * tp + i);
        collective("AllGather", absl::StrCat("tp", g), seq_tp[g]++, members,
                   ag);
      }
      for (int r = 0; r < n; ++r) {
        b[r].Kernel("gemm_bwd", ready[r], ready[r] + c2);
        ready[r] += c2;
      }
      for (int i = 0; i < tp; ++i) {
        std::vector<int> members;
        for (int g = 0; g < dp; ++g) members.push_back(g * tp + i);
        collective("AllReduce", absl::StrCat("dp", i), seq_dp[i]++, members,
                   ar);
      }
    }
    end_us = *std::max_element(ready.begin(), ready.end());
    std::vector<Trace> traces;
    for (int r = 0; r < n; ++r) {
      Trace t = b[r].Build();
      t.rank = r;
      traces.push_back(std::move(t));
    }
    return traces;
  }
};

std::vector<RankInput> Inputs(const std::vector<Trace>& traces) {
  std::vector<RankInput> in;
  for (size_t r = 0; r < traces.size(); ++r) {
    RankInput i;
    i.trace = &traces[r];
    i.rank = static_cast<int32_t>(r);
    i.clock_domain = "host";  // One clock: this test is about blame.
    i.host = absl::StrCat("node-", r / 2);
    i.file = absl::StrCat("rank-", r);
    in.push_back(i);
  }
  return in;
}

int64_t TotalWaitCaused(const CollectiveAnalysis& c) {
  int64_t total = 0;
  for (const Straggler& s : c.stragglers) total += s.wait_caused_ns;
  return total;
}

TEST(RootCause, ATpPeerThatOnlyWaitedPassesItsBlameToTheRoot) {
  Job job;
  job.plants = {{0, 2, 3000}};
  const std::vector<Trace> traces = job.Run();
  absl::StatusOr<CollectiveAnalysis> c = AnalyzeCollectives(Inputs(traces));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_FALSE(c->stragglers.empty());
  const Straggler& root = c->stragglers.front();
  EXPECT_EQ(root.rank, 0);
  EXPECT_EQ(root.host, "node-0");
  // Rank 1 waited 3 ms in the TP all-gather, rank 2 for rank 0 and rank 3
  // for rank 1 in the DP all-reduces: 9 ms, all of it rank 0's compute.
  EXPECT_NEAR(root.wait_caused_ns, 9'000'000, 1'000);
  EXPECT_GE(root.wait_caused_ns, TotalWaitCaused(*c) * 99 / 100);
  EXPECT_NEAR(root.compute_ns, 9'000'000, 1'000);
  // Direct: the all-gather (rank 1) and dp0 (rank 2); via rank 1: dp1.
  EXPECT_NEAR(root.direct_wait_caused_ns, 6'000'000, 1'000);
  ASSERT_EQ(root.via.size(), 1u);
  EXPECT_EQ(root.via[0].rank, 1);
  EXPECT_NEAR(root.via[0].wait_ns, 3'000'000, 1'000);
  // Rank 1 arrived last at dp1 but is no straggler of its own.
  for (const Straggler& s : c->stragglers) {
    if (s.rank == 1) {
      EXPECT_LT(s.wait_caused_ns, 10'000);
    }
  }
}

TEST(RootCause, TwoRootsInDifferentStepsEachGetTheirChains) {
  Job job;
  job.tp = 4;
  job.dp = 4;
  job.steps = 8;
  job.plants = {{5, 2, 2000}, {14, 5, 4000}};
  const std::vector<Trace> traces = job.Run();
  absl::StatusOr<CollectiveAnalysis> c = AnalyzeCollectives(Inputs(traces));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_GE(c->stragglers.size(), 2u);
  EXPECT_EQ(c->stragglers[0].rank, 14);
  EXPECT_EQ(c->stragglers[1].rank, 5);
  // Every TP peer waits for the root (3 of them), then every other DP
  // member of each TP index waits in its all-reduce (3 per index, 4
  // indices): 15 waits of the planted length.
  EXPECT_NEAR(c->stragglers[0].wait_caused_ns, 15 * 4'000'000, 10'000);
  EXPECT_NEAR(c->stragglers[1].wait_caused_ns, 15 * 2'000'000, 10'000);
  EXPECT_GE(c->stragglers[0].wait_caused_ns + c->stragglers[1].wait_caused_ns,
            TotalWaitCaused(*c) * 99 / 100);
}

TEST(RootCause, ABalancedJobNamesNoStraggler) {
  const std::vector<Trace> traces = Job{}.Run();
  absl::StatusOr<CollectiveAnalysis> c = AnalyzeCollectives(Inputs(traces));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->stragglers.empty());
}

// What it cost: the replay's saved_ns against a brute-force re-run of the
// same job without the plant.
TEST(RootCause, SavedTimeMatchesTheJobRunWithoutThePlant) {
  Job job;
  job.tp = 4;
  job.dp = 4;
  job.steps = 8;
  job.plants = {{5, 2, 2000}, {14, 5, 4000}};
  const std::vector<Trace> traces = job.Run();
  const double planted_end = job.end_us;
  auto end_without = [&](std::vector<std::tuple<int, int, double>> plants) {
    Job other = job;
    other.plants = std::move(plants);
    other.Run();
    return other.end_us;
  };
  absl::StatusOr<CollectiveAnalysis> c = AnalyzeCollectives(Inputs(traces));
  ASSERT_TRUE(c.ok()) << c.status();
  // The replay runs from the first collective's start (after c1).
  EXPECT_NEAR(c->job_ns, (planted_end - job.c1) * 1000, 1'000);
  EXPECT_NEAR(c->job_ns_without_stragglers, (end_without({}) - job.c1) * 1000,
              1'000);
  ASSERT_GE(c->stragglers.size(), 2u);
  const double truth14 = (planted_end - end_without({{5, 2, 2000}})) * 1000;
  const double truth5 = (planted_end - end_without({{14, 5, 4000}})) * 1000;
  EXPECT_EQ(c->stragglers[0].rank, 14);
  EXPECT_NEAR(c->stragglers[0].saved_ns, truth14, truth14 * 0.1);
  EXPECT_EQ(c->stragglers[1].rank, 5);
  EXPECT_NEAR(c->stragglers[1].saved_ns, truth5, truth5 * 0.1);
}

}  // namespace
}  // namespace bubblewatch
