#include "ingest/chrome_trace_reader.h"

#include <algorithm>
#if defined(__AVX2__)
#include <immintrin.h>
#endif
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ingest/duplicate_event_filter.h"
#include "ingest/json_support.h"
#include "ingest/json_token.h"
#include "ingest/kineto_category.h"

namespace bubblewatch {
namespace {

namespace od = simdjson::ondemand;

// What one traceEvents element says, as token text pointing into the JSON
// (absent fields have a null data()); args are read while iterating since
// they cannot be revisited.
struct EventFields {
  std::string_view ph, cat, name, ts, dur, pid, tid;
  bool name_is_string = false;
  std::optional<int64_t> device, stream;
  bool device_bad = false, stream_bad = false;
  uint64_t correlation = 0;
  uint64_t bytes = 0;
};

// Where the reader gets its bytes: a padded buffer it borrows whole, or a
// source it reads in chunks into a buffer of its own. buf_[0, len_) are the
// bytes at file offsets [base_, base_ + len_); SIMDJSON_PADDING readable bytes
// follow len_. Scanning stands at pos_; More() drops the bytes before mark_
// (what the caller still needs starts there) and appends the next chunk.
class ChromeTraceReader {
 public:
  ChromeTraceReader(const simdjson::padded_string& json,
                    const ReadProgressFn& progress)
      : progress_(progress),
        names_(&trace_),
        buf_(json.data()),
        len_(json.size()),
        readable_(json.size() + simdjson::SIMDJSON_PADDING),
        eof_(true) {}

  ChromeTraceReader(TraceByteSource& source, absl::string_view head,
                    const ReadProgressFn& progress)
      : progress_(progress), names_(&trace_), source_(&source) {
    Reserve(std::max(kChunkBytes * 2, head.size()));
    std::memcpy(storage_.get(), head.data(), head.size());
    len_ = head.size();
  }

  absl::StatusOr<Trace> Read();

 private:
  static constexpr size_t kChunkBytes = 256 << 10;

  absl::Status ReadEvents();
  absl::Status ReadEvent(size_t begin, size_t size, size_t index);
  absl::Status ReadArgs(od::value& value, EventFields* f);
  absl::Status KeepEvent(const EventFields& f, const KinetoCategory& category,
                         size_t index);
  absl::Status ReadTopLevelValue(std::string_view key);
  absl::Status ReadDistributedInfo(od::value& value);
  absl::Status ReadBaseTime(std::string_view token);
  absl::Status ApplyBaseTime();

