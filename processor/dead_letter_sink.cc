#include "processor/dead_letter_sink.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/text_escape.h"
#include "spdlog/spdlog.h"

namespace bubblewatch {

std::optional<DeadLetterError> DeadLetterSink::Produce(
    const DeadLetter& letter, std::unique_ptr<DeadLetter> fallback) {
  ++shared_->undelivered;
  std::optional<DeadLetterError> error =
      kafka_->ProduceDeadLetter(dlq_topic_, letter, std::move(fallback));
  if (error) --shared_->undelivered;
  return error;
}

// The bounded form did not fit the topic (its max.message.bytes is lower
// than the broker's default), or was refused for good: the minimal form
// goes instead, and the consumer moves on once that one is acknowledged.
// If even that is refused, the loss is logged and counted, never fatal: a
// dead-letter topic the processor cannot write to must not stop the fleet.
// Errors that mean the broker is away (a timed-out message) stay fatal, as
// for windows and snapshots: the offsets must not move past an
// unacknowledged dead letter, and a restart retries it.
void DeadLetterSink::OnDeliveryFailed(const DeadLetterError& error,
                                      std::unique_ptr<DeadLetter> minimal) {
  if (!error.refused) {
    shared_->fatal = error.status;
    return;
  }
  if (!minimal->headers.empty()) {
    spdlog::warn("{} refused a dead letter ({}); sending its minimal form",
                 dlq_topic_, error.description);
    DeadLetter retry = std::move(*minimal);
    // The minimal form's own fallback is empty: no third try.
    if (!Produce(retry, std::make_unique<DeadLetter>())) return;
  }
  spdlog::error(
      "{} refused the dead letter of a rejected message even in its minimal "
      "form ({}); counted in bubblewatch_dead_letters_lost_total",
      dlq_topic_, error.description);
  absl::MutexLock lock(&stats_->mu);
  ++stats_->stats.dead_letters_lost;
}

void DeadLetterSink::Send(int32_t partition, KafkaOffset offset,
                          absl::string_view key, absl::string_view payload,
                          MessageHeaders headers, absl::string_view reason,
                          absl::string_view detail, const BatchHeader* source) {
  RejectedMessage rejected{.topic = input_topic_,
                           .partition = partition,
                           .offset = offset,
                           .key = key,
                           .payload = payload,
                           .headers = std::move(headers)};
  const DeadLetter letter = MakeDeadLetter(rejected, reason, detail);
  auto minimal = std::make_unique<DeadLetter>(
      MakeDeadLetter(rejected, reason, detail, /*minimal=*/true));
  if (std::optional<DeadLetterError> error =
          Produce(letter, std::move(minimal))) {
    // Refused before sending (e.g. over the producer's message.max.bytes):
    // the minimal form, then the same rules as a refused delivery.
    OnDeliveryFailed(*error, std::make_unique<DeadLetter>(MakeDeadLetter(
                                 rejected, reason, detail, /*minimal=*/true)));
  }
  spdlog::warn(
      "message {}/{}@{} to {}: {}: {}{}", input_topic_, partition, offset,
      dlq_topic_, std::string(reason), EscapeForLog(detail.substr(0, 4096)),
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
