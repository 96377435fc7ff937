// Recognizes repeats of events already kept, by their source text: what a
// doubled write or a naive merge of the same trace produces.
#ifndef BUBBLEWATCH_INGEST_DUPLICATE_EVENT_FILTER_H_
#define BUBBLEWATCH_INGEST_DUPLICATE_EVENT_FILTER_H_

#include <cstdint>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "schemas/trace.h"

namespace bubblewatch {

// Two events are duplicates when their source text is byte-identical; text
// that differs in any byte, even in fields the reader ignores, is a different
// event. The event read from the text serves as a cheap hash of it (identical
// text reads as an identical event), so only events that agree on every kept
// field have their text compared.
// The filter borrows the texts, which must outlive it.
class DuplicateEventFilter {
 public:
  // True if `text` was seen before; otherwise remembers it and returns false.
  // REQUIRES: `event` was read from `text`.
  bool IsRepeat(absl::string_view text, const GpuActivity& event);
  bool IsRepeat(absl::string_view text, const CpuEvent& event);

 private:
  struct Seen {
    absl::string_view text;
    uint64_t fingerprint;
  };
  struct Hash {
    size_t operator()(const Seen& s) const { return s.fingerprint; }
  };
  struct Eq {
    bool operator()(const Seen& a, const Seen& b) const {
      return a.fingerprint == b.fingerprint && a.text == b.text;
    }
  };

  bool Insert(absl::string_view text, uint64_t fingerprint) {
    return !seen_.insert(Seen{text, fingerprint}).second;
  }

  absl::flat_hash_set<Seen, Hash, Eq> seen_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_DUPLICATE_EVENT_FILTER_H_
