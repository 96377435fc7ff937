// Reading a trace file, plain or gzip-compressed: whole into memory (padded
// for simdjson), or as a stream of bytes gunzipped on the fly, so that a
// reader can go through a file of any size with a fixed-size buffer.
#ifndef BUBBLEWATCH_INGEST_TRACE_IO_TRACE_FILE_H_
#define BUBBLEWATCH_INGEST_TRACE_IO_TRACE_FILE_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "simdjson.h"

namespace bubblewatch {

// True if `bytes` start with the gzip magic (1f 8b).
bool HasGzipMagic(absl::string_view bytes);

// True if `bytes` start with the SQLite 3 file header.
bool HasSqliteMagic(absl::string_view bytes);

// Opens `path` for reading (the caller fcloses it) without blocking: a FIFO
// or any other file that is not regular is kInvalidArgument at once ("a
// FIFO"), never a read that waits for a writer. Other errors as
// LoadTraceFile's.
absl::StatusOr<FILE*> OpenRegularFile(absl::string_view path);

// Reads `path` whole; gunzips it when it has the gzip magic.
// Errors: kNotFound / kPermissionDenied / kUnavailable from the file system;
// kDataLoss for a truncated or corrupt gzip stream.
absl::StatusOr<simdjson::padded_string> LoadTraceFile(absl::string_view path);

// Decompresses a whole gzip stream (kDataLoss when truncated or corrupt).
absl::StatusOr<simdjson::padded_string> Gunzip(absl::string_view compressed);

// The bytes of a trace file in order, gunzipped when the file starts with the
// gzip magic (concatenated gzip members included). A gzip file is inflated
// on a thread of its own, up to 256 KiB ahead of Read. Not thread-safe.
class TraceByteSource {
 public:
  // Errors as LoadTraceFile's for the file system.
  static absl::StatusOr<std::unique_ptr<TraceByteSource>> Open(
      absl::string_view path);
  ~TraceByteSource();
  TraceByteSource(const TraceByteSource&) = delete;
  TraceByteSource& operator=(const TraceByteSource&) = delete;

  // Reads up to `size` (> 0) bytes into `out` and returns how many; 0 only at
  // the end of the data. kDataLoss for a truncated or corrupt gzip stream
  // (the same messages as Gunzip), kUnavailable for a read error.
  absl::StatusOr<size_t> Read(char* out, size_t size);

  bool compressed() const { return gzip_ != nullptr; }
  // The file's size on disk, and how many of its bytes were consumed so far:
  // with the bytes produced, what a progress estimate needs.
  uint64_t file_size() const { return file_size_; }
  uint64_t file_bytes_consumed() const;
  // Bytes handed out by Read so far.
  uint64_t bytes_produced() const { return produced_; }
  // Makes each Read return at most `n` (> 0) bytes, so that tests can put
  // chunk boundaries anywhere. Default: no limit.
  void set_max_read_bytes(size_t n) { max_read_ = n; }
  // Makes Read fail with kResourceExhausted once the data goes on past `n`
  // bytes (gunzipped when compressed), before more than `n` + 1 of them were
  // handed out: a small gzip file can inflate to GiBs, and a caller that
  // bounds the work of one file must stop while inflating, not after.
  // Default: no limit.
  void set_max_bytes(uint64_t n) { max_bytes_ = n; }

 private:
  struct Gzip;
  TraceByteSource() = default;
  // Read without the max_bytes_ check.
  absl::StatusOr<size_t> ReadUnbounded(char* out, size_t size);
  absl::StatusOr<size_t> ReadGzip(char* out, size_t size);
  // On the gzip thread: inflates into `out`, 0 at the end.
  absl::StatusOr<size_t> Inflate(char* out, size_t size);
  void InflateAhead();

  std::string path_;
  FILE* file_ = nullptr;
  uint64_t file_size_ = 0;
  uint64_t file_read_ = 0;  // Bytes fread from the file (gzip: its thread).
  uint64_t produced_ = 0;
  size_t max_read_ = SIZE_MAX;
  uint64_t max_bytes_ = UINT64_MAX;
  std::unique_ptr<Gzip> gzip_;
};

// Reads what is left in `source` after `head` (bytes already taken from it)
// into one padded buffer.
absl::StatusOr<simdjson::padded_string> ReadRest(TraceByteSource& source,
                                                 absl::string_view head);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_TRACE_IO_TRACE_FILE_H_
