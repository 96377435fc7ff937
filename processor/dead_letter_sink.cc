#include "processor/dead_letter_sink.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/text_escape.h"
#include "kafka/kafka_status.h"
#include "spdlog/spdlog.h"

namespace bubblewatch {

bool DeadLetterSink::Produce(const DeadLetter& letter,
                             std::unique_ptr<DeadLetter> fallback,
                             rd_kafka_resp_err_t* error) {
  rd_kafka_headers_t* headers =
      rd_kafka_headers_new(static_cast<int>(letter.headers.size()));
  for (const auto& [name, value] : letter.headers) {
    rd_kafka_header_add(headers, name.data(), static_cast<ssize_t>(name.size()),
                        value.data(), static_cast<ssize_t>(value.size()));
  }
  ++shared_->undelivered;
  rd_kafka_resp_err_t err = rd_kafka_producev(
      producer_, RD_KAFKA_V_TOPIC(dlq_topic_.c_str()),
      RD_KAFKA_V_KEY(letter.key.data(), letter.key.size()),
      RD_KAFKA_V_VALUE(const_cast<char*>(letter.payload.data()),
                       letter.payload.size()),
      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(headers),
      RD_KAFKA_V_OPAQUE(fallback.get()), RD_KAFKA_V_END);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    --shared_->undelivered;
    rd_kafka_headers_destroy(headers);  // Owned by librdkafka only on success.
    *error = err;
    return false;
  }
  fallback.release();  // The delivery report frees it.
  return true;
}

// The bounded form did not fit the topic (its max.message.bytes is lower
// than the broker's default), or was refused for good: the minimal form
// goes instead, and the consumer moves on once that one is acknowledged.
// If even that is refused, the loss is logged and counted, never fatal: a
// dead-letter topic the processor cannot write to must not stop the fleet.
// Errors that mean the broker is away (a timed-out message) stay fatal, as
// for windows and snapshots: the offsets must not move past an
// unacknowledged dead letter, and a restart retries it.
void DeadLetterSink::OnDeliveryFailed(const rd_kafka_message_t& message,
                                      std::unique_ptr<DeadLetter> minimal) {
  const rd_kafka_resp_err_t err = message.err;
  const bool refused = err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ||
                       err == RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE ||
                       err == RD_KAFKA_RESP_ERR_INVALID_RECORD ||
                       err == RD_KAFKA_RESP_ERR_INVALID_MSG ||
                       err == RD_KAFKA_RESP_ERR_POLICY_VIOLATION;
  if (!refused) {
    shared_->fatal =
        KafkaErrorToStatus(err, "delivering to the dead-letter topic");
    return;
  }
  if (!minimal->headers.empty()) {
    spdlog::warn("{} refused a dead letter ({}); sending its minimal form",
                 dlq_topic_, rd_kafka_err2str(err));
    DeadLetter retry = std::move(*minimal);
    rd_kafka_resp_err_t produce_err = RD_KAFKA_RESP_ERR_NO_ERROR;
    // The minimal form's own fallback is empty: no third try.
    if (Produce(retry, std::make_unique<DeadLetter>(), &produce_err)) {
      return;
    }
  }
  spdlog::error(
      "{} refused the dead letter of a rejected message even in its minimal "
      "form ({}); counted in bubblewatch_dead_letters_lost_total",
      dlq_topic_, rd_kafka_err2str(err));
  absl::MutexLock lock(&stats_->mu);
  ++stats_->stats.dead_letters_lost;
}

void DeadLetterSink::Send(const rd_kafka_message_t& message,
                          absl::string_view reason, absl::string_view detail,
                          const BatchHeader* source) {
  RejectedMessage rejected{
      .topic = input_topic_,
      .partition = message.partition,
      .offset = message.offset,
      .key = absl::string_view(static_cast<const char*>(message.key),
                               message.key_len),
      .payload = absl::string_view(static_cast<const char*>(message.payload),
                                   message.len)};
  rd_kafka_headers_t* original = nullptr;
  if (rd_kafka_message_headers(&message, &original) ==
      RD_KAFKA_RESP_ERR_NO_ERROR) {
    const char* name = nullptr;
    const void* value = nullptr;
    size_t size = 0;
    for (size_t i = 0;
         rd_kafka_header_get_all(original, i, &name, &value, &size) ==
         RD_KAFKA_RESP_ERR_NO_ERROR;
         ++i) {
      rejected.headers.emplace_back(
          name, value == nullptr
                    ? std::string()
                    : std::string(static_cast<const char*>(value), size));
    }
  }
  const DeadLetter letter = MakeDeadLetter(rejected, reason, detail);
  auto minimal = std::make_unique<DeadLetter>(
      MakeDeadLetter(rejected, reason, detail, /*minimal=*/true));
  rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
  if (!Produce(letter, std::move(minimal), &err)) {
    // Refused before sending (e.g. over the producer's message.max.bytes):
    // the minimal form, then the same rules as a refused delivery.
    rd_kafka_message_t refused{};
    refused.err = err;
    OnDeliveryFailed(refused, std::make_unique<DeadLetter>(MakeDeadLetter(
                                  rejected, reason, detail, /*minimal=*/true)));
  }
  spdlog::warn(
      "message {}/{}@{} to {}: {}: {}{}", input_topic_, message.partition,
      message.offset, dlq_topic_, std::string(reason),
      EscapeForLog(detail.substr(0, 4096)),
      letter.truncated.empty()
          ? ""
          : absl::StrCat(" (dead letter cut: ", letter.truncated, ")"));
  absl::MutexLock lock(&stats_->mu);
  ++stats_->stats.dlq_by_reason[std::string(reason)];
  if (source != nullptr) {
    std::pair<std::string, uint64_t> key(source->job, source->producer_id);
    if (stats_->stats.dlq_by_source.size() >= kMaxDlqSources &&
        !stats_->stats.dlq_by_source.contains(key)) {
      key = {"", 0};
    }
    ++stats_->stats.dlq_by_source[key];
  }
}

}  // namespace bubblewatch