  // The buffer.
  void Reserve(size_t capacity);
  // Appends the next chunk after dropping the bytes before mark_ (positions
  // shift down by mark_, which becomes 0); false at the end of the input.
  absl::StatusOr<bool> More();
  // Moves pos_ to the next non-space byte; false at the end of the input.
  absl::StatusOr<bool> SkipSpace();
  // Like SkipSpace, but the end of the input is an error: truncated.
  absl::Status SkipSpaceExpectMore(std::string_view inside);
  // Moves pos_ past the JSON value starting at pos_ (a container or string by
  // its brackets and quotes, escapes honoured; a scalar up to the next
  // delimiter). With `keep`, its text is buf_[mark_, pos_) afterwards.
  absl::Status ScanValue(bool keep);
  uint64_t Offset(size_t i) const { return base_ + i; }
  absl::Status SyntaxAt(uint64_t offset, std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("bad JSON at offset ", offset, ": ", AbslView(what)));
  }
  absl::Status Truncated(std::string_view inside) const {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad JSON at offset ", Offset(len_), ": the input ends inside ",
        AbslView(inside), " (the input ends early: truncated?)"));
  }

  // Counts a skipped event under the reason made of `parts`, each cut to 64
  // bytes; allocates only the first time a reason is seen.
  void CountSkip(std::initializer_list<std::string_view> parts);
  // A JSON syntax error inside the document simdjson is on (one event, or a
  // top-level value), which starts at file offset `doc_offset`.
  absl::Status Syntax(simdjson::error_code error) {
    uint64_t offset = doc_offset_ + doc_size_;
    const char* location = nullptr;
    if (doc_.current_location().get(location) == simdjson::SUCCESS &&
        location != nullptr && location >= doc_begin_) {
      offset = doc_offset_ + static_cast<uint64_t>(location - doc_begin_);
    }
    return SyntaxAt(offset, simdjson::error_message(error));
  }
  absl::Status Iterate(const char* begin, size_t size, size_t readable,
                       uint64_t offset) {
    doc_begin_ = begin;
    doc_size_ = size;
    doc_offset_ = offset;
    if (auto err = parser_.iterate(begin, size, readable).get(doc_)) {
      return SyntaxAt(offset, simdjson::error_message(err));
    }
    return absl::OkStatus();
  }
  static absl::Status EventError(size_t index, std::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("traceEvents[", index, "]: ", AbslView(what)));
  }
  absl::StatusOr<int64_t> Micros(std::string_view token, std::string_view field,
                                 size_t index);
  uint32_t IdKey(std::string_view token);
  void ReportProgress(bool last);

  const ReadProgressFn& progress_;
  uint64_t next_progress_ = kChromeProgressStepBytes;
  od::parser parser_;
  od::document doc_;
  const char* doc_begin_ = nullptr;
  size_t doc_size_ = 0;
  uint64_t doc_offset_ = 0;
  Trace trace_;
  NameInterner names_;
  DuplicateEventFilter duplicates_;
  // Ids for pid/tid strings that are not numbers.
  absl::flat_hash_map<std::string, uint32_t> string_ids_;
  std::optional<int64_t> base_time_ns_;
  int64_t max_start_ns_ = std::numeric_limits<int64_t>::min();
  bool has_events_ = false;

  TraceByteSource* source_ = nullptr;
  std::unique_ptr<char[]> storage_;
  size_t capacity_ = 0;  // storage_ holds capacity_ + SIMDJSON_PADDING.
  const char* buf_ = nullptr;
  size_t len_ = 0;
  size_t readable_ = 0;  // Bytes readable from buf_, padding included.
  size_t pos_ = 0;
  size_t mark_ = 0;
  uint64_t base_ = 0;
  bool eof_ = false;
};

void ChromeTraceReader::Reserve(size_t capacity) {
  auto storage =
      std::make_unique<char[]>(capacity + simdjson::SIMDJSON_PADDING);
  if (len_ > 0) std::memcpy(storage.get(), buf_, len_);
  std::memset(storage.get() + len_, ' ',
              capacity + simdjson::SIMDJSON_PADDING - len_);
  storage_ = std::move(storage);
  capacity_ = capacity;
  buf_ = storage_.get();
  readable_ = capacity_ + simdjson::SIMDJSON_PADDING;
}

absl::StatusOr<bool> ChromeTraceReader::More() {
  if (eof_) return false;
  if (mark_ > 0) {
    std::memmove(storage_.get(), storage_.get() + mark_, len_ - mark_);
    base_ += mark_;
    len_ -= mark_;
    pos_ -= mark_;
    mark_ = 0;
  }
  if (capacity_ - len_ < kChunkBytes / 2) Reserve(capacity_ * 2);
  ASSIGN_OR_RETURN(size_t n,
                   source_->Read(storage_.get() + len_,
                                 std::min(kChunkBytes, capacity_ - len_)));
  if (n == 0) {
    eof_ = true;
    return false;
  }
  len_ += n;
  return true;
}

absl::StatusOr<bool> ChromeTraceReader::SkipSpace() {
  while (true) {
    while (pos_ < len_ && (buf_[pos_] == ' ' || buf_[pos_] == '\n' ||
                           buf_[pos_] == '\r' || buf_[pos_] == '\t')) {
      ++pos_;
    }
    if (pos_ < len_) return true;
    mark_ = pos_;
    ASSIGN_OR_RETURN(bool more, More());
    if (!more) return false;
  }
}

absl::Status ChromeTraceReader::SkipSpaceExpectMore(std::string_view inside) {
  ASSIGN_OR_RETURN(bool more, SkipSpace());
  if (!more) return Truncated(inside);
  return absl::OkStatus();
}

// Where a scan of a container or string stands between two stretches of
// input.
struct ScanState {
  int depth = 0;
  bool in_string = false;
  bool escape_pending = false;  // The next byte is escaped by a '\\'.
};

