// WatchState: the watcher's memory across restarts: which trace files every
// batch of which the brokers acknowledged, keyed by a hash of the file's
// bytes (so a file is recognized after a rename, and a rewritten file is
// not).
//
// The state lives in one small file, "<dir>/watch-state": a StateRecord
// holding a WatchStateRecord (schemas/state.fbs, docs/state.md), rewritten
// whole on every change through a temporary file, fsync and rename, so a
// crash leaves either the old or the new version, never a torn one. The
// text file written before the schema ("bubblewatch-watch-state v1", then
// "<16 hex digits> <name>" per line) is still read, and replaced by the new
// format at the next change.
// Rejected files that could not be moved aside are kept too, with the
// reason, so that they are not read again after a restart.
// A file missing from the state is simply sent again: the processor drops
// the batches it already counted (same producer id and sequence), so the
// state only saves work; it is not what makes delivery exactly-once.
//
// Thread safety: none; one watcher owns it.
#ifndef BUBBLEWATCH_INGEST_WATCH_WATCH_STATE_H_
#define BUBBLEWATCH_INGEST_WATCH_WATCH_STATE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace bubblewatch {

// A stable 64-bit hash (FNV-1a) of `bytes`: the same on every run and
// machine, unlike absl::Hash.
uint64_t ContentHash(absl::string_view bytes);

// ContentHash of bytes given piece by piece, so that a file of any size is
// hashed with a fixed-size buffer: after Update(a), Update(b), hash() equals
// ContentHash(a + b), whatever the split (states written before hold hashes
// of whole files).
class ContentHasher {
 public:
  void Update(absl::string_view bytes);
  uint64_t hash() const { return hash_; }

 private:
  uint64_t hash_ = 14695981039346656037ull;  // FNV-1a 64's offset basis.
};

// ContentHash of the file at `path`, read in fixed-size pieces; `size` and
// `mtime_ns` get its fstat after the read, so that a caller can tell whether
// the bytes hashed are those of the version it saw.
// Errors: kPermissionDenied / kUnavailable, also for a FIFO or other file
// that is not a regular one (the message does not repeat the path).
absl::StatusOr<uint64_t> ContentHashOfFile(const std::string& path,
                                           int64_t* size, int64_t* mtime_ns);

// Writes `content` to `path` durably: a temporary file beside it, fsync,
// rename, fsync of the directory, so that a crash leaves the old or the new
// content, never a torn one. Errors: kPermissionDenied / kUnavailable.
absl::Status WriteFileAtomically(const std::string& path,
                                 const std::string& content);

class WatchState {
 public:
  // Opens the state in `dir`, creating the directory if missing; an absent
  // state file is an empty state.
  // Errors: kPermissionDenied / kUnavailable for the file system; kDataLoss
  // for a state file that does not parse, or that a newer bubblewatch wrote
  // (the message names it: deleting it is safe, the files are then resent
  // and deduplicated downstream).
  static absl::StatusOr<WatchState> Open(const std::string& dir);

  // True if a file with this content hash was fully acknowledged.
  bool Contains(uint64_t content_hash) const {
    return sent_.contains(content_hash);
  }
  size_t size() const { return sent_.size() + rejected_.size(); }

  // The reason a file with this content hash was rejected and left in
  // place (AddRejected), if it was.
  std::optional<std::string> RejectedReason(uint64_t content_hash) const;

  // Records `content_hash` (file `name`) as rejected for `reason` and writes
  // the state durably before returning: for a rejected file that stays in
  // the watched directory, so that no restart reads it again.
  absl::Status AddRejected(uint64_t content_hash, absl::string_view name,
                           absl::string_view reason);

  // Records `content_hash` (file `name`, for people reading the state) as
  // acknowledged and writes the state durably before returning.
  absl::Status Add(uint64_t content_hash, absl::string_view name);

  // Forgets entries whose file name is not in `present` (files moved away or
  // deleted after sending), writing the state if anything changed, so that
  // the state stays as small as the watched directory.
  absl::Status Retain(const absl::flat_hash_set<std::string>& present);

  const std::string& path() const { return path_; }

 private:
  explicit WatchState(std::string path) : path_(std::move(path)) {}
  // Fills sent_ from the file's bytes, current or legacy format.
  absl::Status Decode(absl::string_view bytes);
  absl::Status DecodeLegacyText(absl::string_view text);
  absl::Status Write() const;

  std::string path_;
  absl::flat_hash_map<uint64_t, std::string> sent_;  // hash -> name.
  struct Rejected {
    std::string name;
    std::string reason;
  };
  absl::flat_hash_map<uint64_t, Rejected> rejected_;  // hash -> file.
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_WATCH_WATCH_STATE_H_
