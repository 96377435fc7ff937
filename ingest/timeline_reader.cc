#include "ingest/timeline_reader.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"
#include "ingest/trace_io/json_support.h"

namespace bubblewatch {
namespace {

namespace od = simdjson::ondemand;

// Reads one entry's fields; `where` is e.g. "gpu_kernels[3]".
class EntryReader {
 public:
  EntryReader(NameInterner* names, Trace* trace, od::document* doc,
              const simdjson::padded_string* json)
      : names_(names), trace_(trace), doc_(doc), json_(json) {}

  absl::Status ReadGpu(od::object entry, const std::string& where) {
    GpuActivity a;
    Span span;
    bool has_stream = false;
    for (auto field : entry) {
      std::string_view raw_key;
      if (auto err = field.unescaped_key().get(raw_key)) {
        return JsonSyntaxError(*doc_, *json_, err);
      }
      absl::string_view key = AbslView(raw_key);
      od::value value = field.value();
      ASSIGN_OR_RETURN(bool common, ReadSpanField(key, value, where, span));
      if (common) {
        continue;
      } else if (key == "stream") {
        ASSIGN_OR_RETURN(int64_t stream, Integer(value, where, key));
        a.stream = static_cast<int32_t>(stream);
        has_stream = true;
      } else if (key == "device") {
        ASSIGN_OR_RETURN(int64_t device, Integer(value, where, key));
        a.device = static_cast<int32_t>(device);
      } else if (key == "correlation") {
        ASSIGN_OR_RETURN(int64_t corr, Integer(value, where, key));
        a.correlation = static_cast<CorrelationId>(corr);
      } else if (key == "bytes") {
        ASSIGN_OR_RETURN(int64_t bytes, Integer(value, where, key));
        a.bytes = static_cast<uint64_t>(bytes);
      } else if (key == "pageable") {
        bool pageable = false;
        if (value.get_bool().get(pageable) != simdjson::SUCCESS) {
          return Bad(where, "\"pageable\" must be true or false");
        }
        a.pageable = pageable;
      } else if (key == "kind") {
        ASSIGN_OR_RETURN(absl::string_view kind, String(value, where, key));
        if (kind == "kernel") {
          a.kind = GpuActivityKind::kKernel;
        } else if (kind == "memcpy") {
          a.kind = GpuActivityKind::kMemcpy;
        } else if (kind == "memset") {
          a.kind = GpuActivityKind::kMemset;
        } else {
          return Bad(where, absl::StrCat("unknown kind \"", kind,
                                         "\" (want kernel, memcpy or memset)"));
        }
      } else {
        ++trace_->skipped[absl::StrCat("unknown gpu_kernels key '", key, "'")];
      }
    }
    RETURN_IF_ERROR(CheckSpan(span, where));
    if (!has_stream) return Missing(where, "stream");
    a.name = span.name;
    a.start_ns = span.start_ns;
    a.end_ns = span.end_ns;
    trace_->gpu.push_back(a);
    if (a.kind == GpuActivityKind::kKernel &&
        IsCollectiveKernelName(trace_->Name(a.name))) {
      // The format has no collective identity: the kernel's name only.
      CollectiveKernel& c = trace_->collectives.emplace_back();
      c.start_ns = a.start_ns;
      c.end_ns = a.end_ns;
      c.device = a.device;
      c.stream = a.stream;
      c.kernel_name = a.name;
    }
    return absl::OkStatus();
  }

  absl::Status ReadCpu(od::object entry, const std::string& where) {
    CpuEvent e;
    Span span;
    for (auto field : entry) {
      std::string_view raw_key;
      if (auto err = field.unescaped_key().get(raw_key)) {
        return JsonSyntaxError(*doc_, *json_, err);
      }
      absl::string_view key = AbslView(raw_key);
      od::value value = field.value();
      ASSIGN_OR_RETURN(bool common, ReadSpanField(key, value, where, span));
      if (common) {
        continue;
      } else if (key == "tid") {
        ASSIGN_OR_RETURN(int64_t tid, Integer(value, where, key));
        e.thread = static_cast<uint64_t>(tid);
      } else if (key == "correlation") {
        ASSIGN_OR_RETURN(int64_t corr, Integer(value, where, key));
        e.correlation = static_cast<CorrelationId>(corr);
      } else {
        ++trace_->skipped[absl::StrCat("unknown cpu_events key '", key, "'")];
      }
    }
    RETURN_IF_ERROR(CheckSpan(span, where));
    e.name = span.name;
    e.start_ns = span.start_ns;
    e.end_ns = span.end_ns;
    trace_->cpu.push_back(e);
    return absl::OkStatus();
  }

 private:
  // The fields both kinds of entry have: "name", "start_us", "end_us".
  struct Span {
    NameId name = 0;
    int64_t start_ns = 0;
    int64_t end_ns = 0;
    bool has_name = false, has_start = false, has_end = false;
  };