// Moves `s` through one byte that matters (a quote, backslash, bracket or
// brace); true when the value closed with it.
inline bool Step(char c, ScanState& s) {
  if (s.in_string) {
    if (c == '\\') {
      s.escape_pending = true;
    } else if (c == '"') {
      s.in_string = false;
      return s.depth == 0;
    }
    return false;
  }
  if (c == '"') {
    s.in_string = true;
  } else if (c == '{' || c == '[') {
    ++s.depth;
  } else if (c == '}' || c == ']') {
    return --s.depth == 0;
  }
  return false;
}

// Scans [p, end) for the end of the value `s` is in; returns the byte after
// it, or nullptr when the stretch ended first. REQUIRES: 32 bytes readable
// from every p < end (the buffers' padding).
const char* ScanStretch(const char* p, const char* const end, ScanState& s) {
#if defined(__AVX2__)
  const __m256i quote = _mm256_set1_epi8('"');
  const __m256i backslash = _mm256_set1_epi8('\\');
  const __m256i case_bit = _mm256_set1_epi8(0x20);
  // '[' | 0x20 == '{', ']' | 0x20 == '}'; no other byte maps onto them.
  const __m256i open = _mm256_set1_epi8('{');
  const __m256i close = _mm256_set1_epi8('}');
  while (p < end) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i folded = _mm256_or_si256(v, case_bit);
    const __m256i hits =
        _mm256_or_si256(_mm256_or_si256(_mm256_cmpeq_epi8(v, quote),
                                        _mm256_cmpeq_epi8(v, backslash)),
                        _mm256_or_si256(_mm256_cmpeq_epi8(folded, open),
                                        _mm256_cmpeq_epi8(folded, close)));
    uint64_t mask = static_cast<uint32_t>(_mm256_movemask_epi8(hits));
    const size_t avail = static_cast<size_t>(end - p);
    const size_t width = avail < 32 ? avail : 32;
    mask &= (uint64_t{1} << width) - 1;
    if (s.escape_pending) {
      mask &= ~uint64_t{1};
      s.escape_pending = false;
    }
    while (mask != 0) {
      const int i = __builtin_ctzll(mask);
      mask &= mask - 1;
      if (Step(p[i], s)) return p + i + 1;
      if (s.escape_pending) {
        if (static_cast<size_t>(i) + 1 < width) {
          mask &= ~(uint64_t{1} << (i + 1));
          s.escape_pending = false;
        }  // Else the escaped byte starts the next stretch.
      }
    }
    p += width;
  }
  return nullptr;
#else
  for (; p < end; ++p) {
    if (s.escape_pending) {
      s.escape_pending = false;
      continue;
    }
    if (Step(*p, s)) return p + 1;
  }
  return nullptr;
#endif
}

absl::Status ChromeTraceReader::ScanValue(bool keep) {
  mark_ = pos_;
  const char first = buf_[pos_];
  const bool scalar = first != '{' && first != '[' && first != '"';
  ScanState state;
  while (true) {
    const char* p = buf_ + pos_;
    const char* const end = buf_ + len_;
    if (scalar) {
      while (p < end && *p != ',' && *p != ']' && *p != '}' && *p != ' ' &&
             *p != '\n' && *p != '\r' && *p != '\t') {
        ++p;
      }
      if (p < end) {
        pos_ = static_cast<size_t>(p - buf_);
        return absl::OkStatus();
      }
    } else {
      const char* after = ScanStretch(p, end, state);
      if (after != nullptr) {
        pos_ = static_cast<size_t>(after - buf_);
        return absl::OkStatus();
      }
      p = end;
    }
    pos_ = static_cast<size_t>(p - buf_);
    if (!keep) mark_ = pos_;
    ASSIGN_OR_RETURN(bool more, More());
    if (!more) {
      if (scalar) return absl::OkStatus();  // The caller finds what is missing.
      return Truncated(state.in_string ? "a string" : "an object or array");
    }
  }
}

