// DeadLetterSink: sends the messages the processor rejects to the dead-letter
// topic (`--dlq-topic`), one bounded record each (dead_letter.h builds it),
// and counts them by reason and by (job, producer).
//
// Promises:
//   - a rejection never stops the processor: when the topic refuses the
//     bounded record (too large for its max.message.bytes, a policy), its
//     minimal form goes instead; when that is refused too, the loss is
//     logged and counted (ProcessorStats::dead_letters_lost);
//   - a dead letter counts as undelivered (RuntimeShared::undelivered) until
//     acknowledged, so the commit pipeline moves no offset past it; an error
//     that means the broker is away (a timed-out message) is fatal
//     (RuntimeShared::fatal), and a restart resends it;
//   - each rejection is logged once, with the reason and the detail (cut
//     to 4 KiB, escaped).
// The caller decides whether a message gets a dead letter at all (a
// replayed rejection got one the first time: batch_admission.h).
//
// The Kafka side is DeadLetterKafka, a narrow seam: librdkafka's producer
// in `process` (RdKafkaDeadLetterKafka, processor/commit_kafka.h), the
// in-memory Kafka in unit tests (tests/processor/memory_kafka.h).
//
// Thread safety: Run's thread only (sends and delivery reports alike).
#ifndef BUBBLEWATCH_PROCESSOR_DEAD_LETTER_SINK_H_
#define BUBBLEWATCH_PROCESSOR_DEAD_LETTER_SINK_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "processor/dead_letter.h"
#include "processor/runtime_shared.h"
#include "schemas/event_batch_codec.h"

namespace bubblewatch {

// Why a dead letter was not delivered, in the client's terms.
struct DeadLetterError {
  // The topic refused the record for good (too large for its
  // max.message.bytes, invalid, a policy): a smaller form may still go.
  // Otherwise the broker is away, and `status` is fatal.
  bool refused = false;
  absl::Status status;
  std::string description;  // The client's words, for the log.
};

// The dead-letter topic's producer, as DeadLetterSink needs it.
class DeadLetterKafka {
 public:
  virtual ~DeadLetterKafka() = default;
  // Enqueues `letter` (copied: key, payload, headers) for `topic`.
  // `fallback` travels with it: if its delivery fails, whoever serves the
  // delivery reports hands it back to DeadLetterSink::OnDeliveryFailed (and
  // uncounts the record from RuntimeShared::undelivered first). nullopt
  // when enqueued; the error when refused at once (`fallback` dropped).
  virtual std::optional<DeadLetterError> ProduceDeadLetter(
      const std::string& topic, const DeadLetter& letter,
      std::unique_ptr<DeadLetter> fallback) = 0;
};

// The headers of a consumed message, in order.
using MessageHeaders = std::vector<std::pair<std::string, std::string>>;

class DeadLetterSink {
 public:
  // `kafka`, `shared` and `stats` must outlive the sink.
  DeadLetterSink(DeadLetterKafka* kafka, std::string input_topic,
                 std::string dlq_topic, RuntimeShared* shared, StatsCell* stats)
      : kafka_(kafka),
        input_topic_(std::move(input_topic)),
        dlq_topic_(std::move(dlq_topic)),
        shared_(shared),
        stats_(stats) {}

  // Sends the bounded dead letter of the message at `offset` of
  // `partition` (with `key`, `payload` and `headers`), consumed from the
  // input topic and rejected for `reason` with `detail`. `source`: the
  // batch's header when it decoded, for the per-(job, producer) counts.
  void Send(int32_t partition, KafkaOffset offset, absl::string_view key,
            absl::string_view payload, MessageHeaders headers,
            absl::string_view reason, absl::string_view detail,
            const BatchHeader* source = nullptr);

  // The delivery report of a dead letter failed with `error`; `minimal` is
  // the minimal form it carried (empty headers for a minimal form itself:
  // no third try).
  void OnDeliveryFailed(const DeadLetterError& error,
                        std::unique_ptr<DeadLetter> minimal);

 private:
  // Produces `letter` with `fallback` (its minimal form) riding along.
  // The error when the client refuses it at once.
  std::optional<DeadLetterError> Produce(const DeadLetter& letter,
                                         std::unique_ptr<DeadLetter> fallback);

  DeadLetterKafka* kafka_;
  std::string input_topic_;
  std::string dlq_topic_;
  RuntimeShared* shared_;
  StatsCell* stats_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_DEAD_LETTER_SINK_H_
