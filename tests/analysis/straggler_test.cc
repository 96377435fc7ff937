// Planted stragglers (ingest/synthetic/synthetic_straggler.h) through
// AnalyzeCollectives: the planted rank must be found, and at least 95 % of
// the wait it caused blamed on the planted cause, for 2, 8 and 64 ranks,
// with and without skewed host clocks (docs/semantics.md#stragglers).
#include <string>
#include <tuple>
#include <vector>

#include "analysis/collectives.h"
#include "gtest/gtest.h"
#include "ingest/synthetic/synthetic_straggler.h"

namespace bubblewatch {
namespace {

int64_t Blamed(const Straggler& s, StragglerCause cause) {
  switch (cause) {
    case StragglerCause::kDataLoading:
      return s.causes[static_cast<int>(BubbleCause::kDataLoading)];
    case StragglerCause::kHostSync:
      return s.causes[static_cast<int>(BubbleCause::kHostSync)];
    case StragglerCause::kCompute:
      return s.compute_ns;
  }
  return 0;
}

class PlantedStraggler
    : public ::testing::TestWithParam<std::tuple<int, StragglerCause, bool>> {};

TEST_P(PlantedStraggler, IsNamedWithItsCause) {
  const auto [ranks, cause, skewed] = GetParam();
  StragglerJobOptions options;
  options.ranks = ranks;
  options.late_rank = ranks / 2 + 1 < ranks ? ranks / 2 + 1 : 1;
  options.cause = cause;
  options.steps = ranks >= 64 ? 12 : 30;
  options.seed = static_cast<uint64_t>(ranks * 10 + static_cast<int>(cause));
  if (skewed) options.host_skew_ns = {0, 5'000'000, -5'000'000, 1'234'567};
  options.ranks_per_host = ranks >= 8 ? 8 : 1;
  StragglerJob job = MakeStragglerJob(options);
  ASSERT_GT(job.truth.planted_wait_ns, 0);

  std::vector<RankInput> inputs;
  for (int r = 0; r < ranks; ++r) {
    RankInput in;
    in.trace = &job.ranks[r];
    in.device = r % options.ranks_per_host;
    in.rank = r;
    in.host = job.ranks[r].host;
    in.clock_domain = job.ranks[r].host;
    inputs.push_back(in);
  }
  absl::StatusOr<CollectiveAnalysis> c = AnalyzeCollectives(inputs);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->used, options.steps);
  EXPECT_EQ(c->unsynchronized, 0);
  ASSERT_FALSE(c->stragglers.empty());
  const Straggler& top = c->stragglers[0];
  EXPECT_EQ(top.rank, options.late_rank);
  EXPECT_EQ(top.arrived_last, options.steps);
  const int64_t blamed = Blamed(top, cause);
  EXPECT_GE(static_cast<double>(blamed),
            0.95 * static_cast<double>(job.truth.planted_wait_ns))
      << "blamed " << blamed << " of planted " << job.truth.planted_wait_ns
      << " on " << StragglerCauseName(cause);
  // The first step has no earlier sync point: its wait is unattributed.
  EXPECT_EQ(c->unattributed, 1);
  // Clocks: every host's skew recovered within 50 us.
  for (int r = 0; r < ranks; ++r) {
    const int64_t skew = job.truth.host_skew_ns[r / options.ranks_per_host] -
                         job.truth.host_skew_ns[0];
    EXPECT_NEAR(c->ranks[r].clock_offset_ns, skew, 50'000) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Ranks, PlantedStraggler,
    ::testing::Combine(::testing::Values(2, 8, 64),
                       ::testing::Values(StragglerCause::kDataLoading,
                                         StragglerCause::kHostSync,
                                         StragglerCause::kCompute),
                       ::testing::Bool()),
    [](const auto& info) {
      return std::to_string(std::get<0>(info.param)) + "_" +
             std::string(StragglerCauseName(std::get<1>(info.param))) +
             (std::get<2>(info.param) ? "_skewed" : "");
    });

}  // namespace
}  // namespace bubblewatch
