// TaskRunner: the librdkafka side both stages' processors share
// (docs/architecture.md#the-partition-task). A stage's work is a task with
// no I/O (PartitionTask for the events, WindowPartsTask for the merge:
// the same calls); the runner makes the clients (processor_clients.h),
// hands the task the consumer's assignments as its listener, and runs the
// poll loop: each message, end of partition and tick to the task, delivery
// reports served, the broker's features checked once, its outages judged
// (BrokerHealth), retention applied, a progress line, and
// --exit-when-idle. One loop for both stages, so that a fix to how a
// processor polls, stops or survives an outage is made once.
//
// A stage's processor derives from TaskRunner<ItsTask> and says only what
// differs: how its task is connected to the clients (ConnectTask) and what
// its progress line says (LogProgress).
//
// Thread safety: Run on one thread; stats from any.
#ifndef BUBBLEWATCH_PROCESSOR_TASK_RUNNER_H_
#define BUBBLEWATCH_PROCESSOR_TASK_RUNNER_H_

#include <librdkafka/rdkafka.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "kafka/broker_features.h"
#include "kafka/kafka_handles.h"
#include "processor/broker_health.h"
#include "processor/commit_kafka.h"
#include "processor/consumer_kafka.h"
#include "processor/partition_task.h"
#include "processor/processor_options.h"
#include "processor/processor_stats.h"
#include "processor/runtime_shared.h"
#include "storage/window_store.h"

namespace bubblewatch {

// `Task` is PartitionTask or WindowPartsTask (explicitly instantiated in
// task_runner.cc).
template <typename Task>
class TaskRunner : private ConsumerKafka::Listener {
 public:
  // `options` is copied; `store` must outlive the runner. `what` names the
  // work in the first log line ("consuming", "merging window parts of").
  TaskRunner(const StreamProcessorOptions& options, WindowStore* store,
             std::string what);
  // Closes the consumer while the task lives: closing runs the revocation,
  // which uses the task.
  ~TaskRunner() override;

  TaskRunner(const TaskRunner&) = delete;
  TaskRunner& operator=(const TaskRunner&) = delete;

  // Creates the clients, connects the task (ConnectTask) and subscribes to
  // options.topic.
  absl::Status Init();
  // Polls until `stop`, exit_when_idle (every partition's windows closed),
  // or a fatal error; then finishes the task (its last commit) and flushes.
  absl::Status Run(const std::atomic<bool>& stop);
  ProcessorStats stats() const { return task_.stats(); }

 protected:
  // Hands the task its seams, made on the runner's clients: `commit`
  // (windows and offsets) and `dead_letters` (owned by the runner), plus
  // whatever the stage's task needs besides (its state topic's calls).
  virtual absl::Status ConnectTask(std::unique_ptr<CommitKafka> commit,
                                   DeadLetterKafka* dead_letters) = 0;
  // One progress line (every options.log_interval and at the end).
  virtual void LogProgress() = 0;
  // What derived destructors call first when the task uses something they
  // own: the consumer's close runs the revocation. Idempotent.
  void CloseConsumer() {
    if (consumer_ != nullptr) consumer_->Close();
  }

  const StreamProcessorOptions& options() const { return options_; }
  Task& task() { return task_; }
  const Task& task() const { return task_; }
  RdKafkaConsumerKafka& consumer() { return *consumer_; }
  rd_kafka_t* producer() { return producer_.get(); }
  // Events per second of wall time from the first message handled to the
  // last (0 before two): the progress line's throughput.
  double EventsPerSecond(int64_t events) const;

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

  StreamProcessorOptions options_;
  WindowStore* store_;
  std::string what_;
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
  Task task_{options_, store_, &health_, &shared_};
  // Wall time of the first message and after the last one handled, for the
  // throughput figure in the progress line.
  absl::Time first_message_ = absl::InfinitePast();
  absl::Time last_handled_ = absl::InfinitePast();
  // For --exit-when-idle: the last message, or the last event that makes a
  // silence start afresh (an assignment, whose replay has not begun yet; the
  // broker coming back after an outage).
  absl::Time last_message_ = absl::Now();
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_TASK_RUNNER_H_
