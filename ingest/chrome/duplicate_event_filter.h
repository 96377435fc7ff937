// Recognizes repeats of events already kept, by their source text: what a
// doubled write or a naive merge of the same trace produces.
#ifndef BUBBLEWATCH_INGEST_CHROME_DUPLICATE_EVENT_FILTER_H_
#define BUBBLEWATCH_INGEST_CHROME_DUPLICATE_EVENT_FILTER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_set.h"

namespace bubblewatch {

// Two events are duplicates when their source text is byte-identical; text
// that differs in any byte, even in fields the reader ignores, is a different
// event. The filter keeps a 128-bit hash (XXH3) of each text, not the text,
// so a reader can stream a file and drop each event's bytes once read: about
// 24 bytes per kept event. The caller hashes (ChromeEventParser does, on the
// thread that parsed the text). Two different texts are taken for one only on a
// 128-bit hash collision (odds about n^2 / 2^129 for n events: ~1e-25 for
// ten million).
class DuplicateEventFilter {
 public:
  DuplicateEventFilter() : seen_(0, IndexHash{this}, IndexEq{this}) {}
  DuplicateEventFilter(const DuplicateEventFilter&) = delete;
  DuplicateEventFilter& operator=(const DuplicateEventFilter&) = delete;

  // True if a text of this XXH3-128 was seen before; otherwise remembers it
  // and returns false.
  bool IsRepeat(uint64_t hash_low, uint64_t hash_high);

  // Room for `texts` in all without rehashing (each rehash reads every
  // hash again and holds two tables at once).
  // Cheap when there is room already.
  void Reserve(size_t texts) { seen_.reserve(texts); }

 private:
  struct Key {
    uint64_t low;
    uint64_t high;
  };
  // The hashes live in chunks of a fixed size, not in one vector, whose
  // doubling would hold the old and the new copy at once: the peak memory of
  // a read.
  static constexpr int kChunkShift = 12;  // 4096 keys, 64 KiB a chunk.
  const Key& KeyAt(uint32_t i) const {
    return chunks_[i >> kChunkShift][i & ((1u << kChunkShift) - 1)];
  }
  // The set holds 4-byte indices of the hashes, not the 16-byte hashes: its
  // table stays a fifth of the size and in cache; a probe reads a hash only
  // when the 7 bits absl keeps per slot match.
  struct IndexHash {
    const DuplicateEventFilter* filter;
    size_t operator()(uint32_t i) const { return filter->KeyAt(i).low; }
  };
  struct IndexEq {
    const DuplicateEventFilter* filter;
    bool operator()(uint32_t a, uint32_t b) const {
      const Key& x = filter->KeyAt(a);
      const Key& y = filter->KeyAt(b);
      return x.low == y.low && x.high == y.high;
    }
  };

  std::vector<std::unique_ptr<Key[]>> chunks_;  // Kept texts, in order seen.
  uint32_t size_ = 0;
  absl::flat_hash_set<uint32_t, IndexHash, IndexEq> seen_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_CHROME_DUPLICATE_EVENT_FILTER_H_
