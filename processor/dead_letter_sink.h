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
// Thread safety: Run's thread only (sends and delivery reports alike).
#ifndef BUBBLEWATCH_PROCESSOR_DEAD_LETTER_SINK_H_
#define BUBBLEWATCH_PROCESSOR_DEAD_LETTER_SINK_H_

#include <librdkafka/rdkafka.h>

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "processor/dead_letter.h"
#include "processor/runtime_shared.h"
#include "schemas/event_batch_codec.h"

namespace bubblewatch {

class DeadLetterSink {
 public:
  // `producer` must have a delivery callback that hands failed dead letters
  // to OnDeliveryFailed; it, `shared` and `stats` must outlive the sink.
  DeadLetterSink(rd_kafka_t* producer, std::string input_topic,
                 std::string dlq_topic, RuntimeShared* shared, StatsCell* stats)
      : producer_(producer),
        input_topic_(std::move(input_topic)),
        dlq_topic_(std::move(dlq_topic)),
        shared_(shared),
        stats_(stats) {}

  // Sends the bounded dead letter of `message`, consumed from the input
  // topic and rejected for `reason` with `detail`. `source`: the batch's
  // header when it decoded, for the per-(job, producer) counts.
  void Send(const rd_kafka_message_t& message, absl::string_view reason,
            absl::string_view detail, const BatchHeader* source = nullptr);

  // The delivery report of a dead letter failed; `minimal` is the minimal
  // form it carried as its opaque (empty headers for a minimal form
  // itself: no third try).
  void OnDeliveryFailed(const rd_kafka_message_t& message,
                        std::unique_ptr<DeadLetter> minimal);

 private:
  // Produces `letter` with `fallback` (its minimal form, freed by the
  // delivery report) as the message opaque. False, with `error`, when
  // librdkafka refuses it at once.
  bool Produce(const DeadLetter& letter, std::unique_ptr<DeadLetter> fallback,
               rd_kafka_resp_err_t* error);

  rd_kafka_t* producer_;
  std::string input_topic_;
  std::string dlq_topic_;
  RuntimeShared* shared_;
  StatsCell* stats_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_DEAD_LETTER_SINK_H_
