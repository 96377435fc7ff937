// CommitPipeline: takes what the processor finalized (windows, late-event
// counts, job states, partition progress) to the store, the windows topic,
// the state changelog and the group offsets, in the order that makes a crash
// between any two steps harmless, and restores a partition's state on
// assignment from the newer of the local and the changelog snapshot.
//
// The protocol (the order of the steps, what each crash point leaves, how a
// replay re-finalizes identical windows, the rebalance hand-off) is
// described once, in docs/architecture.md#commit-protocol; Commit and
// FlushAndCommitOffsets are its implementation.
//
// Promises:
//   - no group offset is committed before everything produced up to the
//     previous commit (windows, dead letters, snapshots) is acknowledged;
//   - after a failed commit (a store write, a window the producer or
//     FitWindow refuses, a failed flush) nothing more is written (Commit
//     returns that failure from then on): offsets never move past windows
//     that were not stored and published;
//   - every window is published in a form the windows topic accepts
//     (processor/window_fit.h), the same one stored; a window the producer
//     refuses fails the commit before the store write, never silently;
//   - once asked to stop, a flush waits kFlushOnStop (30 s) at most, else as
//     long as librdkafka retries; a flush unacknowledged for 2 s starts a
//     broker outage (broker_health.h).
//
// Thread safety: Run's thread only (the rebalance callback included).
#ifndef BUBBLEWATCH_PROCESSOR_COMMIT_PIPELINE_H_
#define BUBBLEWATCH_PROCESSOR_COMMIT_PIPELINE_H_

#include <librdkafka/rdkafka.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "analysis/window_merge.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_handles.h"
#include "processor/broker_health.h"
#include "processor/commit_kafka.h"
#include "processor/fleet_topics.h"
#include "processor/late_counts.h"
#include "processor/partition_jobs.h"
#include "processor/processor_options.h"
#include "processor/runtime_shared.h"
#include "processor/state_changelog.h"
#include "schemas/time_types.h"
#include "storage/window_store.h"

namespace bubblewatch {

class CommitPipeline {
 public:
  // Everything passed must outlive the pipeline.
  CommitPipeline(const StreamProcessorOptions& options, WindowStore* store,
                 PartitionJobs* jobs, BrokerHealth* health,
                 RuntimeShared* shared, StatsCell* stats)
      : options_(options),
        store_(store),
        jobs_(jobs),
        health_(health),
        shared_(shared),
        stats_(stats) {}

  // The clients, once created: `kafka` publishes windows, commits the
  // group offsets and looks topics up (its delivery reports decrement
  // RuntimeShared::undelivered: commit_kafka.h); `changelog` is null
  // without --state-topic.
  void Connect(std::unique_ptr<CommitKafka> kafka,
               std::unique_ptr<StateChangelog> changelog) {
    kafka_ = std::move(kafka);
    changelog_ = std::move(changelog);
  }
  // Reads the windows topic's max.message.bytes through `client`
  // (DescribeConfigs, kDescribeTimeout at most; not when `known_bytes` > 0,
  // StreamProcessorOptions::windows_topic_max_bytes) and returns the
  // smaller of it and `producer_config`'s message.max.bytes: what
  // set_windows_limit wants. Lowers the producer's batch.size to it, so that
  // a batch of several windows fits the topic too. A missing topic (created
  // at the first assignment, with the broker's default) or no answer (the
  // mock cluster never answers) leaves the producer's limit, with a warning
  // for no answer. Call before the producer is created.
  static int64_t ReadWindowsLimit(rd_kafka_t* client, const std::string& topic,
                                  int64_t known_bytes,
                                  KafkaConfig& producer_config);
  // The most bytes one message of the windows topic may have: the smaller
  // of the topic's max.message.bytes and the producer's message.max.bytes
  // (StreamProcessor reads both at start). Windows larger are trimmed to
  // fit (processor/window_fit.h). Default: librdkafka's message.max.bytes.
  void set_windows_limit(int64_t bytes) { windows_limit_bytes_ = bytes; }
  // Run's stop flag while it runs (null: counts as stopping).
  void set_stop(const std::atomic<bool>* stop) { stop_ = stop; }

