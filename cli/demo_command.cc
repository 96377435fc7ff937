// `bubblewatch demo`: the whole pipeline in one process, on librdkafka's
// embedded mock cluster: a synthetic fleet with planted bubbles is produced,
// the windowed processor consumes it into a temporary RocksDB store, and the
// worst jobs are printed with their dominant cause and advice. On-call rules
// (kDemoRules) run inside the processor; a job whose host-sync stall ends
// half-way shows an alert firing and then resolving.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "alerts/alert_hook.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/embedded_pipeline.h"
#include "cli/exit_codes.h"
#include "ingest/batched_trace.h"
#include "ingest/event_producer.h"
#include "ingest/synthetic/synthetic_fleet.h"
#include "processor/stream_processor.h"
#include "storage/window_store.h"

namespace bubblewatch {
namespace {

int Fail(absl::string_view message) {
  std::cerr << "bubblewatch demo: " << message << "\n";
  return kExitFailure;
}

// The demo's on-call rules (the syntax of ops/alerts/rules.example.yaml).
constexpr char kDemoRules[] = R"(rules:
  - name: host-sync-stall
    kind: cause_share_above
    cause: host_sync
    threshold: 10%
    for: 1
    clear_for: 2
    severity: critical
)";

// A job that stalls on host syncs for `stall` and then trains cleanly for
// `healthy`: its alert fires and resolves.
absl::StatusOr<std::vector<SyntheticJob>> StallThenRecover(
    const SyntheticFleetOptions& base, absl::Duration stall,
    absl::Duration healthy) {
  SyntheticFleetOptions o = base;
  o.jobs = 1;
  // A third of the fleet's rate: the mock cluster keeps a bounded log.
  o.events_per_second_per_gpu = base.events_per_second_per_gpu / 3;
  o.job_prefix = "stall-then-ok";
  o.scenario = SyntheticScenario::kSync;
  o.duration = stall;
  ASSIGN_OR_RETURN(std::vector<SyntheticJob> jobs, GenerateSyntheticFleet(o));
  o.scenario = SyntheticScenario::kHealthy;
  o.duration = healthy;
  o.start_time_ns += absl::ToInt64Nanoseconds(stall);
  o.seed += 1;
  ASSIGN_OR_RETURN(std::vector<SyntheticJob> after, GenerateSyntheticFleet(o));
  jobs.push_back(std::move(after.front()));
  return jobs;
}

struct JobTotals {
  std::string job;
  std::string planted;
  UtilizationStats stats;
  int64_t windows = 0;
};

}  // namespace

// librdkafka's mock cluster keeps at most 5 MiB per partition and drops the
// oldest message sets beyond it. With enough partitions every job's stream
// (keyed by job) stays far below that, so nothing produced is lost.
constexpr int kDemoPartitions = 64;

