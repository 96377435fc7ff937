#include "ingest/duplicate_event_filter.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace bubblewatch {

bool DuplicateEventFilter::IsRepeat(absl::string_view text) {
  XXH128_hash_t h = XXH3_128bits(text.data(), text.size());
  return !seen_.insert(Key{h.low64, h.high64}).second;
}

}  // namespace bubblewatch
