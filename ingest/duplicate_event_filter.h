// Recognizes repeats of events already kept, by their source text: what a
// doubled write or a naive merge of the same trace produces.
#ifndef BUBBLEWATCH_INGEST_DUPLICATE_EVENT_FILTER_H_
#define BUBBLEWATCH_INGEST_DUPLICATE_EVENT_FILTER_H_

#include <cstddef>
#include <cstdint>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"

namespace bubblewatch {

// Two events are duplicates when their source text is byte-identical; text
// that differs in any byte, even in fields the reader ignores, is a different
// event. The filter keeps a 128-bit hash (XXH3) of each text, not the text,
// so a reader can stream a file and drop each event's bytes once read: 16
// bytes per kept event. Two different texts are taken for one only on a
// 128-bit hash collision (odds about n^2 / 2^129 for n events: ~1e-25 for
// ten million).
class DuplicateEventFilter {
 public:
  // True if `text` was seen before; otherwise remembers it and returns false.
  bool IsRepeat(absl::string_view text);

 private:
  struct Key {
    uint64_t low;
    uint64_t high;
    bool operator==(const Key& other) const {
      return low == other.low && high == other.high;
    }
  };
  struct Hash {
    size_t operator()(const Key& k) const { return k.low; }
  };

  absl::flat_hash_set<Key, Hash> seen_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_DUPLICATE_EVENT_FILTER_H_
