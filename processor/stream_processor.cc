#include "processor/stream_processor.h"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kafka/broker_features.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_handles.h"
#include "kafka/kafka_status.h"
#include "processor/broker_health.h"
#include "processor/commit_kafka.h"
#include "processor/consumer_kafka.h"
#include "processor/dead_letter_sink.h"
#include "processor/partition_task.h"
#include "processor/processor_clients.h"
#include "processor/runtime_shared.h"
#include "processor/state_changelog.h"
#include "spdlog/spdlog.h"

namespace bubblewatch {
namespace {

constexpr absl::Duration kRetentionInterval = absl::Minutes(1);
constexpr absl::Duration kPollTimeout = absl::Milliseconds(100);

}  // namespace

// The librdkafka adapter around PartitionTask: its poll loop hands the
// task what the consumer (ConsumerKafka) reads: messages, ends of
// partitions, and, as its listener, the assignments; it keeps what only
// concerns the clients (the broker's health and features, retention and
// the progress line).
class StreamProcessor::Impl : private ConsumerKafka::Listener {
 public:
  Impl(const StreamProcessorOptions& options, WindowStore* store)
      : options_(options), store_(store) {}
  // Closes the consumer while every member is still alive: closing runs the
  // revocation (OnRevoked), which uses task_. Left to the members'
  // destructors, consumer_ (declared first) would close after the task
  // was destroyed: a double free whenever Run returned an error.
  ~Impl() override {
    if (consumer_ != nullptr) consumer_->Close();
  }

  absl::Status Init();
  absl::Status Run(const std::atomic<bool>& stop);
  ProcessorStats stats() const { return task_.stats(); }

 private:
  static void DeliveryCallback(rd_kafka_t* rk,
                               const rd_kafka_message_t* message, void* opaque);
  // The consumer's client-level errors (served by its Poll, on Run's
  // thread), judged by BrokerHealth::OnClientError; what it says Run must
  // stop with becomes shared_.fatal.
  void OnClientError(rd_kafka_t* rk, int err, const char* reason);
  // ConsumerKafka::Listener.
  void OnAssigned(std::vector<PartitionTask::Assigned>& assigned) override;
  void OnRevoked(const std::vector<int32_t>& revoked) override;
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
  RuntimeShared shared_;  // Undelivered messages; callbacks' failures.
  // Outages and startup refusals. The broker has accepted the consumer
  // (NoteReached) once a message, an end of partition or an assignment
  // (which takes a group join) came back.
  BrokerHealth health_;
  // What the brokers must support (kafka/broker_features.h), and whether
  // their features were logged and checked.
  int feature_needs_ = kNeedConsumerGroups;
  bool features_checked_ = false;