absl::StatusOr<Trace> ChromeTraceReader::Read() {
  ASSIGN_OR_RETURN(bool any, SkipSpace());
  if (!any) {
    return absl::InvalidArgumentError("bad JSON: the input is empty");
  }
  if (buf_[pos_] != '{') {
    return absl::InvalidArgumentError(
        "the top level must be an object with \"traceEvents\"");
  }
  ++pos_;
  RETURN_IF_ERROR(SkipSpaceExpectMore("the top-level object"));
  bool first = true;
  while (true) {
    if (first && buf_[pos_] == '}') break;
    first = false;
    if (buf_[pos_] != '"') {
      return SyntaxAt(Offset(pos_), "expected a key in the top-level object");
    }
    RETURN_IF_ERROR(ScanValue(/*keep=*/true));
    std::string key(buf_ + mark_ + 1, pos_ - mark_ - 2);
    RETURN_IF_ERROR(SkipSpaceExpectMore("the top-level object"));
    if (buf_[pos_] != ':') {
      return SyntaxAt(Offset(pos_), "expected ':' after a key");
    }
    ++pos_;
    RETURN_IF_ERROR(SkipSpaceExpectMore("the top-level object"));
    RETURN_IF_ERROR(ReadTopLevelValue(key));
    RETURN_IF_ERROR(SkipSpaceExpectMore("the top-level object"));
    if (buf_[pos_] == '}') break;
    if (buf_[pos_] != ',') {
      return SyntaxAt(Offset(pos_),
                      "expected ',' or '}' after a top-level value");
    }
    ++pos_;
    RETURN_IF_ERROR(SkipSpaceExpectMore("the top-level object"));
  }
  ++pos_;
  // Anything but white space after the top-level object is an error.
  ASSIGN_OR_RETURN(bool trailing, SkipSpace());
  if (trailing) {
    return SyntaxAt(Offset(pos_),
                    simdjson::error_message(simdjson::TRAILING_CONTENT));
  }
  if (!has_events_) {
    return absl::InvalidArgumentError(
        "not a Chrome trace: no \"traceEvents\" array");
  }
  RETURN_IF_ERROR(ApplyBaseTime());
  ReportProgress(/*last=*/true);
  return std::move(trace_);
}

absl::Status ChromeTraceReader::ReadTopLevelValue(std::string_view key) {
  if (key == "traceEvents") {
    if (buf_[pos_] != '[') {
      return absl::InvalidArgumentError("\"traceEvents\" must be an array");
    }
    return ReadEvents();
  }
  bool wanted = key == "distributedInfo" || key == "baseTimeNanoseconds" ||
                key == "host_name" || key == "bubblewatch_job";
  RETURN_IF_ERROR(ScanValue(/*keep=*/wanted));
  if (!wanted) return absl::OkStatus();
  std::string_view text(buf_ + mark_, pos_ - mark_);
  if (key == "baseTimeNanoseconds") return ReadBaseTime(text);
  // Small values: parsed from a padded copy of their own.
  simdjson::padded_string copy(text);
  RETURN_IF_ERROR(Iterate(copy.data(), copy.size(),
                          copy.size() + simdjson::SIMDJSON_PADDING,
                          Offset(mark_)));
  if (key == "distributedInfo") {
    if (text.front() != '{')
      return absl::OkStatus();  // Not an object: no info.
    od::value value;
    if (auto err = doc_.get_value().get(value)) return Syntax(err);
    return ReadDistributedInfo(value);
  }
  std::string_view text_value;
  if (doc_.get_string().get(text_value) == simdjson::SUCCESS) {
    // "bubblewatch_job" is written by bubblewatch_torch (torch.profiler's
    // add_metadata), so the watcher can tell the job without the file name.
    (key == "host_name" ? trace_.host : trace_.job) = std::string(text_value);
  }
  return absl::OkStatus();
}

