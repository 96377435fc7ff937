// Topic administration: how many partitions a topic has, creating a topic
// (e.g. a compacted changelog) when it is missing, and describing topics
// (partitions, replication factor, configs) for `bubblewatch topics`.
// Blocking calls with a deadline; meant for start-up, rebalances and the
// command line, not the per-message path. Any client handle works (the
// admin API needs no dedicated one).
#ifndef BUBBLEWATCH_KAFKA_KAFKA_ADMIN_H_
#define BUBBLEWATCH_KAFKA_KAFKA_ADMIN_H_

#include <librdkafka/rdkafka.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace bubblewatch {

// The number of partitions of `topic`, from a metadata request for all
// topics (asking for the one topic could make the broker auto-create it).
// Errors: kNotFound when the topic does not exist; Kafka errors otherwise.
absl::StatusOr<int> TopicPartitionCount(rd_kafka_t* client,
                                        absl::string_view topic,
                                        absl::Duration timeout);

// TopicPartitionCount for a topic that was just created (by this client or
// another): the broker's metadata can miss it for a moment, so kNotFound is
// retried every 200 ms until `timeout` has passed.
absl::StatusOr<int> CreatedTopicPartitionCount(rd_kafka_t* client,
                                               absl::string_view topic,
                                               absl::Duration timeout);

// Creates `topic` with `partitions` partitions, the broker's default
// replication factor and the given topic configs (e.g. cleanup.policy =
// compact). An existing topic is left as it is and is not an error. Returns
// true when this call created the topic.
absl::StatusOr<bool> CreateTopicIfMissing(
    rd_kafka_t* client, absl::string_view topic, int partitions,
    const std::vector<std::pair<std::string, std::string>>& configs,
    absl::Duration timeout);

// A topic to create: what CreateTopics sends.
struct TopicSpec {
  std::string name;
  int partitions = 1;
  int replication_factor = -1;  // -1: the broker's default.replication.factor.
  std::vector<std::pair<std::string, std::string>> configs;
};

// CreateTopicIfMissing for a full spec (replication factor included).
absl::StatusOr<bool> CreateTopicIfMissing(rd_kafka_t* client,
                                          const TopicSpec& spec,
                                          absl::Duration timeout);

// What the cluster says of one topic.
struct TopicDescription {
  std::string name;
  bool exists = false;
  int partitions = 0;
  // Replicas of partition 0 (Kafka gives every partition of a topic as many
  // unless someone reassigned them by hand).
  int replication_factor = 0;
  // The topic's effective configs (cleanup.policy, retention.ms, ...): its
  // own overrides and the broker's defaults, as DescribeConfigs reports.
  std::map<std::string, std::string> configs;
};

// Describes each of `topics`: a missing one has exists == false and nothing
// else; an error of the request (or of one existing topic's configs) is
// returned as is.
absl::StatusOr<std::vector<TopicDescription>> DescribeTopics(
    rd_kafka_t* client, const std::vector<std::string>& topics,
    absl::Duration timeout);

// The `max.message.bytes` of `topic` (what the broker accepts as one record
// batch of it), from DescribeConfigs; nullopt when the topic does not exist.
// Errors: kDeadlineExceeded when no answer came within `timeout` (the mock
// cluster never answers DescribeConfigs); Kafka errors otherwise.
absl::StatusOr<std::optional<int64_t>> TopicMaxMessageBytes(
    rd_kafka_t* client, const std::string& topic, absl::Duration timeout);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_KAFKA_KAFKA_ADMIN_H_
