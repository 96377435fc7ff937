#include "ingest/chrome/duplicate_event_filter.h"

namespace bubblewatch {

bool DuplicateEventFilter::IsRepeat(uint64_t hash_low, uint64_t hash_high) {
  // Looked up as the index it would get: the set hashes and compares
  // through the chunks.
  const uint32_t index = size_;
  if ((index >> kChunkShift) == chunks_.size()) {
    chunks_.push_back(std::make_unique<Key[]>(size_t{1} << kChunkShift));
  }
  chunks_[index >> kChunkShift][index & ((1u << kChunkShift) - 1)] =
      Key{hash_low, hash_high};
  if (!seen_.insert(index).second) return true;
  ++size_;
  return false;
}

}  // namespace bubblewatch
