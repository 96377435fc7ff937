#include "processor/commit_kafka.h"

#include <string>
#include <vector>

#include "kafka/kafka_handles.h"
#include "kafka/kafka_status.h"

namespace bubblewatch {

absl::Status RdKafkaCommitKafka::Produce(const std::string& topic,
                                         int32_t partition,
                                         absl::string_view key,
                                         absl::string_view value) {
  const rd_kafka_resp_err_t err = rd_kafka_producev(
      producer_, RD_KAFKA_V_TOPIC(topic.c_str()),
      RD_KAFKA_V_PARTITION(partition == kAnyPartition ? RD_KAFKA_PARTITION_UA
                                                      : partition),
      RD_KAFKA_V_KEY(key.data(), key.size()),
      RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
  return KafkaErrorToStatus(err, "");
}

void RdKafkaCommitKafka::Poll(absl::Duration timeout) {
  rd_kafka_poll(producer_,
                static_cast<int>(absl::ToInt64Milliseconds(timeout)));
}

void RdKafkaCommitKafka::Flush(absl::Duration timeout) {
  rd_kafka_flush(producer_,
                 static_cast<int>(absl::ToInt64Milliseconds(timeout)));
}

absl::Status RdKafkaCommitKafka::CommitOffsets(
    const std::vector<PartitionOffset>& offsets, bool sync) {
  RdKafkaPartitionListPtr list(
      rd_kafka_topic_partition_list_new(static_cast<int>(offsets.size())));
  for (const PartitionOffset& o : offsets) {
    rd_kafka_topic_partition_list_add(list.get(), o.topic.c_str(), o.partition)
        ->offset = o.offset;
  }
  const rd_kafka_resp_err_t err =
      rd_kafka_commit(consumer_, list.get(), /*async=*/sync ? 0 : 1);
  return KafkaErrorToStatus(err, "committing group offsets");
}

absl::StatusOr<int> RdKafkaCommitKafka::PartitionCount(const std::string& topic,
                                                       bool just_created,
                                                       absl::Duration timeout) {
  return just_created ? CreatedTopicPartitionCount(consumer_, topic, timeout)
                      : TopicPartitionCount(consumer_, topic, timeout);
}

absl::StatusOr<bool> RdKafkaCommitKafka::CreateTopicIfMissing(
    const TopicSpec& spec, absl::Duration timeout) {
  return bubblewatch::CreateTopicIfMissing(consumer_, spec, timeout);
}

}  // namespace bubblewatch
