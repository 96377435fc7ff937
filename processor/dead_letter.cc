#include "processor/dead_letter.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace bubblewatch {

DeadLetter MakeDeadLetter(const RejectedMessage& message,
                          absl::string_view reason, absl::string_view detail,
                          bool minimal, const DeadLetterLimits& limits) {
  DeadLetter out;
  std::vector<absl::string_view> cut;
  if (detail.size() > limits.max_detail_bytes) {
    detail = detail.substr(0, limits.max_detail_bytes);
    cut.push_back("detail");
  }
  if (minimal) {
    if (!message.key.empty()) cut.push_back("key");
    if (!message.payload.empty()) cut.push_back("payload");
    if (!message.headers.empty()) cut.push_back("headers");
  } else {
    out.key = std::string(message.key.substr(0, limits.max_key_bytes));
    if (message.key.size() > limits.max_key_bytes) cut.push_back("key");
    out.payload =
        std::string(message.payload.substr(0, limits.max_payload_bytes));
    if (message.payload.size() > limits.max_payload_bytes) {
      cut.push_back("payload");
    }
    // Whole headers only, in order, while they fit.
    size_t budget = limits.max_original_header_bytes;
    for (const auto& [name, value] : message.headers) {
      const size_t size = name.size() + value.size();
      if (size > budget) {
        cut.push_back("headers");
        break;
      }
      budget -= size;
      out.headers.emplace_back(name, value);
    }
  }
  // Ours after the original ones: a reader taking the last header of a name
  // gets ours even if the producer sent one of the same name.
  out.headers.emplace_back(kDeadLetterErrorHeader,
                           absl::StrCat(reason, ": ", detail));
  out.headers.emplace_back("bubblewatch.reason", std::string(reason));
  out.headers.emplace_back("bubblewatch.source.topic",
                           std::string(message.topic));
  out.headers.emplace_back("bubblewatch.source.partition",
                           absl::StrCat(message.partition));
  out.headers.emplace_back("bubblewatch.source.offset",
                           absl::StrCat(message.offset));
  out.headers.emplace_back("bubblewatch.source.bytes",
                           absl::StrCat(message.payload.size()));
  // Always present (empty when nothing was cut), so a forged one of the
  // original headers is never the last of its name.
  out.truncated = absl::StrJoin(cut, ",");
  out.headers.emplace_back(kDeadLetterTruncatedHeader, out.truncated);
  return out;
}

}  // namespace bubblewatch
