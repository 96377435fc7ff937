#include "tests/processor/windower_streams.h"

#include <algorithm>
#include <optional>
#include <random>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "analysis/collectives.h"
#include "gtest/gtest.h"
#include "ingest/batched_trace.h"
#include "processor/batch_validator.h"

namespace bubblewatch::testing {

std::vector<DecodedBatch> InterleavedBatches(
    const std::vector<StreamSource>& sources, int64_t max_events,
    uint32_t seed) {
  struct Timed {
    int64_t first;
    size_t source;
    DecodedBatch batch;
  };
  std::vector<Timed> all;
  for (size_t s = 0; s < sources.size(); ++s) {
    BatchedTrace batched(sources[s].trace,
                         BatchHeader{.job = "job",
                                     .host = sources[s].host,
                                     .rank = sources[s].rank,
                                     .world_size = sources[s].trace.world_size},
                         {.max_events = max_events});
    for (size_t i = 0; i < batched.num_batches(); ++i) {
      absl::StatusOr<DecodedBatch> d = DecodeEventBatch(batched.Encode(i));
      EXPECT_TRUE(d.ok()) << d.status();
      if (!d.ok()) continue;
      EXPECT_EQ(ValidateBatch(*d), std::nullopt) << "batch " << i;
      all.push_back({batched.batch(i).first_start_ns, s, *std::move(d)});
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const Timed& a, const Timed& b) {
    return std::tie(a.first, a.source) < std::tie(b.first, b.source);
  });
  // Neighbouring batches of different sources arrive in either order.
  std::mt19937 rng(seed);
  for (size_t i = 0; i + 1 < all.size(); ++i) {
    if (rng() % 3 == 0) std::swap(all[i], all[i + 1]);
  }
  std::vector<DecodedBatch> out;
  for (Timed& t : all) out.push_back(std::move(t.batch));
  return out;
}

std::vector<WindowSummary> StreamWindows(
    const std::vector<DecodedBatch>& batches, const WindowerOptions& options) {
  JobWindower windower("job", options);
  std::vector<WindowSummary> out;
  const absl::Time now = absl::UnixEpoch();
  int64_t offset = 0;
  for (const DecodedBatch& b : batches) {
    EXPECT_EQ(windower.Add(b, offset++, /*replay=*/false, now), 0);
    for (WindowSummary& w : windower.FinalizeReady(now, absl::Hours(1))) {
      out.push_back(std::move(w));
    }
  }
  for (WindowSummary& w :
       windower.FinalizeAll(WindowSummary::ClosedBy::kIdleTimeout)) {
    out.push_back(std::move(w));
  }
  EXPECT_TRUE(windower.TakeLateCollectiveCounts().empty());
  EXPECT_EQ(windower.collective_errors(), 0);
  return out;
}

Trace CutTrace(const Trace& t, int64_t start, int64_t end) {
  Trace out = t;
  auto outside = [&](const auto& e) {
    return e.start_ns < start || e.start_ns >= end;
  };
  std::erase_if(out.gpu, outside);
  std::erase_if(out.cpu, outside);
  std::erase_if(out.collectives, outside);
  return out;
}

std::vector<Trace> WindowTraces(const std::vector<StreamSource>& sources,
                                int64_t start, int64_t end,
                                std::vector<std::string>* labels) {
  std::vector<Trace> cut;
  for (const StreamSource& s : sources) {
    // The producer numbers a stream's pairs before cutting it into
    // batches (ingest/batched_trace.h): so does the oracle.
    Trace whole = s.trace;
    NumberPointToPointPairs(whole);
    Trace t = CutTrace(whole, start, end);
    if (t.gpu.empty() && t.cpu.empty() && t.collectives.empty()) continue;
    JobWindower::ApplyRankIds(
        BatchHeader{.rank = s.rank, .world_size = s.trace.world_size}, t);
    t.host = s.host;
    // A rank sent without a host is its own clock domain
    // (docs/semantics.md#multi-device).
    labels->push_back(absl::StrCat(s.host, "/", s.rank));
    cut.push_back(std::move(t));
  }
  return cut;
}

ParallelJobOptions PipelineJobOptions() {
  ParallelJobOptions o;
  o.tp = 2;
  o.dp = 2;
  o.pp = 4;
  o.steps = 12;
  o.pipeline_groups = true;
  o.clock_offset_ns = {0,         1'300'000, -2'100'000, 700'000,
                       2'900'000, -600'000,  1'800'000,  -1'400'000};
  return o;
}

ParallelJobOptions SplitJobOptions(bool host_names) {
  ParallelJobOptions o = PipelineJobOptions();
  o.host_names = host_names;
  o.drift_ppm = {0, 3, -2, 5, -4, 1, 2, -1};
  o.roots = {{.rank = 9, .step = 4, .extra_ns = 8'000'000, .steps = 4},
             {.rank = 2,
              .step = 8,
              .extra_ns = 3'000'000,
              .cause = StragglerCause::kDataLoading}};
  return o;
}

}  // namespace bubblewatch::testing
