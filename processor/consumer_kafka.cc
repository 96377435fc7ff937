#include "processor/consumer_kafka.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_status.h"

namespace bubblewatch {
namespace {

// The headers of `source`, an rd_kafka_message_t (ConsumedMessage).
MessageHeaders ReadHeaders(const void* source) {
  const auto* message = static_cast<const rd_kafka_message_t*>(source);
  MessageHeaders out;
  rd_kafka_headers_t* original = nullptr;
  if (rd_kafka_message_headers(message, &original) !=
      RD_KAFKA_RESP_ERR_NO_ERROR) {
    return out;
  }
  const char* name = nullptr;
  const void* value = nullptr;
  size_t size = 0;
  for (size_t i = 0;
       rd_kafka_header_get_all(original, i, &name, &value, &size) ==
       RD_KAFKA_RESP_ERR_NO_ERROR;
       ++i) {
    out.emplace_back(name,
                     value == nullptr
                         ? std::string()
                         : std::string(static_cast<const char*>(value), size));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RdKafkaConsumerKafka>>
RdKafkaConsumerKafka::Create(
    RdKafkaConfPtr conf, Listener* listener,
    std::function<void(rd_kafka_t*, int, const char*)> on_client_error) {
  std::unique_ptr<RdKafkaConsumerKafka> self(
      new RdKafkaConsumerKafka(listener, std::move(on_client_error)));
  rd_kafka_conf_set_rebalance_cb(conf.get(), &RebalanceCallback);
  rd_kafka_conf_set_error_cb(conf.get(), &ErrorCallback);
  rd_kafka_conf_set_opaque(conf.get(), self.get());
  ASSIGN_OR_RETURN(self->consumer_,
                   NewKafkaClient(RD_KAFKA_CONSUMER, std::move(conf)));
  rd_kafka_poll_set_consumer(self->consumer_.get());
  return self;
}

absl::Status RdKafkaConsumerKafka::Subscribe(const std::string& topic) {
  topic_ = topic;
  RdKafkaPartitionListPtr topics(rd_kafka_topic_partition_list_new(1));
  rd_kafka_topic_partition_list_add(topics.get(), topic.c_str(),
                                    RD_KAFKA_PARTITION_UA);
  return KafkaErrorToStatus(rd_kafka_subscribe(consumer_.get(), topics.get()),
                            absl::StrCat("subscribing to ", topic));
}

void RdKafkaConsumerKafka::RebalanceCallback(
    rd_kafka_t* rk, rd_kafka_resp_err_t err,
    rd_kafka_topic_partition_list_t* partitions, void* opaque) {
  auto* self = static_cast<RdKafkaConsumerKafka*>(opaque);
  bool cooperative =
      std::string_view(rd_kafka_rebalance_protocol(rk)) == "COOPERATIVE";
  if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
    self->OnAssign(partitions);
    if (cooperative) {
      RdKafkaErrorPtr error(rd_kafka_incremental_assign(rk, partitions));
      if (error) {
        self->rebalance_failure_ = KafkaErrorToStatus(error.get(), "assigning");
      }
    } else {
      rd_kafka_assign(rk, partitions);
    }
  } else {
    self->OnRevoke(partitions);
    if (cooperative) {
      RdKafkaErrorPtr error(rd_kafka_incremental_unassign(rk, partitions));
      if (error) {
        self->rebalance_failure_ =
            KafkaErrorToStatus(error.get(), "unassigning");
      }
    } else {
      rd_kafka_assign(rk, nullptr);
    }
  }
}

void RdKafkaConsumerKafka::ErrorCallback(rd_kafka_t* rk, int err,
                                         const char* reason, void* opaque) {
  auto* self = static_cast<RdKafkaConsumerKafka*>(opaque);
  if (self->on_client_error_) self->on_client_error_(rk, err, reason);
}

void RdKafkaConsumerKafka::OnAssign(
    rd_kafka_topic_partition_list_t* partitions) {
  std::vector<PartitionTask::Assigned> assigned;
  assigned.reserve(partitions->cnt);
  for (int i = 0; i < partitions->cnt; ++i) {
    assigned.push_back({.partition = partitions->elems[i].partition,
                        .offset = partitions->elems[i].offset});
  }
  listener_->OnAssigned(assigned);
  for (int i = 0; i < partitions->cnt; ++i) {
    partitions->elems[i].offset = assigned[i].offset;
    fetch_wakeup_.Forget(topic_, assigned[i].partition);
  }
}

void RdKafkaConsumerKafka::OnRevoke(
    rd_kafka_topic_partition_list_t* partitions) {
  std::vector<int32_t> revoked;
  revoked.reserve(partitions->cnt);
  for (int i = 0; i < partitions->cnt; ++i) {
    revoked.push_back(partitions->elems[i].partition);
    fetch_wakeup_.Forget(topic_, partitions->elems[i].partition);
  }
  listener_->OnRevoked(revoked);
}

void RdKafkaConsumerKafka::WakeStalledFetches(absl::Time now) {
  std::optional<std::vector<std::pair<int32_t, int64_t>>> lagging =
      listener_->Lagging();
  if (!lagging.has_value()) return;
  std::vector<FetchWakeup::Position> positions;
  for (const auto& [p, next_offset] : *lagging) {
    positions.push_back(
        {.topic = topic_, .partition = p, .next_offset = next_offset});
  }
  fetch_wakeup_.WakeIfStalled(consumer_.get(), positions, now);
}

ConsumerKafka::Event RdKafkaConsumerKafka::Poll(absl::Duration timeout) {
  current_.reset();
  current_.reset(rd_kafka_consumer_poll(
      consumer_.get(), static_cast<int>(absl::ToInt64Milliseconds(timeout))));
  Event event;
  if (!rebalance_failure_.ok()) {
    event.kind = Event::Kind::kError;
    event.error = std::exchange(rebalance_failure_, absl::OkStatus());
    event.fatal = true;
    return event;
  }
  const absl::Time now = absl::Now();
  if (current_ == nullptr) {
    WakeStalledFetches(now);
    return event;
  }
  fetch_wakeup_.OnMessage(now);
  const rd_kafka_message_t& message = *current_;
  event.partition = message.partition;
  if (message.err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    if (fetch_wakeup_.Refetched(topic_, message.partition, message.offset,
                                listener_->NextOffset(message.partition))) {
      // Handled before a seek of WakeStalledFetches: skipped.
      event.kind = Event::Kind::kRefetched;
      return event;
    }
    event.kind = Event::Kind::kMessage;
    event.message = ConsumedMessage{
        .partition = message.partition,
        .offset = message.offset,
        .payload = {static_cast<const uint8_t*>(message.payload), message.len},
        .key = absl::string_view(static_cast<const char*>(message.key),
                                 message.key_len),
        .read_headers = &ReadHeaders,
        .headers_source = current_.get()};
    return event;
  }
  if (message.err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
    event.kind = Event::Kind::kEndOfPartition;
    return event;
  }
  event.kind = Event::Kind::kError;
  event.code = message.err;
  event.error = KafkaErrorToStatus(message.err, "consuming");
  event.fatal = rd_kafka_fatal_error(consumer_.get(), nullptr, 0) !=
                RD_KAFKA_RESP_ERR_NO_ERROR;
  return event;
}

std::optional<int64_t> RdKafkaConsumerKafka::HighWatermark(int32_t partition) {
  int64_t low = 0, high = 0;
  if (rd_kafka_get_watermark_offsets(consumer_.get(), topic_.c_str(), partition,
                                     &low,
                                     &high) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return std::nullopt;
  }
  return high;
}

void RdKafkaConsumerKafka::Close() {
  if (consumer_ == nullptr || closed_) return;
  closed_ = true;
  current_.reset();
  fetch_wakeup_.LogSummary();
  rd_kafka_consumer_close(consumer_.get());
}

}  // namespace bubblewatch
