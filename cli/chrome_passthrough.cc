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
  if (p < end && !s.in_string) {
    s.in_string = true;  // The opening quote.
    ++p;
  }
  if (s.escape_pending && p < end) {
    s.escape_pending = false;
    ++p;
  }
  while (p < end) {
    const char* q = static_cast<const char*>(
        std::memchr(p, '"', static_cast<size_t>(end - p)));
    const char* b = static_cast<const char*>(
        std::memchr(p, '\\', static_cast<size_t>((q ? q : end) - p)));
    if (b != nullptr) {  // An escape before the next quote: past it.
      if (b + 1 == end) {
        s.escape_pending = true;
        return nullptr;
      }
      p = b + 2;
      continue;
    }
    if (q == nullptr) return nullptr;
    return q + 1;
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

// The top-level fields of an object's text, one at a time, so that a caller
// can stop once it has the fields it needs (Kineto writes "args", the
// longest, last): the rest is then never scanned.
class FieldCursor {
 public:
  explicit FieldCursor(std::string_view object)
      : p_(object.data()), end_(object.data() + object.size()) {
    Skip();
    if (p_ == end_ || *p_ != '{') {
      state_ = kBad;
      return;
    }
    ++p_;
    Skip();
    if (p_ < end_ && *p_ == '}') state_ = kDone;
  }

  // Appends the next field; false at the end or at bad JSON (ok() says).
  bool Next(std::vector<JsonField>& fields) {
    if (state_ != kMore) return false;
    state_ = kBad;
    if (p_ == end_ || *p_ != '"') return false;
    JsonScanState s;
    const char* key_end = ScanString(p_, end_, s);
    if (key_end == nullptr) return false;
    const std::string_view key(p_ + 1, static_cast<size_t>(key_end - p_ - 2));
    p_ = key_end;
    Skip();
    if (p_ == end_ || *p_ != ':') return false;
    ++p_;
    Skip();
    if (p_ == end_) return false;
    const char* value = p_;
    JsonScanState v;
    if (*p_ == '{' || *p_ == '[') {
      p_ = ScanJsonContainer(p_, end_, v);
    } else if (*p_ == '"') {
      p_ = ScanString(p_, end_, v);
    } else {
      p_ = ScanScalar(p_, end_);
    }
    if (p_ == nullptr || p_ == value) return false;
    fields.push_back({key, std::string_view(value, p_ - value)});
    Skip();
    if (p_ == end_) return false;
    if (*p_ == '}') {
      state_ = kDone;
    } else if (*p_ == ',') {
      ++p_;
      Skip();
      state_ = kMore;
    } else {
      return false;
    }
    return true;
  }

  bool ok() const { return state_ != kBad; }

 private:
  void Skip() {
    while (p_ < end_ && IsJsonSpace(*p_)) ++p_;
  }

  enum State { kMore, kDone, kBad };
  const char* p_;
  const char* const end_;
  State state_ = kMore;
};

// The fields of an event the export looks at, by key; absent: null data.
struct EventFields {
  enum Key { kPh, kCat, kTs, kDur, kPid, kId, kArgs, kNumKeys, kOther };
  std::string_view value[kNumKeys];

  static Key KeyOf(std::string_view k) {
    switch (k.size()) {
      case 2:
        if (k[0] == 'p' && k[1] == 'h') return kPh;
        if (k[0] == 't' && k[1] == 's') return kTs;
        if (k[0] == 'i' && k[1] == 'd') return kId;
        break;
      case 3:
        if (k[0] == 'c' && k[1] == 'a' && k[2] == 't') return kCat;
        if (k[0] == 'd' && k[1] == 'u' && k[2] == 'r') return kDur;
        if (k[0] == 'p' && k[1] == 'i' && k[2] == 'd') return kPid;
        break;
      case 4:
        if (k == "args") return kArgs;
        break;
    }
    return kOther;
  }

  // Records `field`; returns its key.
  Key Add(const JsonField& field) {
    const Key key = KeyOf(field.key);
    if (key != kOther && value[key].data() == nullptr) {
      value[key] = field.value;
    }
    return key;
  }
  bool has(Key key) const { return value[key].data() != nullptr; }
  bool Phase(char ph) const {
    const std::string_view v = value[kPh];
    return v.size() == 3 && v[0] == '"' && v[1] == ph && v[2] == '"';
  }
  bool Flow() const { return Phase('s') || Phase('t') || Phase('f'); }
  // The category of a kept event: "X" of a category the reader keeps.
  std::optional<KinetoCategory> Kept() const {
    if (!has(kCat) || !Phase('X')) return std::nullopt;
    std::optional<std::string_view> text = StringTokenContent(value[kCat]);
    if (!text) return std::nullopt;
    return ClassifyKinetoCategory(*text);
  }
};

}  // namespace

