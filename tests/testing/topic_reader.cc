#include "tests/testing/topic_reader.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_handles.h"
#include "kafka/kafka_status.h"

namespace bubblewatch::testing {

absl::StatusOr<std::vector<ConsumedMessage>> ReadTopic(
    const std::string& brokers, const std::string& topic, size_t min_messages,
    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  KafkaConfig config(brokers);
  config.Set("group.id", "bubblewatch-test-reader");  // Never joined.
  config.Set("enable.auto.commit", "false");
  config.Set("enable.partition.eof", "true");
  ASSIGN_OR_RETURN(RdKafkaPtr consumer,
                   NewKafkaClient(RD_KAFKA_CONSUMER, config));

  // Partitions, from metadata (the topic may need a moment to appear).
  RdKafkaTopicPtr handle(
      rd_kafka_topic_new(consumer.get(), topic.c_str(), nullptr));
  int partitions = 0;
  while (partitions == 0) {
    const rd_kafka_metadata_t* raw = nullptr;
    rd_kafka_resp_err_t err =
        rd_kafka_metadata(consumer.get(), 0, handle.get(), &raw, 2000);
    RdKafkaMetadataPtr metadata(raw);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR && metadata->topic_cnt == 1 &&
        metadata->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      partitions = metadata->topics[0].partition_cnt;
    }
    if (partitions == 0 && absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("topic ", topic, " has no partitions at ", brokers));
    }
  }
  handle.reset();

  RdKafkaPartitionListPtr assignment(
      rd_kafka_topic_partition_list_new(partitions));
  for (int p = 0; p < partitions; ++p) {
    rd_kafka_topic_partition_list_add(assignment.get(), topic.c_str(), p)
        ->offset = RD_KAFKA_OFFSET_BEGINNING;
  }
  RETURN_IF_ERROR(KafkaErrorToStatus(
      rd_kafka_assign(consumer.get(), assignment.get()), "assign"));

  std::vector<ConsumedMessage> out;
  std::set<int32_t> at_end;
  while (absl::Now() < deadline) {
    if (out.size() >= min_messages &&
        at_end.size() == static_cast<size_t>(partitions)) {
      break;
    }
    RdKafkaMessagePtr m(rd_kafka_consumer_poll(consumer.get(), 200));
    if (m == nullptr) continue;
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      at_end.insert(m->partition);
      continue;
    }
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return KafkaErrorToStatus(m->err, absl::StrCat("consuming ", topic));
    }
    at_end.erase(m->partition);
    ConsumedMessage& c = out.emplace_back();
    c.partition = m->partition;
    c.offset = m->offset;
    if (m->key != nullptr) {
      c.key.assign(static_cast<const char*>(m->key), m->key_len);
    }
    c.value.assign(static_cast<const char*>(m->payload), m->len);
  }
  rd_kafka_consumer_close(consumer.get());
  if (out.size() < min_messages) {
    return absl::DeadlineExceededError(absl::StrCat(
        "read ", out.size(), " of ", min_messages, " messages from ", topic,
        " within ", absl::FormatDuration(timeout)));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return std::tie(a.partition, a.offset) < std::tie(b.partition, b.offset);
  });
  return out;
}

absl::StatusOr<int64_t> StoredMessageCount(const std::string& brokers,
                                           const std::string& topic,
                                           absl::Duration timeout) {
  KafkaConfig config(brokers);
  config.Set("group.id", "bubblewatch-test-reader");  // Never joined.
  config.Set("allow.auto.create.topics", "false");
  ASSIGN_OR_RETURN(RdKafkaPtr consumer,
                   NewKafkaClient(RD_KAFKA_CONSUMER, config));
  const int timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(timeout));
  RdKafkaTopicPtr handle(
      rd_kafka_topic_new(consumer.get(), topic.c_str(), nullptr));
  const rd_kafka_metadata_t* raw = nullptr;
  RETURN_IF_ERROR(KafkaErrorToStatus(
      rd_kafka_metadata(consumer.get(), 0, handle.get(), &raw, timeout_ms),
      "metadata"));
  RdKafkaMetadataPtr metadata(raw);
  if (metadata->topic_cnt != 1 ||
      metadata->topics[0].err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return 0;  // Not created yet.
  }
  int64_t count = 0;
  for (int p = 0; p < metadata->topics[0].partition_cnt; ++p) {
    int64_t low = 0;
    int64_t high = 0;
    RETURN_IF_ERROR(KafkaErrorToStatus(
        rd_kafka_query_watermark_offsets(consumer.get(), topic.c_str(), p, &low,
                                         &high, timeout_ms),
        "watermarks"));
    count += high;
  }
  return count;
}

}  // namespace bubblewatch::testing
