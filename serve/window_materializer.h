// WindowMaterializer: the fleet query tier's reader. It follows every
// partition of the windows topic (`process --windows-topic`, default
// bubblewatch.windows; keys and values as processor/fleet_topics.h and
// schemas/window_summary_codec.h define them) and keeps the windows in a
// WindowStore of its own, which `bubblewatch serve --brokers` answers the
// API, the dashboard and /metrics from (docs/architecture.md#fleet-query-tier
// argues the design).
//
// Promises:
//   - The store holds, per (job, window start), the newest version of the
//     window on the topic: a version republished under the same key (a
//     later late-event count) replaces the older one, never adds a second;
//     a tombstone (a null value) deletes the window.
//   - Each commit writes the windows of a batch of messages together with
//     the next offset of every partition they came from, in one store
//     Commit (one RocksDB WriteBatch): after a crash or kill -9 a restart
//     resumes exactly where the store left off, re-applying nothing twice
//     and skipping nothing. No consumer group is joined and no offset is
//     committed to Kafka, so any number of materializers (serve replicas)
//     read independently; each holds the whole fleet.
//   - Retention as the processor's store: ApplyRetention(retention) at
//     start and every retention_interval.
//   - A message that is not a window (key or value that does not decode, a
//     key naming another window than its value) is skipped with a warning
//     and counted; its offset is passed like any other.
//   - The job records it writes: last_event_ns is the end of the job's
//     newest window seen (the processor's store has the newest event
//     time), last_seen_wall the publish time of its newest message (the
//     record's Kafka timestamp), both only moving forward.
//
// With a state topic (options.state_topic, the processors' `--state-topic`,
// processor/state_changelog.h) it follows that too, and keeps what each
// input partition's newest snapshot says of its jobs:
//   - each job's state (its lifecycle: ended, paused between snapshots) and
//     the activity its owner's store keeps (newest event time, wall time of
//     the last commit), so that a job's phase and last report read as on
//     its owner's store; the windows then no longer set a job's times
//     (they do while the state topic does not exist);
//   - each job's alert state (the key "j/" + job), so that /api/v1/alerts
//     lists what the processors' rules have firing, fleet-wide; a job whose
//     alert state left its snapshot has it deleted;
//   - a job that left its partition's snapshot was forgotten by its owner
//     after --job-expiry: it is stored ended and expired, as the owner's
//     store does.
//   Per snapshot key the snapshot with the higher committed position wins
//   (ties: the later one), which ignores a fenced-out former owner's late
//   write. What was applied last is kept in the store with the state
//   topic's progress, so a restart goes on from it.
//
// Not kept: the processors' partition progress and limit ledgers of the
// events topic, and fleet rules' alert state (an instance's own).
//
// Thread safety: Run on one thread; Stop and status from any thread.
#ifndef BUBBLEWATCH_SERVE_WINDOW_MATERIALIZER_H_
#define BUBBLEWATCH_SERVE_WINDOW_MATERIALIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "serve/materializer_status.h"
#include "storage/window_store.h"

namespace bubblewatch {

struct WindowMaterializerOptions {
  // bootstrap.servers, and librdkafka properties as `-X key=value`
  // (SASL/SSL settings go here).
  std::string brokers;
  std::vector<std::string> kafka_properties;
  std::string windows_topic = "bubblewatch.windows";
  // The processors' state topic; empty: not followed (jobs' times then come
  // from their windows, and no job state or alert is shown).
  std::string state_topic;
  // As `process --retention`: windows whose start is this much older than
  // their job's newest are deleted. > 0.
  absl::Duration retention = absl::Hours(6);
  absl::Duration retention_interval = absl::Minutes(1);
  // A commit holds at most this many messages, and is made at the latest
  // this long after its first message arrived.
  int max_batch_messages = 5000;
  absl::Duration max_batch_wait = absl::Milliseconds(200);
  // How often the topic's partition count is read again (partitions added
  // to it are then followed from their start), and how often a missing
  // topic is looked for.
  absl::Duration metadata_interval = absl::Seconds(30);
  absl::Duration missing_topic_retry = absl::Seconds(2);

  // kInvalidArgument listing every problem (empty brokers or topic,
  // non-positive durations or batch size).
  absl::Status Validate() const;
};

class WindowMaterializer {
 public:
  // Creates the consumer (it connects lazily). `store` must outlive the
  // materializer, and nothing else may write to it.
  // Errors: kInvalidArgument for bad options or a property librdkafka
  // refuses.
  static absl::StatusOr<std::unique_ptr<WindowMaterializer>> Create(
      const WindowMaterializerOptions& options, WindowStore* store);
  ~WindowMaterializer();

  // Materializes until Stop(): returns OK then. Errors: a store write that
  // failed (nothing after it is written, no progress moves past it); a
  // Kafka error that will not heal (authentication). Broker outages and a
  // missing topic are waited out.
  absl::Status Run();
  // Makes Run return after its current commit; safe from any thread.
  void Stop();

  // A snapshot; cheap (no broker or store access).
  MaterializerStatus status() const;

 private:
  class Impl;
  explicit WindowMaterializer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_SERVE_WINDOW_MATERIALIZER_H_
