#include "storage/rocksdb_status.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace bubblewatch {
namespace {

// RocksDB reports most file-system failures as IOError with strerror()'s
// text in the message; these are the ones retrying cannot fix.
bool IsPermanentIoError(const std::string& message) {
  for (absl::string_view needle :
       {"Read-only file system", "Permission denied", "Not a directory",
        "lock hold by current process", "While lock file", "Is a directory"}) {
    if (absl::StrContains(message, needle)) return true;
  }
  return false;
}

absl::StatusCode CodeOf(const rocksdb::Status& s, const std::string& message) {
  switch (s.code()) {
    case rocksdb::Status::kNotFound:
      return absl::StatusCode::kNotFound;
    case rocksdb::Status::kCorruption:
      return absl::StatusCode::kDataLoss;
    case rocksdb::Status::kInvalidArgument:
      return absl::StatusCode::kInvalidArgument;
    case rocksdb::Status::kNotSupported:
      return absl::StatusCode::kUnimplemented;
    case rocksdb::Status::kIOError:
      if (s.IsNoSpace() || s.subcode() == rocksdb::Status::kSpaceLimit ||
          absl::StrContains(message, "No space left")) {
        return absl::StatusCode::kResourceExhausted;
      }
      if (IsPermanentIoError(message)) {
        return absl::StatusCode::kFailedPrecondition;
      }
      return absl::StatusCode::kUnavailable;
    case rocksdb::Status::kBusy:
    case rocksdb::Status::kTryAgain:
    case rocksdb::Status::kTimedOut:
    case rocksdb::Status::kIncomplete:
      return absl::StatusCode::kUnavailable;
    case rocksdb::Status::kAborted:
      return absl::StatusCode::kAborted;
    case rocksdb::Status::kShutdownInProgress:
      return absl::StatusCode::kCancelled;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::Status FromRocksDb(const rocksdb::Status& status,
                         absl::string_view context) {
  if (status.ok()) return absl::OkStatus();
  const std::string message = status.ToString();
  return absl::Status(CodeOf(status, message),
                      absl::StrCat(context, ": ", message));
}

}  // namespace bubblewatch
