// The Kafka topics of a bubblewatch fleet and how each should be made:
// partitions, cleanup policy, retention. One place for the layout that
// `bubblewatch topics create` sets up and that `process` uses when it
// creates a missing windows or state topic itself (docs/topics.md says why
// each setting).
//
//   events   N partitions (the unit of scale-out: at most N processors
//            share the work), delete after `retention`, records bounded
//            after decompression (max.decompressed.message.bytes);
//   windows  N partitions, compact,delete: one record per (job, window)
//            kept for at least `retention`; co-partitioned with the events
//            (a job's windows go to the partition its events are in);
//   parts    N partitions, delete after `retention`: split jobs' window
//            parts (docs/architecture.md#one-job-across-processors), keyed
//            by job, so never compacted;
//   state    N partitions, compacted (the processor's changelog);
//   dlq      1 partition, delete after `retention`;
//   alerts   1 partition (one order of every alert event), delete after
//            `retention`.
#ifndef BUBBLEWATCH_PROCESSOR_FLEET_TOPICS_H_
#define BUBBLEWATCH_PROCESSOR_FLEET_TOPICS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kafka/kafka_admin.h"
#include "processor/batch_validator.h"
#include "schemas/time_types.h"

namespace bubblewatch {

using TopicConfigs = std::vector<std::pair<std::string, std::string>>;

// The recommended partition count of the events topic for a fleet: 12
// splits evenly over 1, 2, 3, 4, 6 or 12 processor instances.
inline constexpr int kDefaultFleetPartitions = 12;
// How long events, dead letters, alerts and (at least) windows are kept:
// Kafka's own default, and a week of replay for a rebuilt store.
inline constexpr absl::Duration kDefaultTopicRetention = absl::Hours(24 * 7);

// The configs of the windows topic. Keys are (job, window start)
// (WindowTopicKey), so compaction keeps a window's latest version (its
// late-event count included) and never two; deletion after `retention`
// (at least kDefaultTopicRetention) bounds the topic, as Kafka Streams does
// for its windowed changelogs.
TopicConfigs WindowsTopicConfigs(absl::Duration retention);

// The configs of the window parts topic: keyed by job (every part of a
// job in one partition, for stage 2), so deleted after `retention` (at
// least kDefaultTopicRetention, as windows), never compacted: compaction
// would keep one part per job.
TopicConfigs PartsTopicConfigs(absl::Duration retention);

// The configs of the processor's state changelog (one snapshot per input
// partition): compacted, with segments rolled often so that it stays about
// one record per partition.
TopicConfigs StateTopicConfigs();

// The configs of a plain topic (events, dead letters, alerts).
TopicConfigs DeleteTopicConfigs(absl::Duration retention);

// The topic config (Kafka 4.4 and later) with which the broker refuses a
// record larger than its value once decompressed, at produce time. Set on
// the events topic to the processor's batch limit, it keeps a compressed
// bomb (an lz4 record of a few MB that inflates to gigabytes) out of the
// topic: librdkafka inflates a fetched message set without a bound of its
// own, so the processor's check comes only after the memory is spent.
inline constexpr char kMaxDecompressedRecordConfig[] =
    "max.decompressed.message.bytes";

// The configs of the events topic: DeleteTopicConfigs, and records bounded
// to `max_record_bytes` after decompression (0: no bound).
TopicConfigs EventsTopicConfigs(absl::Duration retention,
                                int64_t max_record_bytes);

// Creates `spec` if missing (CreateTopicIfMissing). A broker that does not
// know kMaxDecompressedRecordConfig (before Kafka 4.4) refuses the whole
// topic; it is then created without that config, and *dropped_config says
// so (it is set to "" otherwise).
absl::StatusOr<bool> CreateFleetTopicIfMissing(rd_kafka_t* client,
                                               TopicSpec spec,
                                               absl::Duration timeout,
                                               std::string* dropped_config);

// The key of a window on the windows topic: "JOB@START_NS" (the window's
// start, nanoseconds since the epoch, in decimal). Unique per (job, window),
// also for jobs whose name holds '@': the part after the last '@' is the
// start. Readable with kcat; the value (the encoded WindowSummary) carries
// both fields, so consumers need not parse it.
std::string WindowTopicKey(absl::string_view job,
                           WindowStartNs window_start_ns);

// Splits a WindowTopicKey back into the job and the window start (what a
// tombstone, which has no value, says). Returns false when `key` is not one:
// no '@', an empty job, or no decimal integer after the last '@'.
bool ParseWindowTopicKey(absl::string_view key, std::string* job,
                         WindowStartNs* window_start_ns);

// The partition of a window of `job` on a windows topic of `partitions`
// partitions: murmur2(job) mod partitions, the partition the producer's
// murmur2 partitioner gives the job's events on an events topic of as many
// partitions. Every version of a window thus stays in one partition, in
// order, and the windows topic is co-partitioned with the events.
int32_t WindowTopicPartition(absl::string_view job, int partitions);

struct FleetTopicOptions {
  int partitions = kDefaultFleetPartitions;
  int replication_factor = -1;  // -1: the broker's default.
  absl::Duration retention = kDefaultTopicRetention;
  // The largest events record the broker accepts once decompressed: the
  // processor's default batch limit (BatchLimits::max_batch_bytes), so that
  // what the broker takes, the processor can decode. 0: no bound.
  int64_t max_record_bytes = BatchLimits{}.max_batch_bytes;
  // The names, as `process` takes them; "" leaves that topic out.
  std::string events_topic = "bubblewatch.events";
  std::string windows_topic = "bubblewatch.windows";
  std::string parts_topic = "bubblewatch.window-parts";
  std::string state_topic = "bubblewatch.processor.state";
  std::string dlq_topic = "bubblewatch.events.dlq";
  std::string alerts_topic = "bubblewatch.alerts";
};

// The topics to create for a fleet, in the order above, without those
// whose name is "".
std::vector<TopicSpec> FleetTopicSpecs(const FleetTopicOptions& options);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_FLEET_TOPICS_H_