absl::Status ChromeTraceReader::ReadEvents() {
  ++pos_;  // The '['.
  has_events_ = true;
  RETURN_IF_ERROR(SkipSpaceExpectMore("\"traceEvents\""));
  if (buf_[pos_] == ']') {
    ++pos_;
    return absl::OkStatus();
  }
  for (size_t index = 0;; ++index) {
    if ((index & 1023) == 0) ReportProgress(/*last=*/false);
    char c = buf_[pos_];
    if (c == '{') {
      RETURN_IF_ERROR(ScanValue(/*keep=*/true));
      RETURN_IF_ERROR(ReadEvent(mark_, pos_ - mark_, index));
    } else if (c == ',' || c == ']' || c == '}' || c == ':') {
      return SyntaxAt(Offset(pos_), "expected a value in \"traceEvents\"");
    } else {
      RETURN_IF_ERROR(ScanValue(/*keep=*/false));
      CountSkip({"non-object event"});
    }
    RETURN_IF_ERROR(SkipSpaceExpectMore("\"traceEvents\""));
    if (buf_[pos_] == ']') {
      ++pos_;
      return absl::OkStatus();
    }
    if (buf_[pos_] != ',') {
      return SyntaxAt(
          Offset(pos_),
          absl::StrCat("expected ',' or ']' after traceEvents[", index, "]"));
    }
    ++pos_;
    RETURN_IF_ERROR(SkipSpaceExpectMore("\"traceEvents\""));
  }
}

absl::Status ChromeTraceReader::ReadEvent(size_t begin, size_t size,
                                          size_t index) {
  const char* text_begin = buf_ + begin;
  RETURN_IF_ERROR(Iterate(text_begin, size, readable_ - begin, Offset(begin)));
  od::object object;
  if (auto err = doc_.get_object().get(object)) return Syntax(err);
  EventFields f;
  for (auto field_result : object) {
    od::field field;
    if (auto err = std::move(field_result).get(field)) return Syntax(err);
    od::raw_json_string key = field.key();
    od::value& value = field.value();
    // Keys in the order Kineto writes them.
    if (key == "ph") {
      f.ph = TokenText(value);
    } else if (key == "cat") {
      f.cat = TokenText(value);
    } else if (key == "name") {
      f.name = TokenText(value);
      std::optional<std::string_view> content = StringTokenContent(f.name);
      f.name_is_string = content.has_value();
      if (content) {
        f.name = *content;
        if (f.name.find('\\') != std::string_view::npos &&
            value.get_string().get(f.name) != simdjson::SUCCESS) {
          return EventError(index, "\"name\" is not a valid string");
        }
      }
    } else if (key == "pid") {
      f.pid = TokenText(value);
    } else if (key == "tid") {
      f.tid = TokenText(value);
    } else if (key == "ts") {
      f.ts = TokenText(value);
    } else if (key == "dur") {
      f.dur = TokenText(value);
    } else if (key == "args") {
      RETURN_IF_ERROR(ReadArgs(value, &f));
    }
  }
  std::string_view ph = StringTokenContent(f.ph).value_or(f.ph);
  if (f.cat.data() == nullptr) {
    if (ph == "X") {
      CountSkip({"complete event without category"});
    } else {
      CountSkip({"phase '", ph, "'"});
    }
    return absl::OkStatus();
  }
  std::string_view cat = StringTokenContent(f.cat).value_or(f.cat);
  std::optional<KinetoCategory> category = ClassifyKinetoCategory(cat);
  if (!category) {
    CountSkip({"category '", cat, "'"});
    return absl::OkStatus();
  }
  if (ph != "X") {
    CountSkip({"phase '", ph, "' in category '", cat, "'"});
    return absl::OkStatus();
  }
  // The object's whole text identifies it. A repeat reads as the same event
  // as its first copy, which was kept (or failed the read): skip it.
  if (duplicates_.IsRepeat(absl::string_view(text_begin, size))) {
    CountSkip({"duplicate event"});
    return absl::OkStatus();
  }
  return KeepEvent(f, *category, index);
}

