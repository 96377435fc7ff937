// TaskDriver: runs the processor's partition task (processor/
// partition_task.h) over the in-memory Kafka (memory_kafka.h) and a real
// RocksDB store, as `bubblewatch process` runs it over a broker, with a
// simulated wall clock: the protocol's logic (admission, windows, late
// counts, dead letters, job expiry, idle closing, restarts) in a unit test
// of milliseconds instead of a broker test of seconds
// (docs/architecture.md#testing-the-partition-task).
//
// What it stands in for: the consumer (each partition read from the
// restored resume offset, else the group offset, else its start; an end
// of partition once everything sent was read), the poll loop's cadence
// (a tick after each message and every 100 ms of simulated wall time) and
// --exit-when-idle. What it does not: the broker (rebalances, outages,
// delivery timeouts), which the broker tests keep.
#ifndef BUBBLEWATCH_TESTS_PROCESSOR_TASK_DRIVER_H_
#define BUBBLEWATCH_TESTS_PROCESSOR_TASK_DRIVER_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "ingest/batched_trace.h"
#include "ingest/synthetic/synthetic_fleet.h"
#include "processor/broker_health.h"
#include "processor/commit_observer.h"
#include "processor/partition_task.h"
#include "processor/processor_options.h"
#include "processor/runtime_shared.h"
#include "schemas/window_summary.h"
#include "spdlog/sinks/ostream_sink.h"
#include "storage/window_store.h"
#include "tests/processor/memory_kafka.h"

namespace bubblewatch::testing {

// The options `bubblewatch process` gets in the broker tests
// (processor_kafka_test_util.h ProcessArgs) for input topic `topic`:
// windows, dead-letter and state topics named after it, lateness 5 s,
// idle timeout 3 s, exit when idle 4 s.
StreamProcessorOptions ProcessOptions(const std::string& topic = "events");

// Everything spdlog logs while it lives (the processor's log lines, as the
// broker tests read them from the child's standard error).
class LogCapture {
 public:
  LogCapture();
  ~LogCapture();
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
  int level_;
};

// How `bubblewatch produce FILE...` was run (docs/produce.md): the flags
// that decide which messages it sends.
struct ProduceFiles {
  std::string job;              // --job
  int rank = -1;                // --rank; -1: each file's own
  int64_t batch_events = 4096;  // --batch-events
  double replay_speed = 0;      // --replay-speed (0: as fast as possible)
  bool end_markers = true;      // false: --no-end-marker
  // Stands for the machine's name, the host of a file that names none and
  // is not a rank of a multi-rank job.
  std::string local_host = "produce-host";
};

// The messages `produce` sends a broker for `files`, in its order: each
// file read as produce reads it (a bad file is its error), batched as its
// flags batch it (the producer id a hash of the content and batching, so
// that a rerun resends the same batches), merged by ReplayTraces
// (ingest/trace_replay.h). A producer killed mid-file sent a prefix.
absl::StatusOr<std::vector<MemoryRecord>> ProduceRecords(
    const std::vector<std::string>& files, const ProduceFiles& produce);

class TaskDriver {
 public:
  // A task over `options` with its store in `store_dir`; the input topic
  // (options.topic) has `partitions` partitions, the windows, dead-letter
  // and state topics (when named) as many.
  TaskDriver(StreamProcessorOptions options, std::string store_dir,
             int partitions = 1);
  ~TaskDriver();

  // Appends a message to the input topic.
  void Send(absl::string_view key, std::span<const uint8_t> value,
            int32_t partition = 0);
  void Send(absl::string_view key, absl::string_view value,
            int32_t partition = 0);
  // Appends records (ProduceRecords, another driver's input) in order.
  void Send(const std::vector<MemoryRecord>& records, int32_t partition = 0);
  // The input topic's records of `partition`, in offset order.
  const std::vector<MemoryRecord>& Input(int32_t partition = 0) {
    return topics_.topics[options_.topic][partition];
  }
  // Sends the synthetic fleet as `bubblewatch produce --synthetic` does
  // (same batches, same order, end markers unless `end_markers` is false:
  // --no-end-marker), all to partition 0; `batching` is --batch-events'.
  absl::Status SendFleet(const SyntheticFleetOptions& fleet,
                         const BatchingOptions& batching = {},
                         bool end_markers = true);

