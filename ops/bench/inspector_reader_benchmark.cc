// NCCL Inspector log reader throughput (ingest/inspector/inspector_log.h):
// records per second on one core, from a generated TP × DP job's logs
// (ingest/synthetic/synthetic_inspector_job.h) held in memory, in the
// plugin's forms: v4.3 (a dump marker, then bare records) and v4.2 (every
// record with its header and metadata, ~600 bytes), plain and verbose
// (event_trace_sn / event_trace_ts with two channels, ~1 KB); and the
// whole file read from disk (ReadInspectorLog: 1 MiB buffers).
// Target: >= 1 M records/s per core.
//
//   build/ops/bench/inspector_reader_benchmark
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "ingest/inspector/inspector_log.h"
#include "ingest/synthetic/synthetic_inspector_job.h"

namespace bubblewatch {
namespace {

// One process's log of a 2 × 2 job: 3,000 steps, 9,001 records.
std::string Log(const std::string& version, bool verbose) {
  InspectorJobSpec spec;
  spec.steps = 3000;
  spec.version = version;
  spec.verbose = verbose;
  spec.dump_every_steps = 50;
  return GenerateInspectorJob(spec).files[0].text;
}

void BM_ParseInspectorLog(benchmark::State& state, const std::string& version,
                          bool verbose) {
  const std::string text = Log(version, verbose);
  int64_t records = 0;
  for (auto _ : state) {
    InspectorLog log = ParseInspectorLog(text);
    records += log.coll_records;
    if (!log.skipped.empty() || log.coll_records == 0) {
      state.SkipWithError("the log did not read cleanly");
      break;
    }
    benchmark::DoNotOptimize(log.ops.data());
  }
  state.SetItemsProcessed(records);
  state.SetBytesProcessed(state.iterations() * text.size());
  state.counters["bytes_per_record"] =
      static_cast<double>(text.size()) /
      static_cast<double>(ParseInspectorLog(text).coll_records);
}
BENCHMARK_CAPTURE(BM_ParseInspectorLog, v4_3_plain, std::string("v4.3"), false)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ParseInspectorLog, v4_3_verbose, std::string("v4.3"), true)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ParseInspectorLog, v4_2_plain, std::string("v4.2"), false)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ParseInspectorLog, v4_2_verbose, std::string("v4.2"), true)
    ->Unit(benchmark::kMillisecond);

void BM_ReadInspectorLogFile(benchmark::State& state) {
  const std::string text = Log("v4.2", false);
  const std::string path =
      absl::StrCat(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp",
                   "/inspector_bench-pid1.log");
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr ||
      std::fwrite(text.data(), 1, text.size(), f) != text.size()) {
    state.SkipWithError("cannot write the log");
    return;
  }
  std::fclose(f);
  int64_t records = 0;
  for (auto _ : state) {
    absl::StatusOr<InspectorLog> log = ReadInspectorLog(path);
    if (!log.ok()) {
      state.SkipWithError(log.status().ToString().c_str());
      break;
    }
    records += log->coll_records;
  }
  state.SetItemsProcessed(records);
  state.SetBytesProcessed(state.iterations() * text.size());
  std::remove(path.c_str());
}
BENCHMARK(BM_ReadInspectorLogFile)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace bubblewatch

BENCHMARK_MAIN();
