#include "ingest/event_producer.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "kafka/broker_features.h"
#include "kafka/kafka_status.h"

namespace bubblewatch {
namespace {

int ToMillis(absl::Duration d) {
  return static_cast<int>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(d), 0, INT32_MAX));
}

}  // namespace

absl::StatusOr<std::unique_ptr<EventProducer>> EventProducer::Create(
    KafkaConfig config, const EventProducerOptions& options) {
  // acks=-1 is librdkafka's spelling of acks=all.
  if (config.Get("acks") == "-1") config.Set("acks", "all");
  RETURN_IF_ERROR(config.Require("enable.idempotence", "true"));
  RETURN_IF_ERROR(config.Require("acks", "all"));
  RETURN_IF_ERROR(config.Require("partitioner", "murmur2_random"));
  config.SetDefault("compression.type", "lz4");
  config.SetDefault("linger.ms", absl::StrCat(ToMillis(options.linger)));
  config.SetDefault("batch.size", "1000000");
  config.SetDefault("message.timeout.ms",
                    absl::StrCat(ToMillis(options.delivery_timeout)));
  config.SetDefault("client.id", "bubblewatch-produce");
  config.WatchBrokerFeatures();
  spdlog::debug("Kafka producer properties: {}", config.DebugString());

  std::unique_ptr<EventProducer> producer(
      new EventProducer(options, config.brokers()));
  ASSIGN_OR_RETURN(RdKafkaConfPtr conf, config.Build());
  rd_kafka_conf_set_dr_msg_cb(conf.get(), &EventProducer::OnDelivery);
  rd_kafka_conf_set_opaque(conf.get(), producer.get());
  ASSIGN_OR_RETURN(producer->producer_,
                   NewKafkaClient(RD_KAFKA_PRODUCER, std::move(conf)));
  producer->topic_.reset(rd_kafka_topic_new(producer->producer_.get(),
                                            options.topic.c_str(), nullptr));
  if (producer->topic_ == nullptr) {
    return KafkaErrorToStatus(rd_kafka_last_error(),
                              absl::StrCat("topic ", options.topic));
  }
  return producer;
}

EventProducer::EventProducer(EventProducerOptions options, std::string brokers)
    : options_(std::move(options)), brokers_(std::move(brokers)) {}

EventProducer::~EventProducer() {
  // Topic handles must go before their client.
  topic_.reset();
  producer_.reset();
}

void EventProducer::OnDelivery(rd_kafka_t* /*rk*/,
                               const rd_kafka_message_t* message,
                               void* opaque) {
  auto* self = static_cast<EventProducer*>(opaque);
  const int64_t events = reinterpret_cast<intptr_t>(message->_private);
  if (message->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    self->batches_acked_.fetch_add(1);
    self->events_acked_.fetch_add(events);
    self->bytes_acked_.fetch_add(static_cast<int64_t>(message->len));
    return;
  }
  self->batches_failed_.fetch_add(1);
  self->events_failed_.fetch_add(events);
  std::lock_guard<std::mutex> lock(self->first_error_mu_);
  if (self->first_delivery_error_.ok()) {
    self->first_delivery_error_ = KafkaErrorToStatus(
        message->err, absl::StrCat("delivering to topic ", self->options_.topic,
                                   " at ", self->brokers_));
    spdlog::warn("first undelivered batch: {}",
                 std::string(self->first_delivery_error_.message()));
  }
}

absl::Status EventProducer::FatalError() const {
  char errstr[512];
  rd_kafka_resp_err_t err =
      rd_kafka_fatal_error(producer_.get(), errstr, sizeof(errstr));
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return absl::OkStatus();
  return absl::AbortedError(
      absl::StrCat("fatal Kafka producer error: ", RedactKafkaSecrets(errstr),
                   " (", rd_kafka_err2name(err), ")"));
}

absl::Status EventProducer::WaitUntilReachable(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status last = absl::DeadlineExceededError("no answer");
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    const rd_kafka_metadata_t* raw = nullptr;
    rd_kafka_resp_err_t err =
        rd_kafka_metadata(producer_.get(), /*all_topics=*/0, topic_.get(), &raw,
                          std::max(1, ToMillis(left)));
    RdKafkaMetadataPtr metadata(raw);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      last = KafkaErrorToStatus(err, "");
    } else if (metadata->topic_cnt < 1) {
      last = absl::UnavailableError("the topic is missing from the metadata");
    } else {
      const rd_kafka_metadata_topic_t& t = metadata->topics[0];
      // A topic being auto-created briefly has no leader: ask again.
      if (t.err == RD_KAFKA_RESP_ERR_NO_ERROR && t.partition_cnt > 0) {
        // A broker answered, so it has told librdkafka its features: log
        // them once, and refuse a broker without idempotent producers here
        // rather than on the first send.
        return ReportBrokerFeatures(producer_.get(), kNeedIdempotence,
                                    /*answered=*/true)
            .value_or(absl::OkStatus());
      }
      last = t.err != RD_KAFKA_RESP_ERR_NO_ERROR
                 ? KafkaErrorToStatus(t.err, "")
                 : absl::UnavailableError("the topic has no partitions yet");
    }
    if (absl::Status fatal = FatalError(); !fatal.ok()) {
      // librdkafka's own idempotence check may refuse the broker before
      // the metadata answer comes: say so the same way, with its features.
      if (KnownBrokerFeatures(rd_kafka_name(producer_.get()), true)) {
        absl::Status features =
            ReportBrokerFeatures(producer_.get(), kNeedIdempotence, true)
                .value_or(absl::OkStatus());
        if (!features.ok()) return features;
      }
      return fatal;
    }
    rd_kafka_poll(producer_.get(),
                  std::min(100, std::max(0, ToMillis(deadline - absl::Now()))));
  }
  const absl::StatusCode code = last.code() == absl::StatusCode::kNotFound
                                    ? absl::StatusCode::kNotFound
                                : last.code() == absl::StatusCode::kUnavailable
                                    ? absl::StatusCode::kUnavailable
                                    : absl::StatusCode::kDeadlineExceeded;
  return absl::Status(
      code,
      absl::StrCat("no Kafka broker at ", brokers_, " served topic ",
                   options_.topic, " within ", absl::FormatDuration(timeout),
                   " (last: ", last.message(), ")"));
}

