// Chrome-trace (Kineto JSON) conversion throughput: ReadChromeTrace on JSON
// already in memory (gunzip excluded), in bytes of JSON per second.
//   - Rank0: tests/testdata/real/hta/rank0.json.gz, 25.8 MB uncompressed.
//   - Synthetic: ~100 MB of Kineto-shaped events (cpu_op, cudaLaunchKernel,
//     kernels with their full args, ac2g flows, copies), decimal ts relative
//     to baseTimeNanoseconds, as newer PyTorch writes them.
// Target: >= 300 MB/s on one core.
//
//   build/ops/bench/chrome_reader_benchmark --benchmark_filter=ReadChrome
//
// And the whole file read as `bubblewatch analyze` does it (ReadTraceFile:
// streaming, gunzip on a second thread), on rank0.json.gz and on the same
// JSON uncompressed (written to $TMPDIR once):
//
//   build/ops/bench/chrome_reader_benchmark --benchmark_filter=ReadTraceFile
//
// Peak memory of the whole file read through ReadTraceFile (streaming: the
// file is never held whole), against the budget of 64 MiB + 160 bytes per
// kept event:
//
//   build/ops/bench/chrome_reader_benchmark
//   --peak_rss=tests/testdata/real/hta/mtia_rank_0.json.gz
//
// and for the synthetic trace, written to a file first:
//
//   build/ops/bench/chrome_reader_benchmark
//   --write_synthetic=/tmp/synthetic.json, then --peak_rss=/tmp/synthetic.json
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "benchmark/benchmark.h"
#include "ingest/chrome/chrome_trace_reader.h"
#include "ingest/trace_io/trace_file.h"
#include "ingest/trace_reader.h"