  // Windows finalized since the last commit (the loop appends to it).
  std::vector<WindowSummary>& pending_windows() { return pending_windows_; }
  // Window parts of split units finalized since the last commit
  // (PartitionJobs::TakeParts): published to options.parts_topic where
  // windows are published, before the progress is stored; never stored.
  std::vector<HostWindowPart>& pending_parts() { return pending_parts_; }
  // Late events and late collective records of `job`'s finalized windows
  // (window start -> count), to be added to the stored windows at the next
  // commit.
  void AddLateCounts(const std::string& job,
                     const absl::flat_hash_map<WindowStartNs, int64_t>& counts,
                     const absl::flat_hash_map<WindowStartNs, int64_t>&
                         collective_counts = {}) {
    for (const auto& [window, count] : counts) {
      pending_late_[{job, window}].events += count;
    }
    for (const auto& [window, count] : collective_counts) {
      pending_late_[{job, window}].collectives += count;
    }
  }
  // Something changed (a message, a job closed): the next Commit writes.
  void MarkUncommitted() { uncommitted_ = true; }

  // Picks the newer of the local and the changelog snapshot of `topic`'s
  // `partition`, sets `offset` to its resume offset (left as it is when
  // there is neither: the consumer's group offset applies) and returns it,
  // in its stored form, for PartitionJobs::AddPartition.
  absl::StatusOr<RestoredPartition> RestorePartition(const std::string& topic,
                                                     int32_t partition,
                                                     KafkaOffset& offset);
  // One assignment round is over (the changelog it created, if any, is no
  // longer new).
  void AssignmentDone() { changelog_created_now_ = false; }

  // One commit (docs/architecture.md#commit-protocol); nothing when nothing
  // changed and the observer wants no commit.
  absl::Status Commit(absl::Time now);
  // Waits until everything produced (windows, dead letters, snapshots) is
  // acknowledged, then commits the group offsets of the last Commit.
  // `sync`: wait for the broker's answer (revocation, shutdown).
  absl::Status FlushAndCommitOffsets(bool sync = false);

 private:
  // Looks the windows topic up, creating it when missing with the input
  // topic's partition count, compacted (fleet_topics.h), and sets
  // windows_partitions_. Failures only warn: publishing windows is not
  // what the store's correctness depends on.
  void PrepareWindowsTopic(int input_partitions);
  // The same for an output topic: looks `topic` up, creating it with
  // `configs` and the input topic's partition count when missing; returns
  // its partition count, 0 when unknown (a warning says why).
  int PrepareOutputTopic(const std::string& topic, const TopicConfigs& configs,
                         int input_partitions, absl::string_view what);
  // Commit's work; Commit makes its failure sticky.
  absl::Status CommitOnce(absl::Time now);
  // The partition record of `part` at `progress` (its jobs are per key).
  static PartitionSnapshot PartitionRecord(const PartitionState& part,
                                           const PartitionProgress& progress);
  // Fits `window` to the windows topic (trimming it in place, so the store
  // gets the same window) and enqueues it. librdkafka's queue being full is
  // waited out as a flush waits (delivery reports served meanwhile); any
  // other refusal fails the commit.
  absl::Status PublishWindow(WindowSummary& window, int64_t& trimmed);
  // Enqueues one part on options.parts_topic, key = its job, in the
  // partition of its job (as windows), waiting out a full queue as
  // PublishWindow does; any other refusal fails the commit.
  absl::Status PublishPart(const HostWindowPart& part);
  // PublishWindow's and PublishPart's enqueue: `what` names the record in
  // the error.
  absl::Status Enqueue(const std::string& topic, int32_t partition,
                       absl::string_view key, absl::string_view value,
                       absl::string_view what);

  const StreamProcessorOptions& options_;
  WindowStore* store_;
  PartitionJobs* jobs_;
  BrokerHealth* health_;
  RuntimeShared* shared_;
  StatsCell* stats_;
  std::unique_ptr<CommitKafka> kafka_;
  const std::atomic<bool>* stop_ = nullptr;

  std::unique_ptr<StateChangelog> changelog_;  // Null without --state-topic.
  // The changelog and the windows topic were looked up (and created when
  // missing) at the first assignment.
  bool topics_prepared_ = false;
  // The windows topic's partitions; 0 when unknown (windows then go where
  // their key hashes to).
  int windows_partitions_ = 0;
  int parts_partitions_ = 0;  // The same for the parts topic.
  int64_t windows_limit_bytes_ = 1'000'000;
  // The changelog was created by this assignment round: nothing to read.
  bool changelog_created_now_ = false;
  // Offsets of the last store commit, committed to the group once that
  // commit's snapshots are acknowledged (the next flush).
  std::vector<PartitionOffset> pending_group_offsets_;
  // The first failed commit; once set, Commit writes nothing more.
  absl::Status commit_failed_;
  std::vector<WindowSummary> pending_windows_;
  std::vector<HostWindowPart> pending_parts_;
  // Late counts of stored windows not yet written.
  PendingLateCounts pending_late_;
  bool uncommitted_ = false;
  absl::Time last_job_expiry_ = absl::Now();
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_COMMIT_PIPELINE_H_
