// The record the processor writes to the dead-letter topic for a message it
// rejects, bounded so that it always fits the topic.
//
// A rejected message can be anything a producer sent: a 20 MB batch, or a
// small lz4 message that librdkafka inflated to hundreds of MiB. Copied
// whole, its dead letter was larger than the broker accepts (1 MB by
// default), the produce failed, and the processor stopped on every restart
//. So a dead letter keeps what a person needs to find and replay
// the message, within fixed bounds:
//   - the reason (header bubblewatch.error, "reason: detail") and the
//     reason code alone (bubblewatch.reason);
//   - where it came from (bubblewatch.source.topic, .partition, .offset) and
//     its original size (bubblewatch.source.bytes);
//   - the original headers, in order, as long as they fit their budget,
//     before the ones above (a reader that takes the last header of a name
//     gets the processor's, even if the producer forged one);
//   - the key and a prefix of the payload.
// Whatever is cut is said in header bubblewatch.truncated ("payload",
// "key", "headers", "detail", comma-separated; empty when nothing was), so
// a consumer of the topic never mistakes a prefix for the message. The minimal
// form (for a topic that refuses even the bounded one) keeps the headers that
// describe the message and drops its key, payload and original headers.
#ifndef BUBBLEWATCH_PROCESSOR_DEAD_LETTER_H_
#define BUBBLEWATCH_PROCESSOR_DEAD_LETTER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "schemas/time_types.h"

namespace bubblewatch {

inline constexpr char kDeadLetterErrorHeader[] = "bubblewatch.error";
inline constexpr char kDeadLetterTruncatedHeader[] = "bubblewatch.truncated";

// Bounds of one dead letter. With the defaults a record stays under 400 KiB,
// well inside the broker's default limit of 1 MB.
struct DeadLetterLimits {
  size_t max_payload_bytes = 256 << 10;
  size_t max_key_bytes = 4 << 10;
  // Names and values of the original headers together.
  size_t max_original_header_bytes = 64 << 10;
  // The detail sentence in bubblewatch.error.
  size_t max_detail_bytes = 4 << 10;
};

// The rejected message as consumed.
struct RejectedMessage {
  absl::string_view topic;
  int32_t partition = 0;
  KafkaOffset offset = 0;
  absl::string_view key;
  absl::string_view payload;
  std::vector<std::pair<std::string, std::string>> headers;
};

struct DeadLetter {
  std::string key;
  std::string payload;
  std::vector<std::pair<std::string, std::string>> headers;  // In order.
  // What was cut ("payload,headers"), empty if nothing.
  std::string truncated;
};

// Builds the bounded dead letter of `message`, rejected for `reason` (a
// short code such as "batch_too_large") with `detail` (a sentence).
// `minimal`: the form without key, payload or original headers.
DeadLetter MakeDeadLetter(const RejectedMessage& message,
                          absl::string_view reason, absl::string_view detail,
                          bool minimal = false,
                          const DeadLetterLimits& limits = {});

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_DEAD_LETTER_H_
