#include "processor/stream_processor.h"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kafka/kafka_config.h"
#include "processor/commit_kafka.h"
#include "processor/partition_task.h"
#include "processor/processor_clients.h"
#include "processor/state_changelog.h"
#include "processor/task_runner.h"
#include "spdlog/spdlog.h"

namespace bubblewatch {

// The events stage's processor: PartitionTask in the shared runner
// (processor/task_runner.h), its state topic a StateChangelog.
class StreamProcessor::Impl : public TaskRunner<PartitionTask> {
 public:
  Impl(const StreamProcessorOptions& options, WindowStore* store)
      : TaskRunner(options, store, "consuming") {}

 private:
  absl::Status ConnectTask(std::unique_ptr<CommitKafka> commit,
                           DeadLetterKafka* dead_letters) override;
  void LogProgress() override;
};

absl::Status StreamProcessor::Impl::ConnectTask(
    std::unique_ptr<CommitKafka> commit, DeadLetterKafka* dead_letters) {
  std::unique_ptr<StateChangelog> changelog;  // Null without --state-topic.
  if (!options().state_topic.empty()) {
    ASSIGN_OR_RETURN(KafkaConfig reader_config, StateReaderConfig(options()));
    ASSIGN_OR_RETURN(
        changelog, StateChangelog::Create(reader_config, options().state_topic,
                                          producer()));
  }
  task().Connect(std::move(commit), std::move(changelog), dead_letters);
  return absl::OkStatus();
}

void StreamProcessor::Impl::LogProgress() {
  int64_t open = 0, buffered = 0;
  for (const auto& [name, job] : task().jobs().live_jobs()) {
    if (!job.windower) continue;
    ++open;
    buffered += static_cast<int64_t>(job.windower->buffered_events());
  }
  absl::flat_hash_map<std::string, int64_t> lag;
  for (const auto& [p, part] : task().jobs().partitions()) {
    std::optional<int64_t> high = consumer().HighWatermark(p);
    if (high.has_value() && part.next_offset >= 0) {
      lag[absl::StrCat(options().topic, "/", p)] =
          std::max<int64_t>(0, *high - part.next_offset);
    }
  }
  int64_t tracked = 0;
  for (const auto& [p, part] : task().jobs().partitions())
    tracked += PartitionJobs::TrackedJobs(part);
  StatsCell& stats_ = task().stats_cell();
  absl::MutexLock lock(&stats_.mu);
  stats_.stats.open_jobs = open;
  stats_.stats.buffered_events = buffered;
  stats_.stats.tracked_jobs = tracked;
  stats_.stats.lag = lag;
  int64_t dlq = 0;
  for (const auto& [reason, n] : stats_.stats.dlq_by_reason) dlq += n;
  int64_t total_lag = 0;
  for (const auto& [tp, n] : lag) total_lag += n;
  spdlog::info(
      "processed {} messages, {} events ({:.0f} events/s from first to last "
      "message); {} windows written, {} published ({} trimmed); {} open jobs, "
      "{} buffered events; lag "
      "{}; late {}; duplicates {}; DLQ {}",
      stats_.stats.messages, stats_.stats.events,
      EventsPerSecond(stats_.stats.events), stats_.stats.windows_written,
      stats_.stats.windows_published, stats_.stats.windows_trimmed, open,
      buffered, total_lag, stats_.stats.late_events,
      stats_.stats.duplicate_batches, dlq);
}

StreamProcessor::StreamProcessor(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
StreamProcessor::~StreamProcessor() = default;

absl::StatusOr<std::unique_ptr<StreamProcessor>> StreamProcessor::Create(
    const StreamProcessorOptions& options, WindowStore* store) {
  RETURN_IF_ERROR(options.Validate());
  auto impl = std::make_unique<Impl>(options, store);
  RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<StreamProcessor>(new StreamProcessor(std::move(impl)));
}

absl::Status StreamProcessor::Run() { return impl_->Run(stop_); }

ProcessorStats StreamProcessor::stats() const { return impl_->stats(); }

}  // namespace bubblewatch
