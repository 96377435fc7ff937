#include "processor/merge_processor.h"

#include <librdkafka/rdkafka.h>

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_handles.h"
#include "processor/commit_kafka.h"
#include "processor/processor_clients.h"
#include "processor/task_runner.h"
#include "processor/window_parts_task.h"
#include "spdlog/spdlog.h"

namespace bubblewatch {

// The merge stage's processor: WindowPartsTask in the shared runner
// (processor/task_runner.h), its state topic read and written through a
// ChangelogKafka this class owns.
class MergeProcessor::Impl : public TaskRunner<WindowPartsTask> {
 public:
  Impl(const StreamProcessorOptions& options, WindowStore* store)
      : TaskRunner(options, store, "merging window parts of") {}
  // The consumer's close runs the revocation, which may use the state
  // topic's calls: close it before changelog_kafka_ goes.
  ~Impl() override { CloseConsumer(); }

 private:
  absl::Status ConnectTask(std::unique_ptr<CommitKafka> commit,
                           DeadLetterKafka* dead_letters) override;
  void LogProgress() override;

  // The state topic's reader and writer (null without --state-topic).
  std::unique_ptr<RdKafkaChangelogKafka> changelog_kafka_;
};

absl::Status MergeProcessor::Impl::ConnectTask(
    std::unique_ptr<CommitKafka> commit, DeadLetterKafka* dead_letters) {
  task().Connect(std::move(commit), dead_letters);
  if (!options().state_topic.empty()) {
    // As StateChangelog::Create's: a reader that joins no group (assign()
    // wants a group id: a fixed name no member uses), its records written
    // on the processor's producer, so the task's flush waits for them.
    ASSIGN_OR_RETURN(KafkaConfig reader_config, StateReaderConfig(options()));
    reader_config.Set("group.id",
                      absl::StrCat(options().state_topic, ".restore"));
    reader_config.Set("enable.auto.commit", "false");
    reader_config.Set("enable.partition.eof", "true");
    ASSIGN_OR_RETURN(RdKafkaPtr reader,
                     NewKafkaClient(RD_KAFKA_CONSUMER, reader_config));
    changelog_kafka_ =
        std::make_unique<RdKafkaChangelogKafka>(std::move(reader), producer());
    task().ConnectChangelog(changelog_kafka_.get());
  }
  return absl::OkStatus();
}

void MergeProcessor::Impl::LogProgress() {
  const ProcessorStats s = task().stats();
  const WindowPartsStats parts = task().parts_stats();
  int64_t dlq = 0;
  for (const auto& [reason, n] : s.dlq_by_reason) dlq += n;
  spdlog::info(
      "merge: {} messages, {} parts ({} copies, {} of closed windows); {} "
      "windows written, {} published ({} trimmed); {} open windows; {} jobs "
      "({} forgotten); late {} events, {} collectives ({} in no stored "
      "window); DLQ {}",
      s.messages, parts.parts, parts.duplicate_parts, parts.stale_parts,
      s.windows_written, s.windows_published, s.windows_trimmed,
      parts.open_windows, parts.jobs, parts.jobs_forgotten, s.late_events,
      s.late_collectives, parts.late_without_window, dlq);
}

MergeProcessor::MergeProcessor(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
MergeProcessor::~MergeProcessor() = default;

absl::StatusOr<std::unique_ptr<MergeProcessor>> MergeProcessor::Create(
    const StreamProcessorOptions& options, WindowStore* store) {
  RETURN_IF_ERROR(options.Validate());
  if (options.observer != nullptr) {
    return absl::InvalidArgumentError("the merge stage runs no alert rules");
  }
  auto impl = std::make_unique<Impl>(options, store);
  RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<MergeProcessor>(new MergeProcessor(std::move(impl)));
}

absl::Status MergeProcessor::Run() { return impl_->Run(stop_); }

ProcessorStats MergeProcessor::stats() const { return impl_->stats(); }

}  // namespace bubblewatch
