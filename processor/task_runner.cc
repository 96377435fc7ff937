#include "processor/task_runner.h"

#include <utility>

#include "absl/cleanup/cleanup.h"
#include "base/status_macros.h"
#include "kafka/broker_features.h"
#include "processor/dead_letter_sink.h"
#include "processor/processor_clients.h"
#include "processor/window_parts_task.h"
#include "spdlog/spdlog.h"

namespace bubblewatch {
namespace {

constexpr absl::Duration kRetentionInterval = absl::Minutes(1);
constexpr absl::Duration kPollTimeout = absl::Milliseconds(100);

}  // namespace

template <typename Task>
TaskRunner<Task>::TaskRunner(const StreamProcessorOptions& options,
                             WindowStore* store, std::string what)
    : options_(options), store_(store), what_(std::move(what)) {}

template <typename Task>
TaskRunner<Task>::~TaskRunner() {
  CloseConsumer();
}

template <typename Task>
absl::Status TaskRunner<Task>::Init() {
  ASSIGN_OR_RETURN(ProcessorClients clients,
                   CreateProcessorClients(
                       options_, this,
                       [this](rd_kafka_t* rk, int err, const char* reason) {
                         OnClientError(rk, err, reason);
                       },
                       &TaskRunner::DeliveryCallback, this, &feature_needs_));
  consumer_ = std::move(clients.consumer);
  producer_ = std::move(clients.producer);
  if (clients.windows_limit) task_.set_windows_limit(*clients.windows_limit);
  dead_letter_kafka_ =
      std::make_unique<RdKafkaDeadLetterKafka>(producer_.get());
  RETURN_IF_ERROR(ConnectTask(std::make_unique<RdKafkaCommitKafka>(
                                  consumer_->handle(), producer_.get()),
                              dead_letter_kafka_.get()));
  return consumer_->Subscribe(options_.topic);
}

template <typename Task>
void TaskRunner<Task>::OnAssigned(
    std::vector<PartitionTask::Assigned>& assigned) {
  health_.NoteReached();
  last_message_ = absl::Now();
  task_.Assign(assigned);
}

template <typename Task>
void TaskRunner<Task>::OnRevoked(const std::vector<int32_t>& revoked) {
  task_.Revoke(revoked, absl::Now());
}

template <typename Task>
void TaskRunner<Task>::OnClientError(rd_kafka_t* rk, int err,
                                     const char* reason) {
  // Run stops with the first failure; what follows it is noise.
  if (!shared_.fatal.ok()) return;
  if (absl::Status s = health_.OnClientError(rk, err, reason); !s.ok()) {
    shared_.fatal = s;
  }
}

template <typename Task>
void TaskRunner<Task>::DeliveryCallback(rd_kafka_t*,
                                        const rd_kafka_message_t* message,
                                        void* opaque) {
  TaskRunner* self = static_cast<TaskRunner*>(opaque);
  OnProcessorDelivery(message, self->shared_, self->task_.dead_letters());
}

template <typename Task>
double TaskRunner<Task>::EventsPerSecond(int64_t events) const {
  if (first_message_ == absl::InfinitePast()) return 0.0;
  const double busy_s = absl::ToDoubleSeconds(last_handled_ - first_message_);
  return busy_s > 0 ? static_cast<double>(events) / busy_s : 0.0;
}

template <typename Task>
absl::Status TaskRunner<Task>::Run(const std::atomic<bool>& stop) {
  spdlog::info("{} {} from {} as group {}; store {}", what_, options_.topic,
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
    const absl::Time now = absl::Now();
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
        now - last_message_ >= options_.exit_when_idle && task_.AllClosed()) {
      break;
    }
  }
  RETURN_IF_ERROR(task_.Finish(absl::Now()));
  LogProgress();
  consumer_->Close();  // Logs the fetch wakeup's summary first.
  spdlog::info("{}", store_->Describe());
  rd_kafka_flush(producer_.get(), 10'000);
  return absl::OkStatus();
}

template class TaskRunner<PartitionTask>;
template class TaskRunner<WindowPartsTask>;

}  // namespace bubblewatch
