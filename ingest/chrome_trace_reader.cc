#include "ingest/chrome_trace_reader.h"

#include <algorithm>
#include <cstring>
#include <limits>
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

class ChromeTraceReader {
 public:
  ChromeTraceReader(const simdjson::padded_string& json,
                    const ReadProgressFn& progress)
      : json_(json), progress_(progress), names_(&trace_) {}

  absl::StatusOr<Trace> Read();

 private:
  absl::Status ReadEvents(od::value& value);
  absl::Status ReadEvent(od::value& element, size_t index);
  absl::Status ReadArgs(od::value& value, EventFields* f);
  absl::Status KeepEvent(const EventFields& f, const KinetoCategory& category,
                         size_t index);
  absl::Status ReadDistributedInfo(od::value& value);
  absl::Status ReadBaseTime(od::value& value);
  absl::Status ApplyBaseTime();

  // Counts a skipped event under the reason made of `parts`, each cut to 64
  // bytes; allocates only the first time a reason is seen.
  void CountSkip(std::initializer_list<std::string_view> parts);
  // A JSON syntax error; one that ran into the end of input says the file
  // may be truncated.
  absl::Status Syntax(simdjson::error_code error) {
    absl::Status status = JsonSyntaxError(doc_, json_, error);
    const char* location = nullptr;
    if (doc_.current_location().get(location) != simdjson::SUCCESS ||
        location >= json_.data() + json_.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          status.message(), " (the input ends early: truncated?)"));
    }
    return status;
  }
  static absl::Status EventError(size_t index, std::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("traceEvents[", index, "]: ", AbslView(what)));
  }
  absl::StatusOr<int64_t> Micros(std::string_view token, std::string_view field,
                                 size_t index);
  uint32_t IdKey(std::string_view token);
  void ReportProgress(const char* position);

  const simdjson::padded_string& json_;
  const ReadProgressFn& progress_;
  uint64_t next_progress_ = kChromeProgressStepBytes;
  od::parser parser_;
  od::document doc_;
  Trace trace_;
  NameInterner names_;
  DuplicateEventFilter duplicates_;
  // Ids for pid/tid strings that are not numbers.
  absl::flat_hash_map<std::string, uint32_t> string_ids_;
  std::optional<int64_t> base_time_ns_;
  int64_t max_start_ns_ = std::numeric_limits<int64_t>::min();
  bool has_events_ = false;
};

absl::StatusOr<Trace> ChromeTraceReader::Read() {
  if (auto err = parser_.iterate(json_).get(doc_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad JSON: ", simdjson::error_message(err),
                     err == simdjson::UNCLOSED_STRING ? " (truncated?)" : ""));
  }
  od::object root;
  if (auto err = doc_.get_object().get(root)) {
    if (err == simdjson::INCORRECT_TYPE) {
      return absl::InvalidArgumentError(
          "the top level must be an object with \"traceEvents\"");
    }
    if (err == simdjson::INCOMPLETE_ARRAY_OR_OBJECT) {
      // simdjson checks up front that the last token closes the top level.
      return absl::InvalidArgumentError(
          "bad JSON: the input does not end with the top-level object's '}' "
          "(truncated, or something after it)");
    }
    return Syntax(err);
  }
  for (auto field_result : root) {
    od::field field;
    if (auto err = std::move(field_result).get(field)) return Syntax(err);
    od::raw_json_string key = field.key();
    od::value& value = field.value();
    if (key == "traceEvents") {
      RETURN_IF_ERROR(ReadEvents(value));
    } else if (key == "distributedInfo") {
      RETURN_IF_ERROR(ReadDistributedInfo(value));
    } else if (key == "baseTimeNanoseconds") {
      RETURN_IF_ERROR(ReadBaseTime(value));
    } else if (key == "bubblewatch_job") {
      // Written by bubblewatch_torch (torch.profiler's add_metadata), so the
      // watcher can tell the job without relying on the file name.
      std::string_view job;
      if (value.get_string().get(job) == simdjson::SUCCESS) {
        trace_.job = std::string(job);
      }
    } else if (key == "host_name") {
      std::string_view host;
      if (value.get_string().get(host) == simdjson::SUCCESS) {
        trace_.host = std::string(host);
      }
    }
  }
  // Anything but the end of input after the top-level object is an error.
  const char* trailing = nullptr;
  if (doc_.current_location().get(trailing) == simdjson::SUCCESS) {
    return Syntax(simdjson::TRAILING_CONTENT);
  }
  if (!has_events_) {
    return absl::InvalidArgumentError(
        "not a Chrome trace: no \"traceEvents\" array");
  }
  RETURN_IF_ERROR(ApplyBaseTime());
  if (progress_) progress_(json_.size(), json_.size());
  return std::move(trace_);
}

absl::Status ChromeTraceReader::ReadEvents(od::value& value) {
  od::array events;
  if (auto err = value.get_array().get(events)) {
    if (err == simdjson::INCORRECT_TYPE) {
      return absl::InvalidArgumentError("\"traceEvents\" must be an array");
    }
    return Syntax(err);
  }
  has_events_ = true;
  size_t index = 0;
  for (auto element_result : events) {
    od::value element;
    if (auto err = std::move(element_result).get(element)) return Syntax(err);
    RETURN_IF_ERROR(ReadEvent(element, index));
    ++index;
  }
  return absl::OkStatus();
}

absl::Status ChromeTraceReader::ReadEvent(od::value& element, size_t index) {
  const char* begin = element.raw_json_token().data();
  if ((index & 1023) == 0) ReportProgress(begin);
  od::object object;
  if (auto err = element.get_object().get(object)) {
    if (err != simdjson::INCORRECT_TYPE) return Syntax(err);
    CountSkip({"non-object event"});
    return absl::OkStatus();
  }
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
  // The object's whole text identifies it: the document now stands on the
  // ',' or ']' after its closing brace.
  const char* end = nullptr;
  if (doc_.current_location().get(end) != simdjson::SUCCESS) {
    end = json_.data() + json_.size();
  }
  std::string_view text = TrimJsonSpace(std::string_view(begin, end - begin));
  RETURN_IF_ERROR(KeepEvent(f, *category, index));
  bool repeat = category->gpu
                    ? duplicates_.IsRepeat(AbslView(text), trace_.gpu.back())
                    : duplicates_.IsRepeat(AbslView(text), trace_.cpu.back());
  if (repeat) {
    if (category->gpu) {
      trace_.gpu.pop_back();
    } else {
      trace_.cpu.pop_back();
    }
    CountSkip({"duplicate event"});
  }
  return absl::OkStatus();
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

absl::Status ChromeTraceReader::ReadBaseTime(od::value& value) {
  std::string_view token = TokenText(value);
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

void ChromeTraceReader::ReportProgress(const char* position) {
  if (!progress_) return;
  uint64_t done = static_cast<uint64_t>(position - json_.data());
  if (done < next_progress_) return;
  next_progress_ = done + kChromeProgressStepBytes;
  progress_(done, json_.size());
}

}  // namespace

absl::StatusOr<Trace> ReadChromeTrace(const simdjson::padded_string& json,
                                      const ReadProgressFn& progress) {
  ChromeTraceReader reader(json, progress);
  return reader.Read();
}

}  // namespace bubblewatch
