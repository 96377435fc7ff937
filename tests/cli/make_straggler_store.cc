// make_straggler_store: a window store holding one synthetic straggler job,
// made by the real pipeline without a broker: the synthetic fleet's
// straggler scenario (docs/produce.md, fixed seed) is produced to
// librdkafka's embedded mock cluster, as `bubblewatch demo` does, and the
// windowed processor consumes it into a RocksDB store with short windows, so
// that one window's per-rank timeline holds a few exact steps. For
// ops/dashboard_timeline_svg (the README's dashboard timeline picture), which
// serves the store with `bubblewatch serve --store`.
//
//   build/tests/cli/make_straggler_store --store DIR [--ranks 4]
//       [--duration-ms 600] [--window-ms 50] [--seed 3] [--job 0]
//       (one command line; --job I: job I of a fleet of I + 1)
//
// Prints one JSON line: the job, the window length, the late rank and when it
// was late (event time, ns). Exit 0 on success, 2 on a bad flag, 1 when the
// pipeline fails or loses events.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/logging.h"
#include "cli/embedded_pipeline.h"
#include "ingest/batched_trace.h"
#include "ingest/synthetic/synthetic_fleet.h"
#include "processor/stream_processor.h"
#include "storage/window_store.h"

namespace bubblewatch {
namespace {

constexpr char kUsage[] =
    "usage: make_straggler_store --store DIR [--ranks N] [--duration-ms MS]\n"
    "                            [--window-ms MS] [--seed N] [--job I]\n";

int Fail(absl::string_view message) {
  std::fprintf(stderr, "make_straggler_store: %s\n",
               std::string(message).c_str());
  return 1;
}

int Run(int argc, char** argv) {
  std::string store_path;
  int64_t ranks = 4, duration_ms = 600, window_ms = 50, seed = 3, job_index = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "make_straggler_store: %s needs a value\n%s",
                   flag.c_str(), kUsage);
      return 2;
    }
    const std::string value = argv[++i];
    int64_t* number = flag == "--ranks"         ? &ranks
                      : flag == "--duration-ms" ? &duration_ms
                      : flag == "--window-ms"   ? &window_ms
                      : flag == "--seed"        ? &seed
                      : flag == "--job"         ? &job_index
                                                : nullptr;
    if (flag == "--store") {
      store_path = value;
    } else if (number == nullptr || !absl::SimpleAtoi(value, number) ||
               *number < (number == &job_index ? 0 : 1)) {
      std::fprintf(stderr, "make_straggler_store: bad flag %s %s\n%s",
                   flag.c_str(), value.c_str(), kUsage);
      return 2;
    }
  }
  if (store_path.empty()) {
    std::fprintf(stderr, "make_straggler_store: --store is needed\n%s", kUsage);
    return 2;
  }
  if (absl::Status s = InitLogging("warn"); !s.ok()) return Fail(s.message());

  SyntheticFleetOptions fleet;
  // Job `job_index` of a fleet of job + 1 (its kind depends on its index,
  // docs/produce.md); only it is produced.
  fleet.jobs = static_cast<int>(job_index) + 1;
  fleet.gpus_per_job = static_cast<int>(ranks);
  fleet.duration = absl::Milliseconds(duration_ms);
  fleet.scenario = SyntheticScenario::kStraggler;
  fleet.seed = static_cast<uint64_t>(seed);
  absl::StatusOr<std::vector<SyntheticJob>> jobs =
      GenerateSyntheticFleet(fleet);
  if (!jobs.ok()) return Fail(jobs.status().message());
  if (jobs->size() != static_cast<size_t>(fleet.jobs) ||
      !jobs->back().straggler.has_value()) {
    return Fail("the straggler scenario gave no straggler job");
  }
  SyntheticJob& job = jobs->back();
  const StragglerTruth truth = *job.straggler;
  std::vector<std::unique_ptr<BatchedTrace>> streams;
  for (Trace& rank : job.ranks) {
    const BatchHeader identity = TraceIdentity(rank);
    streams.push_back(std::make_unique<BatchedTrace>(std::move(rank), identity,
                                                     BatchingOptions{}));
  }

  // As `bubblewatch demo` runs (cli/embedded_pipeline.h).
  absl::StatusOr<EmbeddedPipeline> pipeline = StartEmbeddedPipeline(4);
  if (!pipeline.ok()) return Fail(pipeline.status().message());
  absl::StatusOr<ProducerStats> produced =
      ProduceToEmbeddedPipeline(*pipeline, streams);
  if (!produced.ok()) return Fail(produced.status().message());
  const int64_t acked = produced->events_acked;
  {
    absl::StatusOr<std::unique_ptr<WindowStore>> store =
        OpenRocksDbWindowStore(store_path);
    if (!store.ok()) return Fail(store.status().message());
    StreamProcessorOptions options = EmbeddedProcessorOptions(*pipeline);
    options.windower.window_ns = window_ms * 1'000'000;
    // As the demo: the mock cluster serves fetches slowly; the job is
    // closed by its idle timeout, the processor exits when all is read.
    options.idle_timeout = absl::Seconds(5);
    options.exit_when_idle = absl::Seconds(7);
    absl::StatusOr<std::unique_ptr<StreamProcessor>> processor =
        StreamProcessor::Create(options, store->get());
    if (!processor.ok()) return Fail(processor.status().message());
    if (absl::Status s = (*processor)->Run(); !s.ok()) {
      return Fail(s.message());
    }
    const ProcessorStats stats = (*processor)->stats();
    if (stats.events != acked) {
      return Fail(absl::StrCat("processed ", stats.events, " of ", acked,
                               " acknowledged events"));
    }
  }
  std::printf(
      "{\"job\":\"%s\",\"window_ns\":%lld,\"late_rank\":%d,"
      "\"late_start_ns\":%lld,\"late_end_ns\":%lld}\n",
      job.job.c_str(), static_cast<long long>(window_ms * 1'000'000),
      truth.late_rank, static_cast<long long>(truth.late_start_ns),
      static_cast<long long>(truth.late_end_ns));
  return 0;
}

}  // namespace
}  // namespace bubblewatch

int main(int argc, char** argv) { return bubblewatch::Run(argc, argv); }
