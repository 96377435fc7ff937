#include "cli/chrome_passthrough.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ingest/chrome/json_container_scan.h"
#include "ingest/chrome/json_token.h"
#include "ingest/chrome/kineto_category.h"
#include "ingest/trace_io/trace_file.h"

namespace bubblewatch {
namespace {

constexpr size_t kPadding = 64;  // ScanJsonContainer reads this far ahead.
constexpr size_t kChunkBytes = size_t{1} << 20;

bool IsJsonSpace(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

// Past the string whose opening quote `state` was started at (a zeroed
// state, p at the quote); nullptr when [p, end) ends inside it.
const char* ScanString(const char* p, const char* end, JsonScanState& s) {
  for (; p < end; ++p) {
    const char c = *p;
    if (!s.in_string) {
      s.in_string = true;  // The opening quote.
    } else if (s.escape_pending) {
      s.escape_pending = false;
    } else if (c == '\\') {
      s.escape_pending = true;
    } else if (c == '"') {
      return p + 1;
    }
  }
  return nullptr;
}

const char* ScanScalar(const char* p, const char* end) {
  while (p < end && *p != ',' && *p != '}' && *p != ']' && !IsJsonSpace(*p)) {
    ++p;
  }
  return p;
}

// The file's bytes in a buffer that keeps what is still needed (from mark)
// and reads more in chunks: memory is a chunk or the largest value.
class Walker {
 public:
  explicit Walker(TraceByteSource& source) : source_(source) {
    Reserve(kChunkBytes);
  }

  absl::Status Walk(
      const std::function<absl::Status(std::string_view, std::string_view)>&
          top,
      const std::function<absl::Status(std::string_view)>& event) {
    ASSIGN_OR_RETURN(bool any, SkipSpace());
    if (!any || At() != '{') {
      return absl::InvalidArgumentError(
          "the top level must be an object with \"traceEvents\"");
    }
    ++pos_;
    std::string key;
    while (true) {
      RETURN_IF_ERROR(SkipSpaceExpectMore());
      const char c = At();
      if (c == '}') return absl::OkStatus();
      if (c == ',') {
        ++pos_;
        continue;
      }
      if (c != '"') return Syntax("expected a key");
      RETURN_IF_ERROR(ScanValue());
      key.assign(buf_.get() + mark_ + 1, pos_ - mark_ - 2);
      RETURN_IF_ERROR(SkipSpaceExpectMore());
      if (At() != ':') return Syntax("expected ':'");
      ++pos_;
      RETURN_IF_ERROR(SkipSpaceExpectMore());
      if (key == "traceEvents" && At() == '[') {
        ++pos_;
        while (true) {
          RETURN_IF_ERROR(SkipSpaceExpectMore());
          const char e = At();
          if (e == ']') {
            ++pos_;
            break;
          }
          if (e == ',') {
            ++pos_;
            continue;
          }
          RETURN_IF_ERROR(ScanValue());
          if (e == '{') {
            RETURN_IF_ERROR(
                event(std::string_view(buf_.get() + mark_, pos_ - mark_)));
          }
        }
        continue;
      }
      RETURN_IF_ERROR(ScanValue());
      RETURN_IF_ERROR(
          top(key, std::string_view(buf_.get() + mark_, pos_ - mark_)));
    }
  }

 private:
  char At() const { return buf_[pos_]; }

  absl::Status Syntax(std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("bad JSON at offset ", offset_ + pos_, ": ",
                     absl::string_view(what.data(), what.size())));
  }

  void Reserve(size_t capacity) {
    auto fresh = std::make_unique<char[]>(capacity + kPadding);
    if (len_ > mark_)
      std::memcpy(fresh.get(), buf_.get() + mark_, len_ - mark_);
    offset_ += mark_;
    len_ -= mark_;
    pos_ -= mark_;
    mark_ = 0;
    buf_ = std::move(fresh);
    capacity_ = capacity;
  }

  // Keeps [mark_, len_), reads more behind it; false at the end.
  absl::StatusOr<bool> More() {
    if (eof_) return false;
    if (mark_ > 0) {
      std::memmove(buf_.get(), buf_.get() + mark_, len_ - mark_);
      offset_ += mark_;
      len_ -= mark_;
      pos_ -= mark_;
      mark_ = 0;
    }
    if (capacity_ - len_ < kChunkBytes / 2) Reserve(capacity_ * 2);
    ASSIGN_OR_RETURN(size_t n,
                     source_.Read(buf_.get() + len_, capacity_ - len_));
    len_ += n;
    std::memset(buf_.get() + len_, ' ', kPadding);
    if (n == 0) eof_ = true;
    return n > 0;
  }

  absl::StatusOr<bool> SkipSpace() {
    while (true) {
      while (pos_ < len_ && IsJsonSpace(buf_[pos_])) ++pos_;
      if (pos_ < len_) return true;
      mark_ = pos_;
      ASSIGN_OR_RETURN(bool more, More());
      if (!more) return false;
    }
  }

  absl::Status SkipSpaceExpectMore() {
    ASSIGN_OR_RETURN(bool more, SkipSpace());
    if (!more) return Syntax("the input ends early (truncated?)");
    return absl::OkStatus();
  }

  // The value at pos_: afterwards it is [mark_, pos_).
  absl::Status ScanValue() {
    mark_ = pos_;
    const char first = At();
    const bool scalar = first != '{' && first != '[' && first != '"';
    JsonScanState state;
    while (true) {
      const char* const base = buf_.get();
      const char* const p = base + pos_;
      const char* const end = base + len_;
      const char* after = scalar         ? ScanScalar(p, end)
                          : first == '"' ? ScanString(p, end, state)
                                         : ScanJsonContainer(p, end, state);
      if (after != nullptr && after < end) {
        pos_ = static_cast<size_t>(after - base);
        return absl::OkStatus();
      }
      if (after == end && !scalar) {
        pos_ = len_;
        return absl::OkStatus();
      }
      pos_ = len_;
      ASSIGN_OR_RETURN(bool more, More());
      if (!more) {
        if (scalar) return absl::OkStatus();
        return Syntax("the input ends inside a value (truncated?)");
      }
    }
  }

  TraceByteSource& source_;
  std::unique_ptr<char[]> buf_;
  size_t capacity_ = 0;
  size_t len_ = 0;
  size_t pos_ = 0;
  size_t mark_ = 0;
  uint64_t offset_ = 0;  // File offset of buf_[0].
  bool eof_ = false;
};

const JsonField* Find(const std::vector<JsonField>& fields,
                      std::string_view key) {
  for (const JsonField& f : fields) {
    if (f.key == key) return &f;
  }
  return nullptr;
}

// The category a kept event has: "X" of a category the reader keeps.
std::optional<KinetoCategory> KeptCategory(const std::vector<JsonField>& f) {
  const JsonField* ph = Find(f, "ph");
  const JsonField* cat = Find(f, "cat");
  if (ph == nullptr || cat == nullptr || ph->value != "\"X\"") {
    return std::nullopt;
  }
  std::optional<std::string_view> text = StringTokenContent(cat->value);
  if (!text) return std::nullopt;
  return ClassifyKinetoCategory(*text);
}

}  // namespace

bool TopLevelFields(std::string_view object, std::vector<JsonField>& fields) {
  fields.clear();
  const char* p = object.data();
  const char* const end = p + object.size();
  auto skip = [&] {
    while (p < end && IsJsonSpace(*p)) ++p;
  };
  skip();
  if (p == end || *p != '{') return false;
  ++p;
  skip();
  if (p < end && *p == '}') return true;
  while (p < end) {
    if (*p != '"') return false;
    JsonScanState s;
    const char* key_end = ScanString(p, end, s);
    if (key_end == nullptr) return false;
    const std::string_view key(p + 1, static_cast<size_t>(key_end - p - 2));
    p = key_end;
    skip();
    if (p == end || *p != ':') return false;
    ++p;
    skip();
    if (p == end) return false;
    const char* value = p;
    JsonScanState v;
    if (*p == '{' || *p == '[') {
      p = ScanJsonContainer(p, end, v);
    } else if (*p == '"') {
      p = ScanString(p, end, v);
    } else {
      p = ScanScalar(p, end);
    }
    if (p == nullptr || p == value) return false;
    fields.push_back({key, std::string_view(value, p - value)});
    skip();
    if (p == end) return false;
    if (*p == '}') return true;
    if (*p != ',') return false;
    ++p;
    skip();
  }
  return false;
}

absl::Status WalkChromeFile(
    const std::string& path,
    const std::function<absl::Status(std::string_view key,
                                     std::string_view value)>& top,
    const std::function<absl::Status(std::string_view event)>& event) {
  ASSIGN_OR_RETURN(std::unique_ptr<TraceByteSource> source,
                   TraceByteSource::Open(path));
  Walker walker(*source);
  return walker.Walk(top, event);
}

absl::StatusOr<ChromeFileSurvey> SurveyChromeFile(const std::string& path) {
  ChromeFileSurvey survey;
  std::optional<int64_t> base;
  std::optional<int64_t> kept_max;
  std::optional<int64_t> min_ts;
  std::vector<JsonField> fields;
  RETURN_IF_ERROR(WalkChromeFile(
      path,
      [&](std::string_view key, std::string_view value) {
        if (key == "baseTimeNanoseconds") base = TokenInteger(value);
        survey.metadata.emplace_back(std::string(key), std::string(value));
        return absl::OkStatus();
      },
      [&](std::string_view event) {
        ++survey.events;
        if (!TopLevelFields(event, fields)) return absl::OkStatus();
        const JsonField* ts = Find(fields, "ts");
        if (ts == nullptr) return absl::OkStatus();
        absl::StatusOr<int64_t> ns = TokenMicrosToNanos(ts->value);
        if (!ns.ok()) return absl::OkStatus();
        min_ts = std::min(min_ts.value_or(*ns), *ns);
        if (KeptCategory(fields)) {
          kept_max = std::max(kept_max.value_or(*ns), *ns);
        }
        return absl::OkStatus();
      }));
  // The reader's rule (TraceAssembler::ApplyBaseTime): the base is added
  // when every kept event starts before it.
  if (base && *base != 0 && kept_max && *kept_max < *base) {
    survey.shift_ns = *base;
  }
  if (min_ts) survey.min_start_ns = *min_ts + survey.shift_ns;
  return survey;
}

absl::StatusOr<PassThroughStats> PassThroughChromeEvents(
    const std::string& path, const PassThroughOptions& options,
    ChromeTraceSink& sink) {
  PassThroughStats stats;
  std::vector<JsonField> fields;
  std::vector<JsonField> args_fields;
  const ChromeEventOptions& clock = options.clock;
  auto keep = [&](int64_t start, int64_t end) {
    return start < clock.to_ns &&
           (end > clock.from_ns || (end == start && start >= clock.from_ns));
  };
  const std::string pid = absl::StrCat(options.rank);
  RETURN_IF_ERROR(WalkChromeFile(
      path, [](std::string_view, std::string_view) { return absl::OkStatus(); },
      [&](std::string_view event) -> absl::Status {
        if (!TopLevelFields(event, fields)) {
          // Nothing the walk can cut (the reader would have refused the
          // file): as it is.
          sink.Event().append(event);
          ++stats.events;
          return sink.Flush();
        }
        const JsonField* ph = Find(fields, "ph");
        const JsonField* ts = Find(fields, "ts");
        const JsonField* dur = Find(fields, "dur");
        std::optional<int64_t> start;
        std::optional<int64_t> dur_ns;
        int64_t end = 0;
        if (ts != nullptr) {
          absl::StatusOr<int64_t> t = TokenMicrosToNanos(ts->value);
          if (t.ok()) start = clock.ToClock(*t + options.shift_ns);
          if (t.ok() && dur != nullptr) {
            absl::StatusOr<int64_t> d = TokenMicrosToNanos(dur->value);
            if (d.ok()) {
              dur_ns = *d;
              end = clock.ToClock(*t + *d + options.shift_ns);
            }
          }
          if (start && !dur_ns) end = *start;
        }
        const bool metadata = ph != nullptr && ph->value == "\"M\"";
        if (start && !metadata && !keep(*start, end)) {
          ++stats.cut;
          return absl::OkStatus();
        }
        const bool flow =
            ph != nullptr && (ph->value == "\"s\"" || ph->value == "\"t\"" ||
                              ph->value == "\"f\"");
        // A GPU activity whose device the pid said (no args.device).
        std::optional<int64_t> add_device;
        const JsonField* args = Find(fields, "args");
        if (std::optional<KinetoCategory> c = KeptCategory(fields);
            c && c->gpu) {
          const JsonField* p = Find(fields, "pid");
          bool has_device = false;
          if (args != nullptr && TopLevelFields(args->value, args_fields)) {
            has_device = Find(args_fields, "device") != nullptr;
          }
          if (!has_device && p != nullptr) add_device = TokenInteger(p->value);
        }

        std::string& out = sink.Event();
        const char* copied = event.data();
        auto upto = [&](const char* at) {
          out.append(copied, static_cast<size_t>(at - copied));
        };
        for (const JsonField& f : fields) {
          const char* begin = f.value.data();
          const char* after = begin + f.value.size();
          if (&f == ts && start) {
            upto(begin);
            AppendMicros(&out, *start - sink.time_base_ns());
          } else if (&f == dur && dur_ns && start && end - *start != *dur_ns) {
            upto(begin);
            AppendMicros(&out, end - *start);
          } else if (f.key == "pid") {
            upto(begin);
            out += pid;
          } else if (flow && options.remap_flow_ids && f.key == "id") {
            upto(begin);
            std::optional<int64_t> id =
                f.value.front() == '"' ? std::nullopt : TokenInteger(f.value);
            if (id && *id >= 0 && *id < (int64_t{1} << 36)) {
              absl::StrAppend(&out, (int64_t{options.rank} << 36) + *id);
            } else {
              const std::string_view raw =
                  StringTokenContent(f.value).value_or(f.value);
              absl::StrAppend(&out, "\"", options.rank, ":",
                              absl::string_view(raw.data(), raw.size()), "\"");
            }
          } else if (&f == args && add_device) {
            upto(begin + 1);
            absl::StrAppend(&out, "\"device\":", *add_device,
                            args_fields.empty() ? "" : ",");
            copied = begin + 1;
            ++stats.devices_added;
            continue;
          } else {
            continue;
          }
          copied = after;
        }
        if (add_device && args == nullptr) {
          // Before the closing brace.
          const char* close = event.data() + event.size() - 1;
          upto(close);
          absl::StrAppend(&out, ",\"args\":{\"device\":", *add_device, "}");
          copied = close;
          ++stats.devices_added;
        }
        upto(event.data() + event.size());
        ++stats.events;
        return sink.Flush();
      }));
  return stats;
}

}  // namespace bubblewatch
