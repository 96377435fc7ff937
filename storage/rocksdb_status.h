// The one place where RocksDB's types become Abseil's: its Status becomes
// absl::Status, its Slice a string_view.
#ifndef BUBBLEWATCH_STORAGE_ROCKSDB_STATUS_H_
#define BUBBLEWATCH_STORAGE_ROCKSDB_STATUS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "rocksdb/slice.h"
#include "rocksdb/status.h"

namespace bubblewatch {

// Converts `status`, prefixing its message with `context` (what the store was
// doing, e.g. "committing 12 windows to /var/lib/bw"). Codes:
//   NotFound → kNotFound; Corruption → kDataLoss;
//   InvalidArgument → kInvalidArgument; NotSupported → kUnimplemented;
//   IOError: no space / space limit → kResourceExhausted; a lock held by
//     another process, a read-only file system, no permission, or a path
//     component that is not a directory → kFailedPrecondition; other I/O →
//     kUnavailable (worth retrying);
//   Busy, TryAgain, TimedOut, Incomplete → kUnavailable; Aborted → kAborted;
//   ShutdownInProgress → kCancelled; anything else → kInternal.
absl::Status FromRocksDb(const rocksdb::Status& status,
                         absl::string_view context);

// The bytes of `s`, which must outlive the view.
inline absl::string_view View(const rocksdb::Slice& s) {
  return {s.data(), s.size()};
}

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_STORAGE_ROCKSDB_STATUS_H_
