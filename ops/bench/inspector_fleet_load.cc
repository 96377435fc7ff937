// Loads a topic with what `produce --watch` sends for a fleet's NCCL
// Inspector logs (docs/semantics.md#live-inspector-logs), for
// ops/bench/inspector_fleet_bench: JOBS synthetic TP x DP jobs
// (ingest/synthetic/synthetic_inspector_job.h, verbose), each process's log
// cut into DUMPS chunks as its dumps would arrive, each chunk turned into
// EventBatches by the watcher's own code (BuildInspectorChunk), and sent
// dump by dump across the fleet (every process's first dump, then every
// second, ...), as the fleet's watchers would.
//
// usage: inspector_fleet_load BROKERS TOPIC JOBS TP DP SECONDS DUMPS
// Prints: gpus, records, kernels, event-time seconds, collectives/s per GPU.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ingest/batched_trace.h"
#include "ingest/event_producer.h"
#include "ingest/synthetic/synthetic_inspector_job.h"
#include "ingest/watch/inspector_tailer.h"
#include "kafka/kafka_config.h"
#include "schemas/event_batch_codec.h"

namespace bubblewatch {
namespace {

int Main(int argc, char** argv) {
  if (argc != 8) {
    std::cerr << "usage: inspector_fleet_load BROKERS TOPIC JOBS TP DP "
                 "SECONDS DUMPS\n";
    return 2;
  }
  const std::string brokers = argv[1];
  const std::string topic = argv[2];
  const int jobs = std::atoi(argv[3]);
  const int tp = std::atoi(argv[4]);
  const int dp = std::atoi(argv[5]);
  const double seconds = std::atof(argv[6]);
  const int dumps = std::atoi(argv[7]);

  // A step: tp_per_step x (compute + all-gather) + DP compute + all-reduce,
  // three collectives; 27.1 ms without the plant, so ~110 collectives/s.
  InspectorJobSpec spec;
  spec.tp = tp;
  spec.dp = dp;
  spec.procs_per_host = 8;
  spec.compute_us = 12'000;
  spec.plant_until_step = 20;
  spec.steps = static_cast<int>(seconds * 1e6 / 27'100);
  spec.dump_every_steps = std::max(1, spec.steps / dumps);

  // messages[dump][job * procs + process]: encoded batches.
  std::vector<std::vector<std::vector<std::string>>> messages(dumps);
  int64_t records = 0, kernels = 0, first_ns = INT64_MAX, last_ns = INT64_MIN;
  int procs = 0;
  BatchingOptions batching;
  for (int j = 0; j < jobs; ++j) {
    spec.seed = 1 + j;
    spec.plant = j % (tp * dp);
    const InspectorJobLogs gen = GenerateInspectorJob(spec);
    procs = static_cast<int>(gen.files.size());
    for (int p = 0; p < procs; ++p) {
      const InspectorJobFile& f = gen.files[p];
      std::vector<absl::string_view> lines = absl::StrSplit(f.text, '\n');
      if (!lines.empty() && lines.back().empty()) lines.pop_back();
      TailedLog state;
      state.name = f.name;
      uint64_t sequence = 0;
      for (int d = 0; d < dumps; ++d) {
        const size_t from = lines.size() * d / dumps;
        const size_t to = lines.size() * (d + 1) / dumps;
        std::string bytes;
        for (size_t i = from; i < to; ++i)
          absl::StrAppend(&bytes, lines[i], "\n");
        InspectorChunk chunk = BuildInspectorChunk(bytes, f.name, state);
        state = chunk.after;
        records += chunk.records;
        std::vector<std::string>& out = messages[d].emplace_back();
        if (chunk.trace.gpu.empty()) continue;
        for (const GpuActivity& a : chunk.trace.gpu) {
          first_ns = std::min(first_ns, a.start_ns);
          last_ns = std::max(last_ns, a.end_ns);
        }
        kernels += static_cast<int64_t>(chunk.trace.gpu.size());
        BatchHeader identity;
        identity.job = absl::StrCat("inspector-fleet-", j);
        identity.host = state.host;
        identity.rank = state.rank;
        identity.world_size = state.world_size;
        identity.producer_id = 1000 * (j + 1) + p + 1;
        BatchedTrace stream(std::move(chunk.trace), identity, batching);
        EventBatchEncoder encoder(&stream.trace());
        for (size_t i = 0; i < stream.num_batches(); ++i) {
          const BatchSlice& s = stream.batch(i);
          BatchHeader header = stream.header();
          header.observation.reset();
          header.sequence = sequence++;
          auto bytes_out =
              encoder.Encode(header, s.gpu_begin, s.gpu_end, s.cpu_begin,
                             s.cpu_end, s.collectives_begin, s.collectives_end);
          out.emplace_back(reinterpret_cast<const char*>(bytes_out.data()),
                           bytes_out.size());
        }
      }
    }
  }

  EventProducerOptions options;
  options.topic = topic;
  auto producer = EventProducer::Create(KafkaConfig(brokers), options);
  if (!producer.ok()) {
    std::cerr << producer.status() << "\n";
    return 1;
  }
  if (auto s = (*producer)->WaitUntilReachable(absl::Seconds(30)); !s.ok()) {
    std::cerr << s << "\n";
    return 1;
  }
  for (int d = 0; d < dumps; ++d) {
    for (size_t k = 0; k < messages[d].size(); ++k) {
      const std::string key = absl::StrCat("inspector-fleet-", k / procs);
      for (const std::string& m : messages[d][k]) {
        auto s = (*producer)->Send(
            key,
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(m.data()),
                                     m.size()),
            0);
        if (!s.ok()) {
          std::cerr << s << "\n";
          return 1;
        }
      }
    }
  }
  if (auto s = (*producer)->Flush(absl::Seconds(120)); !s.ok()) {
    std::cerr << s << "\n";
    return 1;
  }
  const double span_s = (last_ns - first_ns) / 1e9;
  const int gpus = jobs * procs;
  std::printf(
      "gpus %d records %lld kernels %lld event_time_s %.2f "
      "collectives_per_s_per_gpu %.1f\n",
      gpus, static_cast<long long>(records), static_cast<long long>(kernels),
      span_s, records / span_s / gpus);
  return 0;
}

}  // namespace
}  // namespace bubblewatch

int main(int argc, char** argv) { return bubblewatch::Main(argc, argv); }
