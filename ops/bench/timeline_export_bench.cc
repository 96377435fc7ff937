// timeline_export_bench: how fast `analyze --timeline` writes a job's
// timeline (cli/timeline_export.h), and how much memory the writing adds,
// for a synthetic TP=8 job of N ranks (ingest/synthetic/
// synthetic_parallel_job.h) written as Kineto JSON files, read back and
// analyzed, as `analyze` has it when it starts the export: the export
// reads the files again to pass their events through
// (cli/chrome_passthrough.h). --inputs memory exports the job as generated
// instead (no files: the events written from the Trace).
//
//   build/ops/bench/timeline_export_bench --ranks 64 --steps 400
//       [--out PATH]   (default /tmp/timeline_export_bench.json.gz)
//       [--inputs json|json.gz|memory]  (default json: plain files, as
//                                        torch.profiler writes them)
//
// Prints one JSON object: the uncompressed JSON bytes written, the file's
// size, the export's wall time and MB/s of uncompressed JSON (10^6 bytes),
// the same per second of the process's CPU time (what a loaded machine
// does not change),
// the process's resident set before the export and the peak during it
// (VmHWM, reset just before the export through /proc/self/clear_refs), and
// their difference: what the export itself adds. Run one size per process
// (ops/bench/timeline_export_bench.sh runs 16 and 64 ranks).
#include <sys/resource.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "analysis/collectives.h"
#include "cli/timeline_export.h"
#include "ingest/chrome/chrome_trace_writer.h"
#include "ingest/synthetic/synthetic_parallel_job.h"
#include "ingest/trace_reader.h"

namespace bubblewatch {
namespace {

// A field of /proc/self/status in kB, or -1.
int64_t StatusKb(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) != 0) continue;
    int64_t kb = -1;
    std::string digits;
    for (char c : line) {
      if (c >= '0' && c <= '9') digits += c;
    }
    if (!absl::SimpleAtoi(digits, &kb)) return -1;
    return kb;
  }
  return -1;
}

// The process's CPU time (user + system) in seconds.
double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

int Run(int argc, char** argv) {
  int ranks = 64;
  int steps = 400;
  std::string out = "/tmp/timeline_export_bench.json.gz";
  std::string inputs = "json";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--ranks") {
      if (!absl::SimpleAtoi(value, &ranks) || ranks < 8 || ranks % 8 != 0) {
        std::cerr << "--ranks: a multiple of 8\n";
        return 2;
      }
    } else if (flag == "--steps") {
      if (!absl::SimpleAtoi(value, &steps) || steps < 1) return 2;
    } else if (flag == "--out") {
      out = value;
    } else if (flag == "--inputs") {
      if (value != "json" && value != "json.gz" && value != "memory") {
        std::cerr << "--inputs: json, json.gz or memory\n";
        return 2;
      }
      inputs = value;
    } else {
      std::cerr << "usage: timeline_export_bench [--ranks N] [--steps N] "
                   "[--out PATH] [--inputs json|json.gz|memory]\n";
      return 2;
    }
  }
  ParallelJobOptions o;
  o.tp = 8;
  o.dp = ranks / 8;
  o.steps = steps;
  o.host_names = true;
  o.max_drift_ppm = 20;
  o.roots = {{3, steps / 2, 2'000'000, StragglerCause::kCompute}};
  const absl::Time g0 = absl::Now();
  ParallelJob job = MakeParallelJob(o);
  std::vector<std::string> files;
  uint64_t input_bytes = 0;
  const std::string dir = out + ".inputs";
  if (inputs != "memory") std::filesystem::create_directories(dir);
  for (Trace& t : job.ranks) {
    if (inputs == "memory") {
      files.push_back(absl::StrCat("rank-", t.rank, ".json"));
      continue;
    }
    files.push_back(absl::StrCat(dir, "/rank-", t.rank, ".", inputs));
    if (absl::Status w = WriteChromeTraceFile(t, files.back()); !w.ok()) {
      std::cerr << w << "\n";
      return 1;
    }
    input_bytes += std::filesystem::file_size(files.back());
    absl::StatusOr<Trace> read = ReadTraceFile(files.back());
    if (!read.ok()) {
      std::cerr << read.status() << "\n";
      return 1;
    }
    t = *std::move(read);
  }
  CollectiveOptions c;
  c.keep_instances = true;
  absl::StatusOr<CollectiveAnalysis> analysis =
      AnalyzeCollectives(RanksOfTraces(job.ranks, files), c, {});
  if (!analysis.ok()) {
    std::cerr << analysis.status() << "\n";
    return 1;
  }
  const double prepare_s = absl::ToDoubleSeconds(absl::Now() - g0);
  int64_t events = 0;
  for (const Trace& t : job.ranks) {
    events += static_cast<int64_t>(t.gpu.size() + t.cpu.size());
  }

  const int64_t rss_before_kb = StatusKb("VmRSS");
  {
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";  // Resets VmHWM to the current RSS.
  }
  const double cpu0 = CpuSeconds();
  const absl::Time t0 = absl::Now();
  absl::StatusOr<TimelineExportStats> stats =
      WriteTimelineExport(job.ranks, files, &*analysis, {}, out);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - t0);
  const double cpu_seconds = CpuSeconds() - cpu0;
  const int64_t peak_kb = StatusKb("VmHWM");
  if (!stats.ok()) {
    std::cerr << stats.status() << "\n";
    return 1;
  }
  std::ifstream f(out, std::ios::binary | std::ios::ate);
  const int64_t file_bytes = static_cast<int64_t>(f.tellg());
  if (inputs != "memory") std::filesystem::remove_all(dir);
  std::cout << absl::StrFormat(
      "{\"ranks\": %d, \"steps\": %d, \"inputs\": \"%s\", "
      "\"input_bytes\": %d, \"input_events\": %d, "
      "\"instances\": %d, \"prepare_s\": %.3f, \"out\": \"%s\", "
      "\"json_bytes\": %d, \"file_bytes\": %d, \"events_written\": %d, "
      "\"export_s\": %.3f, \"mb_per_s\": %.1f, \"export_cpu_s\": %.3f, "
      "\"mb_per_cpu_s\": %.1f, \"rss_before_mib\": %.1f, "
      "\"peak_mib\": %.1f, \"export_added_mib\": %.1f}\n",
      ranks, steps, inputs, input_bytes, events, analysis->instances.size(),
      prepare_s, out, stats->bytes, file_bytes, stats->events, seconds,
      static_cast<double>(stats->bytes) / 1e6 / seconds, cpu_seconds,
      static_cast<double>(stats->bytes) / 1e6 / cpu_seconds,
      rss_before_kb / 1024.0, peak_kb / 1024.0,
      (peak_kb - rss_before_kb) / 1024.0);
  return 0;
}

}  // namespace
}  // namespace bubblewatch

int main(int argc, char** argv) { return bubblewatch::Run(argc, argv); }