  // The owned partitions, their jobs, and the windows to the store and
  // the topics, offsets to the group, snapshots to the changelog
  // (docs/architecture.md#the-partition-task).
  PartitionTask task_{options_, store_, &health_, &shared_};
  // Wall time of the first message and after the last one handled, for the
  // throughput figure in the progress line.
  absl::Time first_message_ = absl::InfinitePast();
  absl::Time last_handled_ = absl::InfinitePast();
  // For --exit-when-idle: the last message, or the last event that makes a
  // silence start afresh (an assignment, whose replay has not begun yet; the
  // broker coming back after an outage).
  absl::Time last_message_ = absl::Now();
};

absl::Status StreamProcessor::Impl::Init() {
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
  std::unique_ptr<StateChangelog> changelog;  // Null without --state-topic.
  if (!options_.state_topic.empty()) {
    ASSIGN_OR_RETURN(KafkaConfig reader_config, StateReaderConfig(options_));
    ASSIGN_OR_RETURN(changelog,
                     StateChangelog::Create(reader_config, options_.state_topic,
                                            producer_.get()));
  }
  task_.Connect(std::make_unique<RdKafkaCommitKafka>(consumer_->handle(),
                                                     producer_.get()),
                std::move(changelog), dead_letter_kafka_.get());
  return consumer_->Subscribe(options_.topic);
}

void StreamProcessor::Impl::OnAssigned(
    std::vector<PartitionTask::Assigned>& assigned) {
  health_.NoteReached();
  last_message_ = absl::Now();
  task_.Assign(assigned);
}

void StreamProcessor::Impl::OnRevoked(const std::vector<int32_t>& revoked) {
  task_.Revoke(revoked, absl::Now());
}

void StreamProcessor::Impl::OnClientError(rd_kafka_t* rk, int err,
                                          const char* reason) {
  // Run stops with the first failure; what follows it is noise.
  if (!shared_.fatal.ok()) return;
  if (absl::Status s = health_.OnClientError(rk, err, reason); !s.ok()) {
    shared_.fatal = s;
  }
}

void StreamProcessor::Impl::DeliveryCallback(rd_kafka_t*,
                                             const rd_kafka_message_t* message,
                                             void* opaque) {
  Impl* self = static_cast<Impl*>(opaque);
  OnProcessorDelivery(message, self->shared_, self->task_.dead_letters());
}

void StreamProcessor::Impl::LogProgress() {
  int64_t open = 0, buffered = 0;
  for (const auto& [name, job] : task_.jobs().live_jobs()) {
    if (!job.windower) continue;
    ++open;
    buffered += static_cast<int64_t>(job.windower->buffered_events());
  }
  absl::flat_hash_map<std::string, int64_t> lag;
  for (const auto& [p, part] : task_.jobs().partitions()) {
    std::optional<int64_t> high = consumer_->HighWatermark(p);
    if (high.has_value() && part.next_offset >= 0) {
      lag[absl::StrCat(options_.topic, "/", p)] =
          std::max<int64_t>(0, *high - part.next_offset);
    }
  }
  int64_t tracked = 0;
  for (const auto& [p, part] : task_.jobs().partitions())
    tracked += PartitionJobs::TrackedJobs(part);
  StatsCell& stats_ = task_.stats_cell();
  absl::MutexLock lock(&stats_.mu);
  stats_.stats.open_jobs = open;
  stats_.stats.buffered_events = buffered;
  stats_.stats.tracked_jobs = tracked;
  stats_.stats.lag = lag;
  int64_t dlq = 0;
  for (const auto& [reason, n] : stats_.stats.dlq_by_reason) dlq += n;
  int64_t total_lag = 0;
  for (const auto& [tp, n] : lag) total_lag += n;
  double busy_s = first_message_ == absl::InfinitePast()
                      ? 0.0
                      : absl::ToDoubleSeconds(last_handled_ - first_message_);
  spdlog::info(
      "processed {} messages, {} events ({:.0f} events/s from first to last "
      "message); {} windows written, {} published ({} trimmed); {} open jobs, "
      "{} buffered events; lag "
      "{}; late {}; duplicates {}; DLQ {}",
      stats_.stats.messages, stats_.stats.events,
      busy_s > 0 ? static_cast<double>(stats_.stats.events) / busy_s : 0.0,
      stats_.stats.windows_written, stats_.stats.windows_published,
      stats_.stats.windows_trimmed, open, buffered, total_lag,
      stats_.stats.late_events, stats_.stats.duplicate_batches, dlq);
}

absl::Status StreamProcessor::Impl::Run(const std::atomic<bool>& stop) {
  spdlog::info("consuming {} from {} as group {}; store {}", options_.topic,
               options_.brokers, options_.group, store_->Describe());
  task_.set_stop(&stop);
  absl::Cleanup forget_stop = [this] { task_.set_stop(nullptr); };
  task_.Start(absl::Now());
  absl::Time last_log = absl::Now();
  absl::Time last_retention = absl::InfinitePast();
  last_message_ = absl::Now();
  while (!stop.load()) {
    ConsumerKafka::Event event = consumer_->Poll(kPollTimeout);
    rd_kafka_poll(producer_.get(), 0);  // Serve delivery reports.
    RETURN_IF_ERROR(shared_.fatal);
    absl::Time now = absl::Now();
    // Once the consumer's first broker has told its features (it may be
    // down at startup: no wait here), log them and refuse a broker without
    // consumer groups or idempotent producers.
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
        // Handled before a seek of the fetch wakeup: skipped.
        health_.NoteReached();
        break;
      case ConsumerKafka::Event::Kind::kMessage:
        health_.NoteReached();
        last_message_ = now;
        if (first_message_ == absl::InfinitePast()) first_message_ = now;
        // A failed message stops the processor, and nothing more is
        // committed (the revocation the consumer's close runs included):
        // its partition's progress already counts the message.
        RETURN_IF_ERROR(task_.OnMessage(event.message, now));
        last_handled_ = absl::Now();
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
      // Silence during the outage said nothing: idle periods start afresh.
      last_message_ = *back;
      task_.RestartIdleTimers(*back);
    }
    RETURN_IF_ERROR(task_.Tick(now));
    if (now - last_retention >= kRetentionInterval) {
      absl::StatusOr<RetentionStats> r =
          store_->ApplyRetention(options_.retention);
      if (!r.ok()) return r.status();
      if (r->windows_deleted > 0) {
        spdlog::info("retention removed {} windows of {} jobs",
                     r->windows_deleted, r->jobs_trimmed);
      }
      last_retention = now;
    }
    if (now - last_log >= options_.log_interval) {
      LogProgress();
      last_log = now;
    }
    // Idle counts only while partitions are assigned (a restarted member may
    // wait for a rebalance before it gets any) and the broker is reachable.
    if (!task_.owns_partitions() || health_.down()) last_message_ = now;
    if (options_.exit_when_idle > absl::ZeroDuration() &&
        now - last_message_ >= options_.exit_when_idle) {
      if (task_.AllClosed()) break;
    }
  }
  RETURN_IF_ERROR(task_.Finish(absl::Now()));
  LogProgress();
  consumer_->Close();  // Logs the fetch wakeup's summary first.
  spdlog::info("{}", store_->Describe());
  rd_kafka_flush(producer_.get(), 10'000);
  return absl::OkStatus();
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
