// Topic administration the processor needs at run time: how many partitions
// a topic has, and creating a topic (e.g. a compacted changelog) when it is
// missing. Blocking calls with a deadline; meant for start-up and rebalances,
// not the per-message path.
#ifndef BUBBLEWATCH_KAFKA_KAFKA_ADMIN_H_
#define BUBBLEWATCH_KAFKA_KAFKA_ADMIN_H_

#include <librdkafka/rdkafka.h>

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

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_KAFKA_KAFKA_ADMIN_H_
