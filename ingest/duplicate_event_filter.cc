#include "ingest/duplicate_event_filter.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace bubblewatch {

bool DuplicateEventFilter::IsRepeat(absl::string_view text) {
  XXH128_hash_t h = XXH3_128bits(text.data(), text.size());
  return IsRepeat(h.low64, h.high64);
}

bool DuplicateEventFilter::IsRepeat(uint64_t hash_low, uint64_t hash_high) {
  // Looked up as the index it would get: the set hashes and compares
  // through hashes_.
  hashes_.push_back(Key{hash_low, hash_high});
  if (seen_.insert(static_cast<uint32_t>(hashes_.size() - 1)).second) {
    return false;
  }
  hashes_.pop_back();
  return true;
}

}  // namespace bubblewatch
