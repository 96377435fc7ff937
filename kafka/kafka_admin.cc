#include "kafka/kafka_admin.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kafka/kafka_handles.h"
#include "kafka/kafka_status.h"

namespace bubblewatch {
namespace {

int TimeoutMs(absl::Duration timeout) {
  return static_cast<int>(absl::ToInt64Milliseconds(timeout));
}

}  // namespace

absl::StatusOr<int> TopicPartitionCount(rd_kafka_t* client,
                                        absl::string_view topic,
                                        absl::Duration timeout) {
  const rd_kafka_metadata_t* raw = nullptr;
  rd_kafka_resp_err_t err = rd_kafka_metadata(client, /*all_topics=*/1, nullptr,
                                              &raw, TimeoutMs(timeout));
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return KafkaErrorToStatus(err, "reading topic metadata");
  }
  RdKafkaMetadataPtr metadata(raw);
  for (int i = 0; i < metadata->topic_cnt; ++i) {
    const rd_kafka_metadata_topic_t& t = metadata->topics[i];
    if (topic != t.topic) continue;
    if (t.err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return KafkaErrorToStatus(t.err, absl::StrCat("topic ", topic));
    }
    return t.partition_cnt;
  }
  return absl::NotFoundError(absl::StrCat("topic ", topic, " does not exist"));
}

absl::StatusOr<int> CreatedTopicPartitionCount(rd_kafka_t* client,
                                               absl::string_view topic,
                                               absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<int> count = TopicPartitionCount(client, topic, timeout);
  while (absl::IsNotFound(count.status()) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(200));
    count = TopicPartitionCount(client, topic, timeout);
  }
  return count;
}

absl::StatusOr<bool> CreateTopicIfMissing(
    rd_kafka_t* client, absl::string_view topic, int partitions,
    const std::vector<std::pair<std::string, std::string>>& configs,
    absl::Duration timeout) {
  const std::string name(topic);
  char errstr[512] = {};
  rd_kafka_NewTopic_t* new_topic =
      rd_kafka_NewTopic_new(name.c_str(), partitions, /*replication_factor=*/-1,
                            errstr, sizeof(errstr));
  if (new_topic == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("topic ", name, ": ", errstr));
  }
  std::unique_ptr<rd_kafka_NewTopic_t, decltype(&rd_kafka_NewTopic_destroy)>
      owned(new_topic, &rd_kafka_NewTopic_destroy);
  for (const auto& [key, value] : configs) {
    rd_kafka_resp_err_t err =
        rd_kafka_NewTopic_set_config(new_topic, key.c_str(), value.c_str());
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return KafkaErrorToStatus(err, absl::StrCat("topic config ", key));
    }
  }
  std::unique_ptr<rd_kafka_queue_t, decltype(&rd_kafka_queue_destroy)> queue(
      rd_kafka_queue_new(client), &rd_kafka_queue_destroy);
  std::unique_ptr<rd_kafka_AdminOptions_t,
                  decltype(&rd_kafka_AdminOptions_destroy)>
      options(rd_kafka_AdminOptions_new(client, RD_KAFKA_ADMIN_OP_CREATETOPICS),
              &rd_kafka_AdminOptions_destroy);
  rd_kafka_AdminOptions_set_request_timeout(options.get(), TimeoutMs(timeout),
                                            errstr, sizeof(errstr));
  rd_kafka_CreateTopics(client, &new_topic, 1, options.get(), queue.get());
  std::unique_ptr<rd_kafka_event_t, decltype(&rd_kafka_event_destroy)> event(
      rd_kafka_queue_poll(queue.get(), TimeoutMs(timeout + absl::Seconds(1))),
      &rd_kafka_event_destroy);
  if (!event) {
    return absl::DeadlineExceededError(
        absl::StrCat("creating topic ", name, ": no answer within ",
                     absl::FormatDuration(timeout)));
  }
  if (rd_kafka_event_error(event.get()) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return KafkaErrorToStatus(rd_kafka_event_error(event.get()),
                              absl::StrCat("creating topic ", name));
  }
  const rd_kafka_CreateTopics_result_t* result =
      rd_kafka_event_CreateTopics_result(event.get());
  size_t count = 0;
  const rd_kafka_topic_result_t** topics =
      rd_kafka_CreateTopics_result_topics(result, &count);
  bool created = false;
  for (size_t i = 0; i < count; ++i) {
    rd_kafka_resp_err_t err = rd_kafka_topic_result_error(topics[i]);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      created = true;
      continue;
    }
    if (err == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) continue;
    const char* message = rd_kafka_topic_result_error_string(topics[i]);
    return KafkaErrorToStatus(
        err, absl::StrCat("creating topic ", name,
                          message != nullptr ? absl::StrCat(": ", message)
                                             : std::string()));
  }
  return created;
}

}  // namespace bubblewatch
