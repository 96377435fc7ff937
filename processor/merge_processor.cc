#include "processor/merge_processor.h"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kafka/broker_features.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_handles.h"
#include "kafka/kafka_status.h"
#include "processor/broker_health.h"
#include "processor/commit_kafka.h"
#include "processor/commit_pipeline.h"
#include "processor/consumer_kafka.h"
#include "processor/dead_letter_sink.h"
#include "processor/processor_clients.h"
#include "processor/runtime_shared.h"
#include "processor/window_parts_task.h"
#include "spdlog/spdlog.h"

namespace bubblewatch {
namespace {

constexpr absl::Duration kMergeRetentionInterval = absl::Minutes(1);
constexpr absl::Duration kMergePollTimeout = absl::Milliseconds(100);

}  // namespace

class MergeProcessor::Impl : private ConsumerKafka::Listener {
 public:
  Impl(const StreamProcessorOptions& options, WindowStore* store)
      : options_(options), store_(store) {}
  // The consumer closes while the task lives (its revocation uses it).
  ~Impl() override {
    if (consumer_ != nullptr) consumer_->Close();
  }

  absl::Status Init();
  absl::Status Run(const std::atomic<bool>& stop);
  ProcessorStats stats() const { return task_.stats(); }

 private:
  static void DeliveryCallback(rd_kafka_t* rk,
                               const rd_kafka_message_t* message, void* opaque);
  void OnClientError(rd_kafka_t* rk, int err, const char* reason) {
    if (!shared_.fatal.ok()) return;
    if (absl::Status s = health_.OnClientError(rk, err, reason); !s.ok()) {
      shared_.fatal = s;
    }
  }
  void OnAssigned(std::vector<PartitionTask::Assigned>& assigned) override {
    health_.NoteReached();
    last_message_ = absl::Now();
    task_.Assign(assigned);
  }
  void OnRevoked(const std::vector<int32_t>& revoked) override {
    task_.Revoke(revoked, absl::Now());
  }
  int64_t NextOffset(int32_t partition) const override {
    return task_.next_offset(partition);
  }
  std::optional<std::vector<std::pair<int32_t, int64_t>>> Lagging()
      const override {
    if (health_.down()) return std::nullopt;
    return task_.Lagging();
  }
  void LogProgress();

