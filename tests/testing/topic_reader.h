// ReadTopic: a plain librdkafka consumer for tests. Reads a topic from the
// beginning of every partition, with no consumer group (assign, not
// subscribe), so that tests see exactly what the brokers stored.
#ifndef BUBBLEWATCH_TESTS_TESTING_TOPIC_READER_H_
#define BUBBLEWATCH_TESTS_TESTING_TOPIC_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace bubblewatch::testing {

struct ConsumedMessage {
  int32_t partition = 0;
  int64_t offset = 0;
  std::string key;
  std::string value;
};

// Reads until it has at least `min_messages` and has reached the end of
// every partition, or until `timeout`. Returns what it read, in partition
// then offset order; kDeadlineExceeded (with the count) if fewer than
// `min_messages` arrived in time.
absl::StatusOr<std::vector<ConsumedMessage>> ReadTopic(
    const std::string& brokers, const std::string& topic, size_t min_messages,
    absl::Duration timeout);

// The messages the brokers hold for `topic` now: the sum over its
// partitions of the high watermarks (a topic that does not exist yet holds
// 0). Cheap enough to poll every few milliseconds, unlike ReadTopic.
absl::StatusOr<int64_t> StoredMessageCount(const std::string& brokers,
                                           const std::string& topic,
                                           absl::Duration timeout);

}  // namespace bubblewatch::testing

#endif  // BUBBLEWATCH_TESTS_TESTING_TOPIC_READER_H_
