#include "tests/testing/kafka_broker.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "kafka/kafka_admin.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_handles.h"

namespace bubblewatch::testing {

std::string Brokers() {
  const char* brokers = std::getenv("BUBBLEWATCH_KAFKA_BROKERS");
  if (brokers == nullptr || *brokers == '\0') {
    ADD_FAILURE() << "BUBBLEWATCH_KAFKA_BROKERS is not set: run through "
                     "ops/test, which starts a real broker";
    return "127.0.0.1:1";
  }
  return brokers;
}

std::string Unique(const std::string& base) {
  return base + "-" + std::to_string(getpid()) + "-" +
         std::to_string(
             std::chrono::steady_clock::now().time_since_epoch().count());
}

void CreateTopic(const std::string& topic, int partitions,
                 const std::string& brokers) {
  KafkaConfig config(brokers);
  absl::StatusOr<RdKafkaPtr> client = NewKafkaClient(RD_KAFKA_PRODUCER, config);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<bool> created = CreateTopicIfMissing(
      client->get(), topic, partitions, {}, absl::Seconds(30));
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_TRUE(*created);
  // Just created: it can be missing from the metadata for a moment.
  absl::StatusOr<int> count =
      CreatedTopicPartitionCount(client->get(), topic, absl::Seconds(30));
  ASSERT_TRUE(count.ok()) << count.status();
  ASSERT_EQ(*count, partitions);
}

}  // namespace bubblewatch::testing