namespace bubblewatch {
namespace {

const simdjson::padded_string& Rank0Json() {
  static const simdjson::padded_string* json = [] {
    auto loaded = LoadTraceFile(
        absl::StrCat(BUBBLEWATCH_TESTDATA_DIR, "/real/hta/rank0.json.gz"));
    if (!loaded.ok()) {
      std::fprintf(stderr, "%s\n", loaded.status().ToString().c_str());
      std::exit(1);
    }
    return new simdjson::padded_string(std::move(*loaded));
  }();
  return *json;
}

// ~`target_bytes` of JSON shaped like a Kineto GPU trace: per step a cpu_op,
// its cudaLaunchKernel, the kernel, the launch flow pair, and every 16th step
// a memcpy with its cudaMemcpyAsync.
simdjson::padded_string MakeSyntheticTrace(size_t target_bytes) {
  static constexpr const char* kKernels[] = {
      "void at::native::vectorized_elementwise_kernel<4, "
      "at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >"
      "(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
      "ampere_sgemm_128x64_tn",
      "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
      "at::native::MeanOps<float, float, float, float>, unsigned int, float, "
      "4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, "
      "float, float>, unsigned int, float, 4>)",
      "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, "
      "ncclWork*)"};
  static constexpr const char* kOps[] = {"aten::add", "aten::mm", "aten::mean",
                                         "nccl:all_reduce"};
  std::string out;
  out.reserve(target_bytes + (1 << 20));
  out +=
      "{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [{\"id\": 0, "
      "\"name\": \"NVIDIA H100 80GB HBM3\"}],\n  \"distributedInfo\": "
      "{\"backend\": \"nccl\", \"rank\": 0, \"world_size\": 8},\n"
      "  \"traceEvents\": [\n";
  uint64_t ts_ns = 4458676388068751;  // Relative to baseTimeNanoseconds.
  int64_t correlation = 57532;
  bool first = true;
  for (int64_t step = 0; out.size() < target_bytes; ++step) {
    int k = static_cast<int>(step % 4);
    auto us = [](uint64_t ns) {
      return absl::StrFormat("%d.%03d", ns / 1000, ns % 1000);
    };
    if (!first) out += ",\n";
    first = false;
    absl::StrAppendFormat(
        &out,
        "  {\n    \"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"%s\", "
        "\"pid\": 2910249, \"tid\": 2919752,\n    \"ts\": %s, \"dur\": %s,\n"
        "    \"args\": {\n      \"External id\": %d,\"Record function id\": 0, "
        "\"Sequence number\": %d, \"Fwd thread id\": 1, \"Ev Idx\": %d\n"
        "    }\n  },\n",
        kOps[k], us(ts_ns), us(23417), step, step + 1080, step * 3);
    absl::StrAppendFormat(
        &out,
        "  {\n    \"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": "
        "\"cudaLaunchKernel\", \"pid\": 2910249, \"tid\": 2919752,\n"
        "    \"ts\": %s, \"dur\": %s,\n    \"args\": {\n      \"External "
        "id\": %d, \"cbid\": 211, \"correlation\": %d\n    }\n  },\n",
        us(ts_ns + 5310), us(7120), step, correlation);
    absl::StrAppendFormat(
        &out,
        "  {\n    \"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"%s\", "
        "\"pid\": 0, \"tid\": 7,\n    \"ts\": %s, \"dur\": %s,\n    \"args\": "
        "{\n      \"External id\": %d,\n      \"queued\": 0, \"device\": 0, "
        "\"context\": 1,\n      \"stream\": 7, \"correlation\": %d,\n      "
        "\"registers per thread\": 32,\n      \"shared memory\": 0,\n      "
        "\"blocks per SM\": 2.4,\n      \"warps per SM\": 19.2,\n      "
        "\"grid\": [264, 1, 1],\n      \"block\": [256, 1, 1],\n      "
        "\"est. achieved occupancy %%\": 30\n    }\n  },\n",
        kKernels[k], us(ts_ns + 14000), us(41407 + k * 977), step, correlation);
    absl::StrAppendFormat(
        &out,
        "  {\n    \"ph\": \"s\", \"id\": %d, \"pid\": 2910249, \"tid\": "
        "2919752, \"ts\": %s,\n    \"cat\": \"ac2g\", \"name\": \"ac2g\"\n  "
        "},\n  {\n    \"ph\": \"f\", \"id\": %d, \"pid\": 0, \"tid\": 7, "
        "\"ts\": %s,\n    \"cat\": \"ac2g\", \"name\": \"ac2g\", \"bp\": "
        "\"e\"\n  }",
        correlation, us(ts_ns + 5310), correlation, us(ts_ns + 14000));
    ++correlation;
    if (step % 16 == 15) {
      absl::StrAppendFormat(
          &out,
          ",\n  {\n    \"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": "
          "\"cudaMemcpyAsync\", \"pid\": 2910249, \"tid\": 2919752,\n    "
          "\"ts\": %s, \"dur\": %s,\n    \"args\": {\"External id\": %d, "
          "\"cbid\": 41, \"correlation\": %d}\n  },\n  {\n    \"ph\": \"X\", "
          "\"cat\": \"gpu_memcpy\", \"name\": \"Memcpy DtoH (Device -> "
          "Pageable)\", \"pid\": 0, \"tid\": 7,\n    \"ts\": %s, \"dur\": "
          "%s,\n    \"args\": {\"External id\": %d, \"device\": 0, "
          "\"context\": 1, \"stream\": 7, \"correlation\": %d, \"bytes\": "
          "4096, \"memory bandwidth (GB/s)\": 0.35}\n  }",
          us(ts_ns + 60000), us(12000), step, correlation, us(ts_ns + 61000),
          us(2011), step, correlation);
      ++correlation;
    }
    ts_ns += 70000;
  }
  out +=
      "\n  ],\n  \"traceName\": \"synthetic.json\",\n  \"displayTimeUnit\": "
      "\"ms\",\n  \"baseTimeNanoseconds\": 1711964646000000000\n}\n";
  return simdjson::padded_string(out);
}

const simdjson::padded_string& SyntheticJson() {
  static const simdjson::padded_string* json =
      new simdjson::padded_string(MakeSyntheticTrace(100 << 20));
  return *json;
}

void Run(benchmark::State& state, const simdjson::padded_string& json) {
  size_t events = 0;
  for (auto _ : state) {
    absl::StatusOr<Trace> trace = ReadChromeTrace(json);
    if (!trace.ok()) {
      state.SkipWithError(trace.status().ToString().c_str());
      return;
    }
    events = trace->gpu.size() + trace->cpu.size();
    benchmark::DoNotOptimize(trace->gpu.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(json.size()));
  state.counters["json_MB"] = static_cast<double>(json.size()) / 1e6;
  state.counters["kept_events"] = static_cast<double>(events);
}

void BM_ReadChromeTrace_Rank0(benchmark::State& state) {
  Run(state, Rank0Json());
}
BENCHMARK(BM_ReadChromeTrace_Rank0)->Unit(benchmark::kMillisecond);

void BM_ReadChromeTrace_Synthetic100MB(benchmark::State& state) {
  Run(state, SyntheticJson());
}
BENCHMARK(BM_ReadChromeTrace_Synthetic100MB)->Unit(benchmark::kMillisecond);

// state.range(0): parse threads beside the calling one (-1: auto).
void RunFile(benchmark::State& state, const std::string& path) {
  size_t events = 0;
  uint64_t json_bytes = 0;
  TraceReadOptions options;
  options.parse_threads = static_cast<int>(state.range(0));
  options.progress = [&](uint64_t done, uint64_t) { json_bytes = done; };
  for (auto _ : state) {
    absl::StatusOr<Trace> trace = ReadTraceFile(path, options);
    if (!trace.ok()) {
      state.SkipWithError(trace.status().ToString().c_str());
      return;
    }
    events = trace->gpu.size() + trace->cpu.size();
    benchmark::DoNotOptimize(trace->gpu.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(json_bytes));
  state.counters["json_MB"] = static_cast<double>(json_bytes) / 1e6;
  state.counters["kept_events"] = static_cast<double>(events);
}

void BM_ReadTraceFile_Rank0Gz(benchmark::State& state) {
  RunFile(state,
          absl::StrCat(BUBBLEWATCH_TESTDATA_DIR, "/real/hta/rank0.json.gz"));
}
BENCHMARK(BM_ReadTraceFile_Rank0Gz)
    ->ArgName("parse_threads")
    ->Arg(-1)
    ->Arg(0)
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime();  // Gunzip runs on a second thread.

void BM_ReadTraceFile_Rank0Plain(benchmark::State& state) {
  static const std::string* path = [] {
    const char* tmp = std::getenv("TMPDIR");
    auto* p = new std::string(
        absl::StrCat(tmp ? tmp : "/tmp", "/bubblewatch_bench_rank0.json"));
    const simdjson::padded_string& json = Rank0Json();
    FILE* f = std::fopen(p->c_str(), "wb");
    if (f == nullptr ||
        std::fwrite(json.data(), 1, json.size(), f) != json.size()) {
      std::fprintf(stderr, "cannot write %s\n", p->c_str());
      std::exit(1);
    }
    std::fclose(f);
    return p;
  }();
  RunFile(state, *path);
}
BENCHMARK(BM_ReadTraceFile_Rank0Plain)
    ->ArgName("parse_threads")
    ->Arg(-1)
    ->Arg(0)
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime();

// A line of /proc/self/status ("VmHWM", "VmRSS") in MiB; -1 if unknown.
double ProcStatusMiB(const char* field) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  double kib = -1;
  size_t n = std::strlen(field);
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, field, n) == 0 && line[n] == ':') {
      kib = std::strtod(line + n + 1, nullptr);
    }
  }
  std::fclose(f);
  return kib < 0 ? -1 : kib / 1024.0;
}

