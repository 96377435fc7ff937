// `bubblewatch demo`: the whole pipeline in one process, on librdkafka's
// embedded mock cluster: a synthetic fleet with planted bubbles is produced,
// the windowed processor consumes it into a temporary RocksDB store, and the
// worst jobs are printed with their dominant cause and advice.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/logging.h"
#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "ingest/batched_trace.h"
#include "ingest/event_producer.h"
#include "ingest/synthetic_fleet.h"
#include "ingest/trace_replay.h"
#include "kafka/embedded_kafka_cluster.h"
#include "processor/stream_processor.h"
#include "storage/window_store.h"

namespace bubblewatch {
namespace {

int Fail(absl::string_view message) {
  std::cerr << "bubblewatch demo: " << message << "\n";
  return kExitFailure;
}

struct JobTotals {
  std::string job;
  std::string planted;
  UtilizationStats stats;
  int64_t windows = 0;
};

}  // namespace

int RunDemoCommand(int argc, char** argv) {
  SyntheticFleetOptions fleet;
  fleet.jobs = 6;
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

  std::cout << "1. generating " << fleet.jobs << " synthetic jobs x "
            << fleet.gpus_per_job << " GPUs x "
            << absl::FormatDuration(fleet.duration)
            << " with planted bubbles\n";
  absl::StatusOr<std::vector<SyntheticJob>> jobs =
      GenerateSyntheticFleet(fleet);
  if (!jobs.ok()) return Fail(jobs.status().message());
  absl::flat_hash_map<std::string, std::string> planted;
  std::vector<std::unique_ptr<BatchedTrace>> streams;
  for (SyntheticJob& j : *jobs) {
    planted[j.job] = std::string(SyntheticScenarioName(j.scenario));
    for (Trace& rank : j.ranks) {
      BatchHeader identity{.job = rank.job,
                           .host = rank.host,
                           .rank = rank.rank,
                           .world_size = rank.world_size};
      streams.push_back(std::make_unique<BatchedTrace>(
          std::move(rank), identity, BatchingOptions{}));
    }
  }

  absl::StatusOr<std::unique_ptr<EmbeddedKafkaCluster>> cluster =
      EmbeddedKafkaCluster::Create();
  if (!cluster.ok()) return Fail(cluster.status().message());
  const std::string topic = "bubblewatch.events";
  // The mock cluster has no CreateTopics API: the processor's state
  // changelog is created here, as an operator would.
  if (absl::Status s = (*cluster)->CreateTopic(topic, 4); !s.ok()) {
    return Fail(s.message());
  }
  if (absl::Status s =
          (*cluster)->CreateTopic(StreamProcessorOptions().state_topic, 4);
      !s.ok()) {
    return Fail(s.message());
  }
  std::cout << "2. producing to the embedded Kafka cluster at "
            << (*cluster)->bootstrap_servers() << "\n";
  {
    absl::StatusOr<std::unique_ptr<EventProducer>> producer =
        EventProducer::Create(KafkaConfig((*cluster)->bootstrap_servers()),
                              EventProducerOptions{.topic = topic});
    if (!producer.ok()) return Fail(producer.status().message());
    std::vector<BatchedTrace*> ptrs;
    for (auto& s : streams) ptrs.push_back(s.get());
    if (absl::Status s = ReplayTraces(ptrs, producer->get(), ReplayOptions{});
        !s.ok()) {
      return Fail(s.message());
    }
    if (absl::Status s = (*producer)->Flush(absl::Seconds(30)); !s.ok()) {
      return Fail(s.message());
    }
    ProducerStats stats = (*producer)->stats();
    std::cout << "   " << stats.events_acked << " events in "
              << stats.batches_acked << " batches acknowledged\n";
  }

  std::cout << "3. processing into the window store " << store_path << "\n";
  {
    absl::StatusOr<std::unique_ptr<WindowStore>> store =
        OpenRocksDbWindowStore(store_path);
    if (!store.ok()) return Fail(store.status().message());
    StreamProcessorOptions options;
    options.brokers = (*cluster)->bootstrap_servers();
    options.topic = topic;
    // The mock cluster serves fetches slowly and unevenly across
    // partitions; give jobs time before calling them idle.
    options.idle_timeout = absl::Seconds(6);
    options.exit_when_idle = absl::Seconds(8);
    options.kafka_properties = {"fetch.wait.max.ms=10",
                                "fetch.message.max.bytes=4194304"};
    absl::StatusOr<std::unique_ptr<StreamProcessor>> processor =
        StreamProcessor::Create(options, store->get());
    if (!processor.ok()) return Fail(processor.status().message());
    if (absl::Status s = (*processor)->Run(); !s.ok()) return Fail(s.message());
    ProcessorStats stats = (*processor)->stats();
    std::cout << "   " << stats.events << " events -> " << stats.windows_written
              << " windows of 10 s\n";
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
  reader->reset();
  if (temporary) std::filesystem::remove_all(store_path);
  return kExitOk;
}

}  // namespace bubblewatch
