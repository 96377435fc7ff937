// Loading a trace file into memory: plain or gzip-compressed, padded for
// simdjson.
#ifndef BUBBLEWATCH_INGEST_TRACE_FILE_H_
#define BUBBLEWATCH_INGEST_TRACE_FILE_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "simdjson.h"

namespace bubblewatch {

// True if `bytes` start with the gzip magic (1f 8b).
bool HasGzipMagic(absl::string_view bytes);

// True if `bytes` start with the SQLite 3 file header.
bool HasSqliteMagic(absl::string_view bytes);

// Reads `path` whole; gunzips it when it has the gzip magic.
// Errors: kNotFound / kPermissionDenied / kUnavailable from the file system;
// kDataLoss for a truncated or corrupt gzip stream.
absl::StatusOr<simdjson::padded_string> LoadTraceFile(absl::string_view path);

// Decompresses a whole gzip stream (kDataLoss when truncated or corrupt).
absl::StatusOr<simdjson::padded_string> Gunzip(absl::string_view compressed);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_TRACE_FILE_H_
