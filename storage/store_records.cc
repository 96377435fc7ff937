#include "storage/store_records.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace bubblewatch {
namespace {

constexpr uint8_t kJobFormat = 2;
constexpr uint8_t kJobFormatWithoutOldest = 1;
constexpr uint8_t kProgressFormat = 2;
constexpr uint8_t kProgressFormatWithoutState = 1;
constexpr size_t kJobHeaderBytes = 1 + 5 * 8;
constexpr size_t kJobHeaderBytesWithoutOldest = 1 + 4 * 8;
constexpr size_t kProgressBytes = 1 + 2 * 8;

void PutInt64(int64_t v, std::string& out) {
  const auto u = static_cast<uint64_t>(v);
  for (int shift = 0; shift < 64; shift += 8) {
    out.push_back(static_cast<char>((u >> shift) & 0xff));
  }
}

// REQUIRES: 8 bytes at `p`.
int64_t GetInt64(const char* p) {
  uint64_t u = 0;
  for (int i = 7; i >= 0; --i) u = (u << 8) | static_cast<uint8_t>(p[i]);
  return static_cast<int64_t>(u);
}

absl::Status TooShort(absl::string_view bytes, size_t min_size,
                      absl::string_view what) {
  return absl::DataLossError(absl::StrCat("corrupt ", what, ": ", bytes.size(),
                                          " bytes, expected ", min_size,
                                          " or more"));
}

absl::Status UnknownFormat(absl::string_view bytes, absl::string_view what) {
  return absl::DataLossError(
      absl::StrCat("corrupt ", what, ": unknown format ",
                   static_cast<int>(static_cast<uint8_t>(bytes[0]))));
}

}  // namespace

std::string EncodeJobRecord(const JobRecord& record) {
  std::string out;
  out.reserve(kJobHeaderBytes + record.state.size());
  out.push_back(static_cast<char>(kJobFormat));
  PutInt64(record.last_event_ns, out);
  PutInt64(record.last_seen_wall_ns, out);
  PutInt64(record.window_count, out);
  PutInt64(record.latest_window_start_ns, out);
  PutInt64(record.oldest_window_start_ns, out);
  out.append(record.state);
  return out;
}

absl::StatusOr<JobRecord> DecodeJobRecord(absl::string_view bytes,
                                          bool with_state) {
  if (bytes.empty()) return TooShort(bytes, 1, "job record");
  const auto format = static_cast<uint8_t>(bytes[0]);
  if (format != kJobFormat && format != kJobFormatWithoutOldest) {
    return UnknownFormat(bytes, "job record");
  }
  const size_t header =
      format == kJobFormat ? kJobHeaderBytes : kJobHeaderBytesWithoutOldest;
  if (bytes.size() < header) return TooShort(bytes, header, "job record");
  const char* p = bytes.data() + 1;
  JobRecord record;
  record.last_event_ns = GetInt64(p);
  record.last_seen_wall_ns = GetInt64(p + 8);
  record.window_count = GetInt64(p + 16);
  record.latest_window_start_ns = GetInt64(p + 24);
  if (format == kJobFormat) record.oldest_window_start_ns = GetInt64(p + 32);
  if (with_state) record.state = std::string(bytes.substr(header));
  return record;
}

std::string EncodeProgressRecord(const ProgressRecord& record) {
  std::string out;
  out.reserve(kProgressBytes + record.state.size());
  out.push_back(static_cast<char>(kProgressFormat));
  PutInt64(record.resume_offset, out);
  PutInt64(record.committed_position, out);
  out.append(record.state);
  return out;
}

absl::StatusOr<ProgressRecord> DecodeProgressRecord(absl::string_view bytes) {
  if (bytes.empty()) return TooShort(bytes, kProgressBytes, "progress record");
  const auto format = static_cast<uint8_t>(bytes[0]);
  if (format != kProgressFormat && format != kProgressFormatWithoutState) {
    return UnknownFormat(bytes, "progress record");
  }
  if (bytes.size() < kProgressBytes || (format == kProgressFormatWithoutState &&
                                        bytes.size() != kProgressBytes)) {
    return absl::DataLossError(absl::StrCat(
        "corrupt progress record: ", bytes.size(), " bytes, expected ",
        kProgressBytes, format == kProgressFormat ? " or more" : ""));
  }
  return ProgressRecord{.resume_offset = GetInt64(bytes.data() + 1),
                        .committed_position = GetInt64(bytes.data() + 9),
                        .state = std::string(bytes.substr(kProgressBytes))};
}

}  // namespace bubblewatch