bool TopLevelFields(std::string_view object, std::vector<JsonField>& fields) {
  fields.clear();
  FieldCursor cursor(object);
  while (cursor.Next(fields)) {
  }
  return cursor.ok();
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
        // "ph", "cat" and "ts" are all the survey needs.
        fields.clear();
        EventFields f;
        FieldCursor cursor(event);
        int wanted = 3;
        while (wanted > 0 && cursor.Next(fields)) {
          const EventFields::Key key = f.Add(fields.back());
          if (key == EventFields::kPh || key == EventFields::kCat ||
              key == EventFields::kTs) {
            --wanted;
          }
        }
        if (!cursor.ok() || !f.has(EventFields::kTs)) return absl::OkStatus();
        absl::StatusOr<int64_t> ns =
            TokenMicrosToNanos(f.value[EventFields::kTs]);
        if (!ns.ok()) return absl::OkStatus();
        min_ts = std::min(min_ts.value_or(*ns), *ns);
        if (f.Kept()) kept_max = std::max(kept_max.value_or(*ns), *ns);
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
        using K = EventFields;
        // The fields to rewrite or look at ("ph", "cat", "ts", "dur",
        // "pid"; a flow's "id"; a GPU activity's "args"): the fields after
        // the last of them are copied unscanned.
        fields.clear();
        EventFields f;
        FieldCursor cursor(event);
        int wanted = 5;
        while (wanted > 0 && cursor.Next(fields)) {
          const K::Key key = f.Add(fields.back());
          if (key <= K::kPid) --wanted;
        }
        const std::optional<KinetoCategory> kept = f.Kept();
        const bool gpu = kept && kept->gpu;
        const bool flow = f.Flow();
        if (cursor.ok() &&
            ((flow && !f.has(K::kId)) || (gpu && !f.has(K::kArgs)))) {
          while (cursor.Next(fields)) f.Add(fields.back());
        }
        if (!cursor.ok()) {
          // Nothing the walk can cut (the reader would have refused the
          // file): as it is.
          sink.Event().append(event);
          ++stats.events;
          return sink.Flush();
        }
        std::optional<int64_t> start;
        std::optional<int64_t> dur_ns;
        int64_t end = 0;
        if (f.has(K::kTs)) {
          absl::StatusOr<int64_t> t = TokenMicrosToNanos(f.value[K::kTs]);
          if (t.ok()) start = clock.ToClock(*t + options.shift_ns);
          if (t.ok() && f.has(K::kDur)) {
            absl::StatusOr<int64_t> d = TokenMicrosToNanos(f.value[K::kDur]);
            if (d.ok()) {
              dur_ns = *d;
              end = clock.ToClock(*t + *d + options.shift_ns);
            }
          }
          if (start && !dur_ns) end = *start;
        }
        if (start && !f.Phase('M') && !keep(*start, end)) {
          ++stats.cut;
          return absl::OkStatus();
        }
        // A GPU activity whose device the pid said (no args.device).
        std::optional<int64_t> add_device;
        if (gpu && f.has(K::kPid)) {
          bool has_device = false;
          if (f.has(K::kArgs) &&
              TopLevelFields(f.value[K::kArgs], args_fields)) {
            for (const JsonField& a : args_fields) {
              if (a.key == "device") has_device = true;
            }
          }
          if (!has_device) add_device = TokenInteger(f.value[K::kPid]);
        }

        std::string& out = sink.Event();
        const char* copied = event.data();
        auto upto = [&](const char* at) {
          out.append(copied, static_cast<size_t>(at - copied));
        };
        for (const JsonField& field : fields) {
          const char* begin = field.value.data();
          const char* after = begin + field.value.size();
          // Only the first of a repeated key is rewritten, as recorded.
          const K::Key key = K::KeyOf(field.key);
          if (key == K::kOther || f.value[key].data() != begin) continue;
          if (key == K::kTs && start) {
            upto(begin);
            AppendMicros(&out, *start - sink.time_base_ns());
          } else if (key == K::kDur && dur_ns && start &&
                     end - *start != *dur_ns) {
            upto(begin);
            AppendMicros(&out, end - *start);
          } else if (key == K::kPid) {
            upto(begin);
            out += pid;
          } else if (key == K::kId && flow && options.remap_flow_ids) {
            upto(begin);
            std::optional<int64_t> id = field.value.front() == '"'
                                            ? std::nullopt
                                            : TokenInteger(field.value);
            if (id && *id >= 0 && *id < (int64_t{1} << 36)) {
              absl::StrAppend(&out, (int64_t{options.rank} << 36) + *id);
            } else {
              const std::string_view raw =
                  StringTokenContent(field.value).value_or(field.value);
              absl::StrAppend(&out, "\"", options.rank, ":",
                              absl::string_view(raw.data(), raw.size()), "\"");
            }
          } else if (key == K::kArgs && add_device) {
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
        if (add_device && !f.has(K::kArgs)) {
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
