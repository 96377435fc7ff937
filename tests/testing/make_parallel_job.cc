// make_parallel_job: writes a synthetic TP×DP×PP job
// (ingest/synthetic/synthetic_parallel_job.h) to a directory, for live
// tests and demos of the multi-rank rules: one Kineto trace per rank,
// rank-N.json (or .json.gz with --gz), and truth.json.
//
//   build/tests/testing/make_parallel_job --out /tmp/job --tp 4 --dp 2
//       --root 5:3:2000:compute --host-names   (one command line)
//   build/bubblewatch analyze /tmp/job/rank-*.json
//
// Exit 0 on success, 2 on a bad flag, 1 when a file cannot be written.
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ingest/chrome/chrome_trace_writer.h"
#include "ingest/synthetic/synthetic_parallel_job.h"

namespace bubblewatch {
namespace {

constexpr char kUsage[] =
    "usage: make_parallel_job --out DIR [--tp N] [--dp N] [--pp N]\n"
    "  [--steps N] [--seed N] [--root RANK:STEP:EXTRA_US:CAUSE]...\n"
    "  [--host-names] [--world-size N] [--max-clock-offset-us N]\n"
    "  [--max-drift-ppm X] [--jitter-us N] [--job NAME] [--gz]\n"
    "CAUSE: compute, data_loading or host_sync.\n";

int Fail(const std::string& message) {
  std::fprintf(stderr, "make_parallel_job: %s\n%s", message.c_str(), kUsage);
  return 2;
}

int Run(int argc, char** argv) {
  ParallelJobOptions o;
  std::string out;
  bool gz = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--host-names") {
      o.host_names = true;
      continue;
    }
    if (flag == "--gz") {
      gz = true;
      continue;
    }
    if (flag == "-h" || flag == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) return Fail(absl::StrCat(flag, " needs a value"));
    const std::string value = argv[++i];
    auto integer = [&](auto* target) {
      int64_t v = 0;
      if (!absl::SimpleAtoi(value, &v)) return false;
      *target = static_cast<std::remove_pointer_t<decltype(target)>>(v);
      return true;
    };
    bool ok = true;
    if (flag == "--out") {
      out = value;
    } else if (flag == "--job") {
      o.job = value;
    } else if (flag == "--tp") {
      ok = integer(&o.tp) && o.tp >= 1;
    } else if (flag == "--dp") {
      ok = integer(&o.dp) && o.dp >= 1;
    } else if (flag == "--pp") {
      ok = integer(&o.pp) && o.pp >= 1;
    } else if (flag == "--steps") {
      ok = integer(&o.steps) && o.steps >= 1;
    } else if (flag == "--seed") {
      ok = integer(&o.seed);
    } else if (flag == "--world-size") {
      ok = integer(&o.world_size);
    } else if (flag == "--max-clock-offset-us") {
      ok = integer(&o.max_clock_offset_ns) && o.max_clock_offset_ns >= 0;
      o.max_clock_offset_ns *= 1000;
    } else if (flag == "--jitter-us") {
      ok = integer(&o.kernel_jitter_ns) && o.kernel_jitter_ns >= 0;
      o.kernel_jitter_ns *= 1000;
      o.loader_jitter_ns = o.kernel_jitter_ns;
    } else if (flag == "--max-drift-ppm") {
      ok = absl::SimpleAtod(value, &o.max_drift_ppm);
    } else if (flag == "--root") {
      std::vector<std::string> parts = absl::StrSplit(value, ':');
      PlantedRoot root;
      int64_t extra_us = 0;
      std::optional<StragglerCause> cause;
      ok = parts.size() == 4 && absl::SimpleAtoi(parts[0], &root.rank) &&
           absl::SimpleAtoi(parts[1], &root.step) &&
           absl::SimpleAtoi(parts[2], &extra_us) && extra_us >= 0 &&
           (cause = ParseStragglerCause(parts[3])).has_value();
      if (ok) {
        root.extra_ns = extra_us * 1000;
        root.cause = *cause;
        o.roots.push_back(root);
      }
    } else {
      return Fail(absl::StrCat("unknown flag ", flag));
    }
    if (!ok) return Fail(absl::StrCat("bad value for ", flag, ": ", value));
  }
  if (out.empty()) return Fail("--out is required");
  for (const PlantedRoot& root : o.roots) {
    if (root.rank < 0 || root.rank >= o.tp * o.dp * o.pp || root.step < 0 ||
        root.step >= o.steps) {
      return Fail(absl::StrCat("--root ", root.rank, ":", root.step,
                               " names no rank or step of the job"));
    }
  }
  mkdir(out.c_str(), 0755);  // An existing directory is fine.
  const ParallelJob job = MakeParallelJob(o);
  for (const Trace& trace : job.ranks) {
    const std::string path =
        absl::StrCat(out, "/rank-", trace.rank, gz ? ".json.gz" : ".json");
    if (absl::Status s = WriteChromeTraceFile(trace, path); !s.ok()) {
      std::fprintf(stderr, "make_parallel_job: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  const std::string truth_path = absl::StrCat(out, "/truth.json");
  FILE* f = std::fopen(truth_path.c_str(), "wb");
  const std::string truth = ParallelJobTruthJson(job.truth);
  if (f == nullptr ||
      std::fwrite(truth.data(), 1, truth.size(), f) != truth.size() ||
      std::fclose(f) != 0) {
    std::fprintf(stderr, "make_parallel_job: cannot write %s\n",
                 truth_path.c_str());
    return 1;
  }
  std::printf("%zu ranks, %zu collective instances, job %.3f ms -> %s\n",
              job.ranks.size(), job.truth.instances.size(),
              static_cast<double>(job.truth.job_ns) / 1e6, out.c_str());
  return 0;
}

}  // namespace
}  // namespace bubblewatch

int main(int argc, char** argv) { return bubblewatch::Run(argc, argv); }
