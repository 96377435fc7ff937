// EventBatch codec throughput (schemas/event_batch_codec.h): encoding one
// rank's trace into batches of 4096 events, and decoding those batches back,
// as the producer and the processor do. Two inputs:
//   Fleet      one rank of the synthetic fleet (`mix`, 60 s at 20k events/s):
//              no collective records, the common case today;
//   Straggler  one rank of a synthetic straggler job, whose all-reduce
//              kernels carry their collective identity.
// Reports events/s (items_per_second) and bytes/s of encoded batches.
//
//   build/ops/bench/event_batch_benchmark
#include <cstdint>
#include <span>
#include <vector>

#include "benchmark/benchmark.h"
#include "ingest/batched_trace.h"
#include "ingest/synthetic/synthetic_fleet.h"
#include "ingest/synthetic/synthetic_straggler.h"
#include "schemas/event_batch_codec.h"

namespace bubblewatch {
namespace {

Trace FleetRank() {
  SyntheticFleetOptions options;
  options.jobs = 1;
  options.gpus_per_job = 1;
  options.duration = absl::Seconds(60);
  options.scenario = SyntheticScenario::kMix;
  auto fleet = GenerateSyntheticFleet(options);
  return std::move((*fleet)[0].ranks[0]);
}

Trace StragglerRank() {
  StragglerJobOptions options;
  options.ranks = 2;
  options.steps = 4000;
  options.late_rank = 1;
  return std::move(MakeStragglerJob(options).ranks[0]);
}

Trace MakeInput(int64_t which) {
  return which == 0 ? FleetRank() : StragglerRank();
}

BatchHeader Identity() {
  return BatchHeader{
      .job = "bench-job", .host = "host-0", .rank = 0, .world_size = 8};
}

void BM_EncodeBatches(benchmark::State& state) {
  BatchedTrace batched(MakeInput(state.range(0)), Identity(),
                       BatchingOptions{.max_events = 4096});
  int64_t bytes = 0;
  for (auto _ : state) {
    for (size_t i = 0; i < batched.num_batches(); ++i) {
      std::span<const uint8_t> out = batched.Encode(i);
      bytes += static_cast<int64_t>(out.size());
      benchmark::DoNotOptimize(out.data());
    }
  }
  state.SetItemsProcessed(state.iterations() * batched.num_events());
  state.SetBytesProcessed(bytes);
  state.SetLabel(state.range(0) == 0 ? "fleet" : "straggler");
}

void BM_DecodeBatches(benchmark::State& state) {
  BatchedTrace batched(MakeInput(state.range(0)), Identity(),
                       BatchingOptions{.max_events = 4096});
  std::vector<std::vector<uint8_t>> batches;
  int64_t total_bytes = 0;
  for (size_t i = 0; i < batched.num_batches(); ++i) {
    std::span<const uint8_t> out = batched.Encode(i);
    batches.emplace_back(out.begin(), out.end());
    total_bytes += static_cast<int64_t>(out.size());
  }
  for (auto _ : state) {
    for (const std::vector<uint8_t>& b : batches) {
      auto decoded = DecodeEventBatch(b);
      if (!decoded.ok()) {
        state.SkipWithError("decode failed");
        return;
      }
      benchmark::DoNotOptimize(decoded->trace.gpu.data());
    }
  }
  state.SetItemsProcessed(state.iterations() * batched.num_events());
  state.SetBytesProcessed(state.iterations() * total_bytes);
  state.SetLabel(state.range(0) == 0 ? "fleet" : "straggler");
}

BENCHMARK(BM_EncodeBatches)->ArgName("input")->Arg(0)->Arg(1);
BENCHMARK(BM_DecodeBatches)->ArgName("input")->Arg(0)->Arg(1);

}  // namespace
}  // namespace bubblewatch

BENCHMARK_MAIN();