int RunDemoCommand(int argc, char** argv) {
  SyntheticFleetOptions fleet;
  fleet.jobs = 7;  // The six scenarios of kMix and one that recovers.
  fleet.gpus_per_job = 2;
  fleet.duration = absl::Seconds(40);
  fleet.events_per_second_per_gpu = 1500;
  std::string store_path;
  std::string log_level = "warn";
  CommandLine cl(
      "bubblewatch demo [options]",
      "Runs the whole pipeline in one process on librdkafka's embedded mock "
      "Kafka cluster: produces a\nsynthetic fleet whose jobs each have one "
      "kind of planted bubble, processes it into per-job\nwindows in a "
      "RocksDB store, and prints the jobs that waste the most GPU time.");
  cl.AddInt("jobs", &fleet.jobs, "N", "synthetic jobs");
  cl.AddInt("gpus-per-job", &fleet.gpus_per_job, "G", "GPUs per job");
  cl.AddDuration("duration", &fleet.duration, "DURATION", "event time per job");
  cl.AddString("store", &store_path, "DIR",
               "keep the store here (default: a temporary directory, removed "
               "after)");
  cl.AddString("log-level", &log_level, "LEVEL", "processor log level");
  std::vector<std::string> positional;
  if (absl::Status s = cl.Parse(argc, argv, &positional);
      !s.ok() || !positional.empty()) {
    std::cerr << "bubblewatch demo: "
              << (s.ok() ? "unexpected argument" : s.message())
              << "\nTry 'bubblewatch demo --help'.\n";
    return kExitUsage;
  }
  if (cl.help_requested()) {
    std::cout << cl.Help();
    return kExitOk;
  }
  if (absl::Status s = InitLogging(log_level); !s.ok())
    return Fail(s.message());
  bool temporary = store_path.empty();
  if (temporary) {
    store_path = absl::StrCat(std::filesystem::temp_directory_path().string(),
                              "/bubblewatch-demo-", getpid());
  }

  // With two jobs or more, the last one stalls on host syncs and recovers,
  // so that the demo's alert fires and resolves.
  const bool with_recovering_job = fleet.jobs >= 2;
  if (with_recovering_job) --fleet.jobs;
  std::cout << "1. generating " << fleet.jobs << " synthetic jobs x "
            << fleet.gpus_per_job << " GPUs x "
            << absl::FormatDuration(fleet.duration)
            << " with planted bubbles\n";
  absl::StatusOr<std::vector<SyntheticJob>> jobs =
      GenerateSyntheticFleet(fleet);
  if (!jobs.ok()) return Fail(jobs.status().message());
  if (with_recovering_job) {
    absl::StatusOr<std::vector<SyntheticJob>> recovering =
        StallThenRecover(fleet, absl::Seconds(20), absl::Seconds(40));
    if (!recovering.ok()) return Fail(recovering.status().message());
    std::cout << "   and job stall-then-ok-000: host syncs for 20 s, then "
                 "40 s of clean steps\n";
    for (SyntheticJob& j : *recovering) jobs->push_back(std::move(j));
  }
  absl::flat_hash_map<std::string, std::string> planted;
  std::vector<std::unique_ptr<BatchedTrace>> streams;
  for (SyntheticJob& j : *jobs) {
    planted[j.job] = planted.contains(j.job)
                         ? "sync->ok"
                         : std::string(SyntheticScenarioName(j.scenario));
    for (Trace& rank : j.ranks) {
      const BatchHeader identity = TraceIdentity(rank);
      streams.push_back(std::make_unique<BatchedTrace>(
          std::move(rank), identity, BatchingOptions{}));
    }
  }

  absl::StatusOr<EmbeddedPipeline> pipeline =
      StartEmbeddedPipeline(kDemoPartitions);
  if (!pipeline.ok()) return Fail(pipeline.status().message());
  std::cout << "2. producing to the embedded Kafka cluster at "
            << pipeline->cluster->bootstrap_servers() << "\n";
  int64_t events_acked = 0;
  {
    absl::StatusOr<ProducerStats> produced =
        ProduceToEmbeddedPipeline(*pipeline, streams);
    if (!produced.ok()) return Fail(produced.status().message());
    const ProducerStats& stats = *produced;
    events_acked = stats.events_acked;
    std::cout << "   " << stats.events_acked << " events in "
              << stats.batches_acked << " batches acknowledged\n";
  }

  std::cout << "3. processing into the window store " << store_path
            << ", with on-call rules:\n"
            << kDemoRules;
  std::vector<AlertEvent> alerts;
  {
    absl::StatusOr<std::unique_ptr<WindowStore>> store =
        OpenRocksDbWindowStore(store_path);
    if (!store.ok()) return Fail(store.status().message());
    StreamProcessorOptions options = EmbeddedProcessorOptions(*pipeline);
    // The mock cluster serves fetches slowly and unevenly across
    // partitions; give jobs time before calling them idle.
    options.idle_timeout = absl::Seconds(6);
    options.exit_when_idle = absl::Seconds(8);
    absl::StatusOr<AlertRuleSet> rules =
        ParseAlertRules(kDemoRules, "demo rules");
    if (!rules.ok()) return Fail(rules.status().message());
    AlertHookOptions alert_options;
    alert_options.brokers = options.brokers;
    alert_options.on_event = [&alerts](const AlertEvent& e) {
      alerts.push_back(e);
    };
    absl::StatusOr<std::unique_ptr<AlertHook>> hook = AlertHook::Create(
        std::move(alert_options), *std::move(rules), store->get(), nullptr);
    if (!hook.ok()) return Fail(hook.status().message());
    options.observer = hook->get();
    absl::StatusOr<std::unique_ptr<StreamProcessor>> processor =
        StreamProcessor::Create(options, store->get());
    if (!processor.ok()) return Fail(processor.status().message());
    if (absl::Status s = (*processor)->Run(); !s.ok()) return Fail(s.message());
    ProcessorStats stats = (*processor)->stats();
    std::cout << "   " << stats.events << " events -> " << stats.windows_written
              << " windows of 10 s\n";
    // Every acknowledged event must come out the other end; the demo says
    // so loudly rather than print a ranking built on part of the fleet.
    if (stats.events != events_acked) {
      return Fail(absl::StrCat("processed ", stats.events, " of ", events_acked,
                               " acknowledged events: the embedded cluster "
                               "keeps at most 5 MiB per partition; try fewer "
                               "--jobs or a shorter --duration"));
    }
  }

  absl::StatusOr<std::unique_ptr<WindowStoreReader>> reader =
      OpenRocksDbWindowStoreReadOnly(store_path);
  if (!reader.ok()) return Fail(reader.status().message());
  absl::StatusOr<std::vector<JobInfo>> known = (*reader)->ListJobs();
  if (!known.ok()) return Fail(known.status().message());
  std::vector<JobTotals> totals;
  for (const JobInfo& info : *known) {
    absl::StatusOr<std::vector<WindowSummary>> windows =
        (*reader)->Scan(info.job, absl::InfinitePast(), absl::InfiniteFuture());
    if (!windows.ok()) return Fail(windows.status().message());
    JobTotals t{.job = info.job, .planted = planted[info.job]};
    for (const WindowSummary& w : *windows) {
      t.stats.span_ns += w.window.job.span_ns;
      t.stats.compute_ns += w.window.job.compute_ns;
      t.stats.bubble_ns += w.window.job.bubble_ns;
      for (int c = 0; c < kNumBubbleCauses; ++c) {
        t.stats.attribution[c] += w.window.job.attribution[c];
      }
      ++t.windows;
    }
    totals.push_back(std::move(t));
  }
  std::sort(totals.begin(), totals.end(), [](const auto& a, const auto& b) {
    return a.stats.bubble_ratio() > b.stats.bubble_ratio();
  });
  std::cout << "\n4. the jobs that waste the most GPU time (from the store)\n";
  std::cout << absl::StrFormat("   %-20s %-11s %8s %8s %7s  %-16s %s\n", "job",
                               "planted", "windows", "util", "bubble",
                               "dominant cause", "share");
  for (const JobTotals& t : totals) {
    std::optional<BubbleCause> dominant = DominantCause(t.stats.attribution);
    double share = dominant && t.stats.bubble_ns > 0
                       ? static_cast<double>(
                             t.stats.attribution[static_cast<int>(*dominant)]) /
                             t.stats.bubble_ns
                       : 0.0;
    std::cout << absl::StrFormat(
        "   %-20s %-11s %8d %7.1f%% %6.1f%%  %-16s %5.1f%%\n", t.job, t.planted,
        t.windows, 100 * t.stats.utilization(), 100 * t.stats.bubble_ratio(),
        dominant ? BubbleCauseName(*dominant) : "-", 100 * share);
  }
  if (!totals.empty()) {
    if (auto dominant = DominantCause(totals.front().stats.attribution)) {
      std::cout << "\n   " << totals.front().job << ": "
                << BubbleCauseAdvice(*dominant) << "\n";
    }
  }
  std::cout << "\n5. alerts (published to bubblewatch.alerts; with "
               "--alertmanager they page), in order\n";
  for (const AlertEvent& e : alerts) {
    std::cout << absl::StrFormat(
        "   window %s  %s\n",
        absl::FormatTime("%H:%M:%S", absl::FromUnixNanos(e.window_start_ns),
                         absl::UTCTimeZone()),
        DescribeAlertEvent(e));
  }
  reader->reset();
  if (temporary) std::filesystem::remove_all(store_path);
  return kExitOk;
}

}  // namespace bubblewatch