  StreamProcessorOptions options_;
  WindowStore* store_;
  std::unique_ptr<RdKafkaConsumerKafka> consumer_;
  RdKafkaPtr producer_;
  std::unique_ptr<RdKafkaDeadLetterKafka> dead_letter_kafka_;
  // The state topic's reader and writer (null without --state-topic).
  std::unique_ptr<RdKafkaChangelogKafka> changelog_kafka_;
  RuntimeShared shared_;
  BrokerHealth health_;
  int feature_needs_ = kNeedConsumerGroups;
  bool features_checked_ = false;
  WindowPartsTask task_{options_, store_, &health_, &shared_};
  absl::Time last_message_ = absl::Now();
};

absl::Status MergeProcessor::Impl::Init() {
  ASSIGN_OR_RETURN(ProcessorClients clients,
                   CreateProcessorClients(
                       options_, this,
                       [this](rd_kafka_t* rk, int err, const char* reason) {
                         OnClientError(rk, err, reason);
                       },
                       &Impl::DeliveryCallback, this, &feature_needs_));
  consumer_ = std::move(clients.consumer);
  producer_ = std::move(clients.producer);
  if (clients.windows_limit) task_.set_windows_limit(*clients.windows_limit);
  dead_letter_kafka_ =
      std::make_unique<RdKafkaDeadLetterKafka>(producer_.get());
  task_.Connect(std::make_unique<RdKafkaCommitKafka>(consumer_->handle(),
                                                     producer_.get()),
                dead_letter_kafka_.get());
  if (!options_.state_topic.empty()) {
    // As StateChangelog::Create's: a reader that joins no group (assign()
    // wants a group id: a fixed name no member uses), its records written
    // on the processor's producer, so the task's flush waits for them.
    ASSIGN_OR_RETURN(KafkaConfig reader_config, StateReaderConfig(options_));
    reader_config.Set("group.id",
                      absl::StrCat(options_.state_topic, ".restore"));
    reader_config.Set("enable.auto.commit", "false");
    reader_config.Set("enable.partition.eof", "true");
    ASSIGN_OR_RETURN(RdKafkaPtr reader,
                     NewKafkaClient(RD_KAFKA_CONSUMER, reader_config));
    changelog_kafka_ = std::make_unique<RdKafkaChangelogKafka>(
        std::move(reader), producer_.get());
    task_.ConnectChangelog(changelog_kafka_.get());
  }
  return consumer_->Subscribe(options_.topic);
}

void MergeProcessor::Impl::DeliveryCallback(rd_kafka_t*,
                                            const rd_kafka_message_t* message,
                                            void* opaque) {
  Impl* self = static_cast<Impl*>(opaque);
  OnProcessorDelivery(message, self->shared_, self->task_.dead_letters());
}

void MergeProcessor::Impl::LogProgress() {
  const ProcessorStats s = task_.stats();
  const WindowPartsStats parts = task_.parts_stats();
  int64_t dlq = 0;
  for (const auto& [reason, n] : s.dlq_by_reason) dlq += n;
  spdlog::info(
      "merge: {} messages, {} parts ({} copies, {} of closed windows); {} "
      "windows written, {} published ({} trimmed); {} open windows; {} jobs "
      "({} forgotten); DLQ {}",
      s.messages, parts.parts, parts.duplicate_parts, parts.stale_parts,
      s.windows_written, s.windows_published, s.windows_trimmed,
      parts.open_windows, parts.jobs, parts.jobs_forgotten, dlq);
}

absl::Status MergeProcessor::Impl::Run(const std::atomic<bool>& stop) {
  spdlog::info("merging window parts of {} from {} as group {}; store {}",
               options_.topic, options_.brokers, options_.group,
               store_->Describe());
  task_.set_stop(&stop);
  absl::Cleanup forget_stop = [this] { task_.set_stop(nullptr); };
  task_.Start(absl::Now());
  absl::Time last_log = absl::Now();
  absl::Time last_retention = absl::InfinitePast();
  last_message_ = absl::Now();
  while (!stop.load()) {
    ConsumerKafka::Event event = consumer_->Poll(kMergePollTimeout);
    rd_kafka_poll(producer_.get(), 0);  // Serve delivery reports.
    RETURN_IF_ERROR(shared_.fatal);
    const absl::Time now = absl::Now();
    if (!features_checked_) {
      if (std::optional<absl::Status> s = ReportBrokerFeatures(
              consumer_->handle(), feature_needs_, /*answered=*/false)) {
        RETURN_IF_ERROR(*s);
        features_checked_ = true;
      }
    }
    switch (event.kind) {
      case ConsumerKafka::Event::Kind::kNothing:
        break;
      case ConsumerKafka::Event::Kind::kRefetched:
        health_.NoteReached();
        break;
      case ConsumerKafka::Event::Kind::kMessage:
        health_.NoteReached();
        last_message_ = now;
        RETURN_IF_ERROR(task_.OnMessage(event.message, now));
        break;
      case ConsumerKafka::Event::Kind::kEndOfPartition:
        health_.NoteReached();
        task_.OnEndOfPartition(event.partition);
        break;
      case ConsumerKafka::Event::Kind::kError:
        if (event.fatal) return event.error;
        RETURN_IF_ERROR(health_.OnConsumeError(
            static_cast<rd_kafka_resp_err_t>(event.code), event.error, now));
        break;
    }
    if (std::optional<absl::Time> back = health_.Probe(
            now, consumer_->handle(), options_.topic, task_.AnyPartition())) {
      last_message_ = *back;
      task_.RestartIdleTimers(*back);
    }
    RETURN_IF_ERROR(task_.Tick(now));
    if (now - last_retention >= kMergeRetentionInterval) {
      absl::StatusOr<RetentionStats> r =
          store_->ApplyRetention(options_.retention);
      if (!r.ok()) return r.status();
      last_retention = now;
    }
    if (now - last_log >= options_.log_interval) {
      LogProgress();
      last_log = now;
    }
    if (!task_.owns_partitions() || health_.down()) last_message_ = now;
    if (options_.exit_when_idle > absl::ZeroDuration() &&
        now - last_message_ >= options_.exit_when_idle && task_.AllClosed()) {
      break;
    }
  }
  RETURN_IF_ERROR(task_.Finish(absl::Now()));
  LogProgress();
  consumer_->Close();
  rd_kafka_flush(producer_.get(), 10'000);
  return absl::OkStatus();
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