  // Makes the commit observer (StreamProcessorOptions::observer) of each
  // process started from now on, over its store, as `process --rules`
  // makes its alert hook. The driver owns it: destroyed after the task and
  // before the store (at Kill, or with the driver).
  using ObserverFactory =
      std::function<absl::StatusOr<std::unique_ptr<CommitObserver>>(
          WindowStore& store)>;
  void set_observer_factory(ObserverFactory make) {
    make_observer_ = std::move(make);
  }

  // One pass of the poll loop over everything sent and not read yet (at
  // most `max_messages` of it: a process killed mid-stream): each message
  // to the task (the clock advancing 1 ms per message) with a tick after
  // it, then the ends of the partitions read to their end and a tick.
  // Starts the task (assigns every partition) on the first call.
  absl::Status Poll(int64_t max_messages = std::numeric_limits<int64_t>::max());
  // The consumer goes back to `offset` of `partition` within the same
  // assignment: what Poll reads next was handed to the task already (as
  // librdkafka may send again after a rebalance pauses and resumes its
  // fetchers: docs/architecture.md#rebalance-hand-off). No-op before the
  // process started.
  void Rewind(int32_t partition, int64_t offset) {
    if (auto it = positions_.find(partition); it != positions_.end()) {
      it->second = offset;
    }
  }
  // Messages sent and not read yet by the running process (starting it if
  // none runs: a restarted one reads from where it resumes).
  absl::StatusOr<int64_t> Unread();
  // The wall clock moves on `by`, ticking every 100 ms.
  absl::Status Advance(absl::Duration by);
  // What `process --exit-when-idle` does: Poll, then ticks every 100 ms
  // until every job is closed and options.exit_when_idle passed since the
  // last message, then the last commit (Finish). At most `limit` of
  // simulated wall time: kDeadlineExceeded after it.
  absl::Status RunUntilIdle(absl::Duration limit = absl::Minutes(10));
  // The process is killed: the task goes without a last commit, what it
  // had produced and not delivered is lost, and the store is closed as a
  // killed process leaves it. The next Poll starts a new task, as a
  // restarted process, from the store and the topics.
  void Kill();

  // The windows of `jobs` in the store, in scan order (job, start).
  std::vector<WindowSummary> Stored(const std::vector<std::string>& jobs);
  // The windows topic's records, decoded, in the order published.
  std::vector<WindowSummary> Published();
  // The dead-letter topic's records, in order.
  std::vector<MemoryRecord> DeadLetters() const;
  // The counters of the current task (since its start).
  ProcessorStats stats() const { return task_->stats(); }

  absl::Time now() const { return now_; }
  PartitionTask& task() { return *task_; }
  MemoryKafka& kafka() { return *kafka_; }
  MemoryTopics& topics() { return topics_; }
  const StreamProcessorOptions& options() const { return options_; }
  // The options of the next process; change them only after Kill (the
  // running task holds them).
  StreamProcessorOptions& mutable_options() { return options_; }
  // The running process's store (null after Kill).
  WindowStore* store() { return store_.get(); }

 private:
  // Opens the store and a new task over it (a process starting).
  absl::Status Start();
  absl::Status Tick();

  StreamProcessorOptions options_;
  std::string store_dir_;
  int partitions_;
  MemoryTopics topics_;
  absl::Time now_;
  absl::Time last_message_;
  // Per partition: the next offset the "consumer" reads.
  std::map<int32_t, int64_t> positions_;
  // One process's parts, in destruction order (task before store).
  std::unique_ptr<WindowStore> store_;
  ObserverFactory make_observer_;
  std::unique_ptr<CommitObserver> observer_;
  std::unique_ptr<RuntimeShared> shared_;
  std::unique_ptr<BrokerHealth> health_;
  std::unique_ptr<PartitionTask> task_;
  MemoryKafka* kafka_ = nullptr;  // Owned by the task.
};

}  // namespace bubblewatch::testing

#endif  // BUBBLEWATCH_TESTS_PROCESSOR_TASK_DRIVER_H_