// Reads `path` once as `bubblewatch analyze` does and prints the peak RSS
// against the budget. Returns the exit status.
int MeasurePeakRss(const char* path) {
  double before = ProcStatusMiB("VmRSS");
  uint64_t json_bytes = 0;
  TraceReadOptions options;
  options.progress = [&](uint64_t done, uint64_t) { json_bytes = done; };
  absl::StatusOr<Trace> trace = ReadTraceFile(path, options);
  if (!trace.ok()) {
    std::fprintf(stderr, "%s\n", trace.status().ToString().c_str());
    return 1;
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  double peak = std::max(static_cast<double>(usage.ru_maxrss) / 1024.0,
                         ProcStatusMiB("VmHWM"));
  size_t events = trace->gpu.size() + trace->cpu.size();
  double size_mb = static_cast<double>(json_bytes) / (1 << 20);
  double budget = 64 + static_cast<double>(events) * 160 / (1 << 20);
  std::printf(
      "%s: %.1f MiB of JSON; %zu GPU + %zu CPU events kept\n"
      "  peak RSS %.1f MiB (%.1f MiB before reading); budget 64 + 160 B x "
      "%zu events = %.1f MiB\n",
      path, size_mb, trace->gpu.size(), trace->cpu.size(), peak, before, events,
      budget);
  return peak <= budget ? 0 : 2;
}

}  // namespace
}  // namespace bubblewatch

int main(int argc, char** argv) {
  constexpr const char kPeakFlag[] = "--peak_rss=";
  constexpr const char kWriteFlag[] = "--write_synthetic=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], kPeakFlag, sizeof(kPeakFlag) - 1) == 0) {
      return bubblewatch::MeasurePeakRss(argv[i] + sizeof(kPeakFlag) - 1);
    }
    if (std::strncmp(argv[i], kWriteFlag, sizeof(kWriteFlag) - 1) == 0) {
      // The synthetic trace as a file, e.g. for --peak_rss.
      const char* path = argv[i] + sizeof(kWriteFlag) - 1;
      simdjson::padded_string json = bubblewatch::MakeSyntheticTrace(100 << 20);
      FILE* f = std::fopen(path, "wb");
      if (f == nullptr ||
          std::fwrite(json.data(), 1, json.size(), f) != json.size()) {
        std::perror(path);
        return 1;
      }
      std::fclose(f);
      return 0;
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