absl::Status ChromeTraceReader::ReadArgs(od::value& value, EventFields* f) {
  od::object args;
  if (auto err = value.get_object().get(args)) {
    if (err == simdjson::INCORRECT_TYPE) return absl::OkStatus();
    return Syntax(err);
  }
  for (auto field_result : args) {
    od::field field;
    if (auto err = std::move(field_result).get(field)) return Syntax(err);
    od::raw_json_string key = field.key();
    od::value& arg = field.value();
    int64_t i = 0;
    uint64_t u = 0;
    if (key == "device") {
      f->device_bad = arg.get_int64().get(i) != simdjson::SUCCESS;
      if (!f->device_bad) f->device = i;
    } else if (key == "stream") {
      f->stream_bad = arg.get_int64().get(i) != simdjson::SUCCESS;
      if (!f->stream_bad) f->stream = i;
    } else if (key == "correlation") {
      // Not an unsigned integer: unknown, like an absent one.
      if (arg.get_uint64().get(u) == simdjson::SUCCESS) f->correlation = u;
    } else if (key == "bytes") {
      if (arg.get_uint64().get(u) == simdjson::SUCCESS) f->bytes = u;
    }
  }
  return absl::OkStatus();
}

absl::Status ChromeTraceReader::KeepEvent(const EventFields& f,
                                          const KinetoCategory& category,
                                          size_t index) {
  if (!f.name_is_string) {
    return EventError(index, f.name.data() == nullptr
                                 ? "complete event without \"name\""
                                 : "\"name\" must be a string");
  }
  if (f.ts.data() == nullptr) {
    return EventError(index, "complete event without \"ts\"");
  }
  if (f.dur.data() == nullptr) {
    return EventError(index, "complete event without \"dur\"");
  }
  ASSIGN_OR_RETURN(int64_t start_ns, Micros(f.ts, "ts", index));
  ASSIGN_OR_RETURN(int64_t dur_ns, Micros(f.dur, "dur", index));
  if (dur_ns < 0) {
    return EventError(
        index, absl::StrCat("negative dur ", AbslView(f.dur.substr(0, 40)),
                            " us on '", AbslView(f.name.substr(0, 80)), "'"));
  }
  int64_t end_ns = 0;
  if (__builtin_add_overflow(start_ns, dur_ns, &end_ns)) {
    return EventError(
        index, absl::StrCat("ts ", AbslView(f.ts.substr(0, 40)), " + dur ",
                            AbslView(f.dur.substr(0, 40)),
                            " us does not fit in 64-bit nanoseconds"));
  }
  max_start_ns_ = std::max(max_start_ns_, start_ns);
  NameId name = names_.Intern(AbslView(f.name));
  if (category.gpu) {
    if (f.device_bad) {
      return EventError(index, "args.device must be an integer");
    }
    if (f.stream_bad) {
      return EventError(index, "args.stream must be an integer");
    }
    GpuActivity& a = trace_.gpu.emplace_back();
    a.start_ns = start_ns;
    a.end_ns = end_ns;
    a.correlation = f.correlation;
    a.bytes = f.bytes;
    a.name = name;
    a.device = static_cast<int32_t>(f.device.value_or(IdKey(f.pid)));
    a.stream = static_cast<int32_t>(f.stream.value_or(IdKey(f.tid)));
    a.kind = category.gpu_kind;
    a.pageable = a.kind == GpuActivityKind::kMemcpy &&
                 f.name.find("Pageable") != std::string_view::npos;
  } else {
    CpuEvent& e = trace_.cpu.emplace_back();
    e.start_ns = start_ns;
    e.end_ns = end_ns;
    e.correlation = f.correlation;
    e.thread = (static_cast<uint64_t>(IdKey(f.pid)) << 32) | IdKey(f.tid);
    e.name = name;
    e.category = category.cpu_category;
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ChromeTraceReader::Micros(std::string_view token,
                                                  std::string_view field,
                                                  size_t index) {
  absl::StatusOr<int64_t> ns = TokenMicrosToNanos(token);
  if (!ns.ok()) {
    return EventError(index, absl::StrCat("\"", AbslView(field),
                                          "\": ", ns.status().message()));
  }
  return *ns;
}

uint32_t ChromeTraceReader::IdKey(std::string_view token) {
  if (token.data() == nullptr) return 0;
  if (std::optional<int64_t> number = TokenInteger(token)) {
    return static_cast<uint32_t>(*number);
  }
  std::string_view text = StringTokenContent(token).value_or(token);
  auto it = string_ids_.find(AbslView(text));
  if (it != string_ids_.end()) return it->second;
  uint32_t id = std::numeric_limits<uint32_t>::max() -
                static_cast<uint32_t>(string_ids_.size());
  string_ids_.emplace(std::string(text), id);
  return id;
}

absl::Status ChromeTraceReader::ReadDistributedInfo(od::value& value) {
  od::object info;
  if (auto err = value.get_object().get(info)) {
    if (err == simdjson::INCORRECT_TYPE) return absl::OkStatus();
    return Syntax(err);
  }
  for (auto field_result : info) {
    od::field field;
    if (auto err = std::move(field_result).get(field)) return Syntax(err);
    od::raw_json_string key = field.key();
    int64_t number = 0;
    if (key == "rank") {
      if (field.value().get_int64().get(number) == simdjson::SUCCESS) {
        trace_.rank = static_cast<int32_t>(number);
      }
    } else if (key == "world_size") {
      if (field.value().get_int64().get(number) == simdjson::SUCCESS) {
        trace_.world_size = static_cast<int32_t>(number);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ChromeTraceReader::ReadBaseTime(std::string_view token) {
  base_time_ns_ = TokenInteger(token);
  if (!base_time_ns_) {
    return absl::InvalidArgumentError(
        absl::StrCat("baseTimeNanoseconds is not an integer: ",
                     AbslView(token.substr(0, 40))));
  }
  return absl::OkStatus();
}

absl::Status ChromeTraceReader::ApplyBaseTime() {
  if (!base_time_ns_ || *base_time_ns_ == 0) return absl::OkStatus();
  int64_t base = *base_time_ns_;
  // Epoch-absolute ts already start at or after the base: leave them.
  if (trace_.gpu.empty() && trace_.cpu.empty()) return absl::OkStatus();
  if (max_start_ns_ >= base) return absl::OkStatus();
  auto shift = [base](int64_t* t) {
    return __builtin_add_overflow(*t, base, t);
  };
  bool overflow = false;
  for (GpuActivity& a : trace_.gpu) {
    overflow |= shift(&a.start_ns) | shift(&a.end_ns);
  }
  for (CpuEvent& e : trace_.cpu) {
    overflow |= shift(&e.start_ns) | shift(&e.end_ns);
  }
  if (overflow) {
    return absl::InvalidArgumentError(
        absl::StrCat("ts + baseTimeNanoseconds ", base,
                     " does not fit in 64-bit nanoseconds"));
  }
  return absl::OkStatus();
}

void ChromeTraceReader::CountSkip(
    std::initializer_list<std::string_view> parts) {
  char buffer[512];
  size_t size = 0;
  for (std::string_view part : parts) {
    part = part.substr(0, 64);
    if (part.empty()) continue;
    std::memcpy(buffer + size, part.data(), part.size());
    size += part.size();
  }
  absl::string_view reason(buffer, size);
  auto it = trace_.skipped.find(reason);
  if (it == trace_.skipped.end()) {
    trace_.skipped.emplace(std::string(reason), 1);
  } else {
    ++it->second;
  }
}

void ChromeTraceReader::ReportProgress(bool last) {
  if (!progress_) return;
  uint64_t done = Offset(pos_);
  if (last) {
    progress_(done, done);
    return;
  }
  if (done < next_progress_) return;
  next_progress_ = done + kChromeProgressStepBytes;
  uint64_t total = done;
  if (source_ == nullptr) {
    total = len_;
  } else if (!source_->compressed()) {
    total = source_->file_size();
  } else if (source_->file_bytes_consumed() > 0) {
    // Uncompressed size unknown until the end: scale by the compressed part.
    total = static_cast<uint64_t>(
        static_cast<double>(source_->bytes_produced()) *
        static_cast<double>(source_->file_size()) /
        static_cast<double>(source_->file_bytes_consumed()));
  }
  progress_(done, std::max(done, total));
}

}  // namespace

absl::StatusOr<Trace> ReadChromeTrace(const simdjson::padded_string& json,
                                      const ReadProgressFn& progress) {
  ChromeTraceReader reader(json, progress);
  return reader.Read();
}

absl::StatusOr<Trace> ReadChromeTrace(TraceByteSource& source,
                                      absl::string_view head,
                                      const ReadProgressFn& progress) {
  ChromeTraceReader reader(source, head, progress);
  return reader.Read();
}

}  // namespace bubblewatch
