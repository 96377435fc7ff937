#include "processor/commit_kafka.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
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

absl::Status RdKafkaChangelogKafka::ProduceRecord(
    const std::string& topic, int32_t partition, absl::string_view key,
    std::optional<absl::string_view> value, absl::string_view what) {
  for (;;) {
    rd_kafka_resp_err_t err = rd_kafka_producev(
        producer_, RD_KAFKA_V_TOPIC(topic.c_str()),
        RD_KAFKA_V_PARTITION(partition), RD_KAFKA_V_KEY(key.data(), key.size()),
        RD_KAFKA_V_VALUE((value ? const_cast<char*>(value->data()) : nullptr),
                         (value ? value->size() : 0)),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
    // A commit that changed many jobs can fill librdkafka's queue
    // (queue.buffering.max.messages): serve delivery reports until it
    // has room, as a blocking produce would.
    if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
      rd_kafka_poll(producer_, 100);
      continue;
    }
    return KafkaErrorToStatus(
        err, absl::StrCat("writing ", what, " of ", key, " to ", topic));
  }
}

absl::StatusOr<int> RdKafkaChangelogKafka::TopicPartitions(
    const std::string& topic, bool just_created, absl::Duration timeout) {
  return just_created
             ? CreatedTopicPartitionCount(reader_.get(), topic, timeout)
             : TopicPartitionCount(reader_.get(), topic, timeout);
}

absl::StatusOr<bool> RdKafkaChangelogKafka::CreateTopic(
    const TopicSpec& spec, absl::Duration timeout) {
  return bubblewatch::CreateTopicIfMissing(reader_.get(), spec, timeout);
}

absl::Status RdKafkaChangelogKafka::ReadPartition(
    const std::string& topic, int32_t partition, absl::Duration timeout,
    absl::FunctionRef<void(const Record&)> visit) {
  int64_t low = 0, high = 0;
  // A just-created topic has no partition leaders for a moment: retry
  // what librdkafka calls retriable until the deadline.
  const absl::Time offsets_deadline = absl::Now() + timeout;
  for (;;) {
    rd_kafka_resp_err_t err = rd_kafka_query_watermark_offsets(
        reader_.get(), topic.c_str(), partition, &low, &high,
        static_cast<int>(absl::ToInt64Milliseconds(timeout)));
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) break;
    const bool retriable = err == RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION ||
                           err == RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE ||
                           err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
                           err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION ||
                           err == RD_KAFKA_RESP_ERR__TRANSPORT;
    if (!retriable || absl::Now() > offsets_deadline) {
      return KafkaErrorToStatus(
          err, absl::StrCat("reading the offsets of ", topic, "/", partition));
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  if (high <= low) return absl::OkStatus();
  RdKafkaPartitionListPtr assignment(rd_kafka_topic_partition_list_new(1));
  rd_kafka_topic_partition_list_add(assignment.get(), topic.c_str(), partition)
      ->offset = low;
  RETURN_IF_ERROR(
      KafkaErrorToStatus(rd_kafka_assign(reader_.get(), assignment.get()),
                         absl::StrCat("assigning ", topic, "/", partition)));
  absl::Time deadline = absl::Now() + timeout;
  absl::Status status = absl::OkStatus();
  int64_t records = 0;
  bool done = false;
  while (!done) {
    if (absl::Now() > deadline) {
      status = absl::DeadlineExceededError(
          absl::StrCat("reading ", topic, "/", partition, ": no record for ",
                       absl::FormatDuration(timeout), " after ", records,
                       " of about ", high - low));
      break;
    }
    RdKafkaMessagePtr m(rd_kafka_consumer_poll(reader_.get(), 100));
    if (!m) continue;
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) break;
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      status = KafkaErrorToStatus(m->err, absl::StrCat("reading ", topic));
      break;
    }
    deadline = absl::Now() + timeout;
    ++records;
    done = m->offset >= high - 1;
    Record r{
        .offset = m->offset,
        .key = absl::string_view(static_cast<const char*>(m->key), m->key_len)};
    if (m->payload != nullptr) {
      r.value = absl::string_view(static_cast<const char*>(m->payload), m->len);
    }
    visit(r);
  }
  rd_kafka_assign(reader_.get(), nullptr);
  return status;
}

std::optional<DeadLetterError> RdKafkaDeadLetterKafka::ProduceDeadLetter(
    const std::string& topic, const DeadLetter& letter,
    std::unique_ptr<DeadLetter> fallback) {
  rd_kafka_headers_t* headers =
      rd_kafka_headers_new(static_cast<int>(letter.headers.size()));
  for (const auto& [name, value] : letter.headers) {
    rd_kafka_header_add(headers, name.data(), static_cast<ssize_t>(name.size()),
                        value.data(), static_cast<ssize_t>(value.size()));
  }
  rd_kafka_resp_err_t err = rd_kafka_producev(
      producer_, RD_KAFKA_V_TOPIC(topic.c_str()),
      RD_KAFKA_V_KEY(letter.key.data(), letter.key.size()),
      RD_KAFKA_V_VALUE(const_cast<char*>(letter.payload.data()),
                       letter.payload.size()),
      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(headers),
      RD_KAFKA_V_OPAQUE(fallback.get()), RD_KAFKA_V_END);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    rd_kafka_headers_destroy(headers);  // Owned by librdkafka only on success.
    return DeadLetterDeliveryError(err);
  }
  fallback.release();  // The delivery report frees it.
  return std::nullopt;
}

DeadLetterError DeadLetterDeliveryError(rd_kafka_resp_err_t err) {
  const bool refused = err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ||
                       err == RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE ||
                       err == RD_KAFKA_RESP_ERR_INVALID_RECORD ||
                       err == RD_KAFKA_RESP_ERR_INVALID_MSG ||
                       err == RD_KAFKA_RESP_ERR_POLICY_VIOLATION;
  return DeadLetterError{
      .refused = refused,
      .status = refused ? absl::OkStatus()
                        : KafkaErrorToStatus(
                              err, "delivering to the dead-letter topic"),
      .description = rd_kafka_err2str(err)};
}

}  // namespace bubblewatch
