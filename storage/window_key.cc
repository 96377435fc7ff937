#include "storage/window_key.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace bubblewatch {
namespace {

constexpr char kSeparator = '\0';
constexpr uint64_t kSignBit = uint64_t{1} << 63;

void AppendBigEndian(uint64_t v, int bytes, std::string& out) {
  for (int shift = 8 * (bytes - 1); shift >= 0; shift -= 8) {
    out.push_back(static_cast<char>((v >> shift) & 0xff));
  }
}

}  // namespace

absl::Status ValidateJobName(absl::string_view job) {
  if (job.empty()) return absl::InvalidArgumentError("empty job id");
  if (job.find(kSeparator) != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("job id \"", absl::CEscape(job), "\" contains '\\0'"));
  }
  return absl::OkStatus();
}

std::string WindowKey(absl::string_view job, int64_t start_ns) {
  std::string key;
  key.reserve(job.size() + 9);
  key.append(job.data(), job.size());
  key.push_back(kSeparator);
  AppendBigEndian(static_cast<uint64_t>(start_ns) ^ kSignBit, 8, key);
  return key;
}

std::string WindowKeyPrefix(absl::string_view job) {
  std::string key(job);
  key.push_back(kSeparator);
  return key;
}

std::string WindowKeyLimit(absl::string_view job) {
  std::string key(job);
  key.push_back(kSeparator + 1);
  return key;
}

bool ParseWindowKey(absl::string_view key, absl::string_view* job,
                    int64_t* start_ns) {
  if (key.size() < 10 || key[key.size() - 9] != kSeparator) return false;
  uint64_t v = 0;
  for (size_t i = key.size() - 8; i < key.size(); ++i) {
    v = (v << 8) | static_cast<uint8_t>(key[i]);
  }
  *job = key.substr(0, key.size() - 9);
  *start_ns = static_cast<int64_t>(v ^ kSignBit);
  return true;
}

std::string ProgressKey(absl::string_view topic, int32_t partition) {
  std::string key(topic);
  key.push_back(kSeparator);
  AppendBigEndian(static_cast<uint32_t>(partition), 4, key);
  return key;
}

std::string PartitionJobRecordKey(absl::string_view topic, int32_t partition,
                                  absl::string_view job) {
  std::string key = ProgressKey(topic, partition);
  key.push_back(kSeparator);
  key.append(job.data(), job.size());
  return key;
}

std::string AlertStateKey(absl::string_view key) {
  std::string out("alert_state");
  out.push_back('\0');
  out.append(key.data(), key.size());
  return out;
}

namespace {
constexpr absl::string_view kSumsPrefix("window_sums\0", 12);
}  // namespace

std::string SumsKey(absl::string_view job, int64_t start_ns) {
  return absl::StrCat(kSumsPrefix, WindowKey(job, start_ns));
}

std::string SumsKeyPrefix(absl::string_view job) {
  return absl::StrCat(kSumsPrefix, WindowKeyPrefix(job));
}

std::string SumsKeyLimit(absl::string_view job) {
  return absl::StrCat(kSumsPrefix, WindowKeyLimit(job));
}

bool ParseSumsKey(absl::string_view key, absl::string_view* job,
                  int64_t* start_ns) {
  if (!absl::ConsumePrefix(&key, kSumsPrefix)) return false;
  return ParseWindowKey(key, job, start_ns);
}

std::string SumsLastKeyPrefix() {
  return std::string("window_sums_last\0", 17);
}

std::string SumsLastKey(absl::string_view job) {
  return absl::StrCat(SumsLastKeyPrefix(), job);
}

std::string SumsCompleteKey() { return std::string("meta\0window_sums", 16); }

}  // namespace bubblewatch