absl::Status EventProducer::Send(absl::string_view key,
                                 std::span<const uint8_t> message,
                                 int64_t events) {
  absl::Time queue_full_since = absl::InfiniteFuture();
  while (true) {
    // RD_KAFKA_MSG_F_COPY: callers reuse their encode buffer at once.
    const int rc = rd_kafka_produce(
        topic_.get(), RD_KAFKA_PARTITION_UA, RD_KAFKA_MSG_F_COPY,
        const_cast<uint8_t*>(message.data()), message.size(), key.data(),
        key.size(), reinterpret_cast<void*>(static_cast<intptr_t>(events)));
    if (rc == 0) {
      batches_sent_.fetch_add(1);
      events_sent_.fetch_add(events);
      bytes_sent_.fetch_add(static_cast<int64_t>(message.size()));
      rd_kafka_poll(producer_.get(), 0);
      return absl::OkStatus();
    }
    const rd_kafka_resp_err_t err = rd_kafka_last_error();
    RETURN_IF_ERROR(FatalError());
    if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
      return KafkaErrorToStatus(
          err, absl::StrCat("queueing a batch of ", message.size(),
                            " bytes for topic ", options_.topic));
    }
    // Full queue: delivery reports free space, and every queued message is
    // reported within message.timeout.ms, so this wait is bounded.
    const absl::Time now = absl::Now();
    if (queue_full_since == absl::InfiniteFuture()) queue_full_since = now;
    if (now - queue_full_since >
        options_.delivery_timeout + absl::Seconds(10)) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the producer queue stayed full for ",
                       absl::FormatDuration(now - queue_full_since)));
    }
    rd_kafka_poll(producer_.get(), 10);
  }
}

void EventProducer::Poll(absl::Duration timeout) {
  rd_kafka_poll(producer_.get(), ToMillis(timeout));
}

absl::Status EventProducer::Flush(absl::Duration timeout) {
  const rd_kafka_resp_err_t flush_err =
      rd_kafka_flush(producer_.get(), ToMillis(timeout));
  if (flush_err == RD_KAFKA_RESP_ERR__TIMED_OUT) {
    // Turn what is still queued or in flight into failed delivery reports,
    // so the counters below are final.
    rd_kafka_purge(producer_.get(),
                   RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_flush(producer_.get(), 1000);
  }
  RETURN_IF_ERROR(FatalError());
  const ProducerStats s = stats();
  if (s.batches_acked == s.batches_sent) return absl::OkStatus();

  const int64_t undelivered_batches = s.batches_sent - s.batches_acked;
  const int64_t undelivered_events = s.events_sent - s.events_acked;
  absl::Status first;
  {
    std::lock_guard<std::mutex> lock(first_error_mu_);
    first = first_delivery_error_;
  }
  const absl::StatusCode code =
      !first.ok() ? first.code() : absl::StatusCode::kDeadlineExceeded;
  return absl::Status(
      code, absl::StrCat(
                undelivered_events, " of ", s.events_sent, " events (",
                undelivered_batches, " of ", s.batches_sent,
                " batches) were not delivered to topic ", options_.topic,
                " at ", brokers_,
                first.ok() ? absl::StrCat(": no acknowledgement within ",
                                          absl::FormatDuration(timeout))
                           : absl::StrCat("; first error: ", first.message())));
}

ProducerStats EventProducer::stats() const {
  ProducerStats s;
  // Outcomes before sends: a batch is counted sent before it can be
  // acknowledged, so in-flight never goes negative.
  s.batches_acked = batches_acked_.load();
  s.events_acked = events_acked_.load();
  s.bytes_acked = bytes_acked_.load();
  s.batches_failed = batches_failed_.load();
  s.events_failed = events_failed_.load();
  s.batches_sent = batches_sent_.load();
  s.events_sent = events_sent_.load();
  s.bytes_sent = bytes_sent_.load();
  return s;
}

}  // namespace bubblewatch
