// Recognizes repeats of events already kept, by their source text: what a
// doubled write or a naive merge of the same trace produces.
#ifndef BUBBLEWATCH_INGEST_DUPLICATE_EVENT_FILTER_H_
#define BUBBLEWATCH_INGEST_DUPLICATE_EVENT_FILTER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"

namespace bubblewatch {

// Two events are duplicates when their source text is byte-identical; text
// that differs in any byte, even in fields the reader ignores, is a different
// event. The filter keeps a 128-bit hash (XXH3) of each text, not the text,
// so a reader can stream a file and drop each event's bytes once read: about
// 24 bytes per kept event. Two different texts are taken for one only on a
// 128-bit hash collision (odds about n^2 / 2^129 for n events: ~1e-25 for
// ten million).
class DuplicateEventFilter {
 public:
  DuplicateEventFilter() : seen_(0, IndexHash{&hashes_}, IndexEq{&hashes_}) {}
  DuplicateEventFilter(const DuplicateEventFilter&) = delete;
  DuplicateEventFilter& operator=(const DuplicateEventFilter&) = delete;

  // True if `text` was seen before; otherwise remembers it and returns false.
  bool IsRepeat(absl::string_view text);
  // The same for a text whose XXH3-128 was computed elsewhere, e.g. on the
  // thread that parsed it.
  bool IsRepeat(uint64_t hash_low, uint64_t hash_high);

 private:
  struct Key {
    uint64_t low;
    uint64_t high;
  };
  // The set holds 4-byte indices into hashes_, not the 16-byte hashes: its
  // table stays a fifth of the size and in cache; a probe reads hashes_ only
  // when the 7 bits absl keeps per slot match.
  struct IndexHash {
    const std::vector<Key>* hashes;
    size_t operator()(uint32_t i) const { return (*hashes)[i].low; }
  };
  struct IndexEq {
    const std::vector<Key>* hashes;
    bool operator()(uint32_t a, uint32_t b) const {
      const Key& x = (*hashes)[a];
      const Key& y = (*hashes)[b];
      return x.low == y.low && x.high == y.high;
    }
  };

  std::vector<Key> hashes_;  // Of the kept texts, in the order seen.
  absl::flat_hash_set<uint32_t, IndexHash, IndexEq> seen_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_DUPLICATE_EVENT_FILTER_H_