  // Reads `key` into `span` if it is one of the shared fields; returns
  // whether it was.
  absl::StatusOr<bool> ReadSpanField(absl::string_view key, od::value value,
                                     const std::string& where, Span& span) {
    if (key == "name") {
      ASSIGN_OR_RETURN(absl::string_view name, String(value, where, key));
      span.name = names_->Intern(name);
      span.has_name = true;
    } else if (key == "start_us") {
      ASSIGN_OR_RETURN(span.start_ns, Micros(value, where, key));
      span.has_start = true;
    } else if (key == "end_us") {
      ASSIGN_OR_RETURN(span.end_ns, Micros(value, where, key));
      span.has_end = true;
    } else {
      return false;
    }
    return true;
  }

  // Every shared field is present and the end is not before the start.
  static absl::Status CheckSpan(const Span& span, const std::string& where) {
    if (!span.has_name) return Missing(where, "name");
    if (!span.has_start) return Missing(where, "start_us");
    if (!span.has_end) return Missing(where, "end_us");
    return CheckOrder(span.start_ns, span.end_ns, where);
  }

  static absl::Status Bad(const std::string& where, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
  }
  static absl::Status Missing(const std::string& where,
                              absl::string_view field) {
    return Bad(where, absl::StrCat("missing field \"", field, "\""));
  }
  static absl::Status CheckOrder(int64_t start_ns, int64_t end_ns,
                                 const std::string& where) {
    if (end_ns < start_ns) {
      return Bad(where, absl::StrCat("end_us ", end_ns / 1e3,
                                     " is before start_us ", start_ns / 1e3));
    }
    return absl::OkStatus();
  }
  static absl::StatusOr<absl::string_view> String(od::value value,
                                                  const std::string& where,
                                                  absl::string_view key) {
    std::string_view s;
    if (value.get_string().get(s) != simdjson::SUCCESS) {
      return Bad(where, absl::StrCat("\"", key, "\" must be a string"));
    }
    return AbslView(s);
  }
  static absl::StatusOr<int64_t> Integer(od::value value,
                                         const std::string& where,
                                         absl::string_view key) {
    int64_t v = 0;
    if (value.get_int64().get(v) != simdjson::SUCCESS) {
      return Bad(where, absl::StrCat("\"", key, "\" must be an integer"));
    }
    return v;
  }
  static absl::StatusOr<int64_t> Micros(od::value value,
                                        const std::string& where,
                                        absl::string_view key) {
    return ReadMicrosAsNanos(value, absl::StrCat(where, ".", key));
  }

  NameInterner* names_;
  Trace* trace_;
  od::document* doc_;
  const simdjson::padded_string* json_;
};

}  // namespace

absl::StatusOr<Trace> ReadTimelineJson(const simdjson::padded_string& json) {
  Trace trace;
  NameInterner names(&trace);
  od::parser parser;
  od::document doc;
  EntryReader reader(&names, &trace, &doc, &json);
  if (auto err = parser.iterate(json).get(doc)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad JSON: ", simdjson::error_message(err)));
  }
  od::object root;
  if (auto err = doc.get_object().get(root)) {
    if (err == simdjson::INCORRECT_TYPE) {
      return absl::InvalidArgumentError(
          "the top level must be an object with \"gpu_kernels\"");
    }
    return JsonSyntaxError(doc, json, err);
  }
  bool has_gpu = false;
  for (auto field : root) {
    std::string_view raw_key;
    if (auto err = field.unescaped_key().get(raw_key)) {
      return JsonSyntaxError(doc, json, err);
    }
    absl::string_view key = AbslView(raw_key);
    bool is_gpu = key == "gpu_kernels";
    if (!is_gpu && key != "cpu_events") {
      ++trace.skipped[absl::StrCat("unknown top-level key '", key, "'")];
      continue;  // The iterator skips the unread value.
    }
    has_gpu |= is_gpu;
    od::array entries;
    if (auto err = field.value().get_array().get(entries)) {
      if (err == simdjson::INCORRECT_TYPE) {
        return absl::InvalidArgumentError(
            absl::StrCat("\"", key, "\" must be an array"));
      }
      return JsonSyntaxError(doc, json, err);
    }
    size_t index = 0;
    for (auto element : entries) {
      std::string where = absl::StrCat(key, "[", index++, "]");
      od::object entry;
      if (auto err = element.get_object().get(entry)) {
        if (err == simdjson::INCORRECT_TYPE) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": must be an object"));
        }
        return JsonSyntaxError(doc, json, err);
      }
      RETURN_IF_ERROR(is_gpu ? reader.ReadGpu(entry, where)
                             : reader.ReadCpu(entry, where));
    }
  }
  if (!has_gpu) {
    return absl::InvalidArgumentError("missing field \"gpu_kernels\"");
  }
  return trace;
}

}  // namespace bubblewatch
