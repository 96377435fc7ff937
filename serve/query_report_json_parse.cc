// Reads the JSON of query_report_json.cc back into the query results, for
// `bubblewatch query --server`. Lenient about extra keys (a newer server may
// add some), strict about the ones it needs.
#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "serve/query_report.h"
#include "simdjson.h"

namespace bubblewatch {
namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

// Reads fields of one JSON object; the first problem is kept (with the key's
// path) and later reads return defaults, so callers check status() once.
class Fields {
 public:
  Fields(object obj, std::string path, absl::Status* status)
      : obj_(obj), path_(std::move(path)), status_(status) {}

  element Get(const char* key) {
    element e;
    if (status_->ok() && obj_[key].get(e) != simdjson::SUCCESS) {
      Fail(key, "missing");
    }
    return e;
  }
  bool Has(const char* key) {
    element e;
    return status_->ok() && obj_[key].get(e) == simdjson::SUCCESS;
  }
  bool IsNull(const char* key) {
    element e = Get(key);
    return status_->ok() && e.is_null();
  }
  int64_t Int(const char* key) {
    int64_t v = 0;
    element e = Get(key);
    if (status_->ok() && e.get_int64().get(v) != simdjson::SUCCESS) {
      Fail(key, "not an integer");
    }
    return v;
  }
  bool Bool(const char* key) {
    bool v = false;
    element e = Get(key);
    if (status_->ok() && e.get_bool().get(v) != simdjson::SUCCESS) {
      Fail(key, "not a boolean");
    }
    return v;
  }
  double Double(const char* key) {
    double v = 0;
    element e = Get(key);
    if (status_->ok() && e.get_double().get(v) != simdjson::SUCCESS) {
      Fail(key, "not a number");
    }
    return v;
  }
  // A `*_us` duration back to integer ns.
  int64_t Ns(const char* key) { return std::llround(Double(key) * 1e3); }
  std::string String(const char* key) {
    std::string_view v;
    element e = Get(key);
    if (status_->ok() && e.get_string().get(v) != simdjson::SUCCESS) {
      Fail(key, "not a string");
    }
    return std::string(v);
  }
  std::optional<Fields> Object(const char* key) {
    object o;
    element e = Get(key);
    if (!status_->ok() || e.is_null()) return std::nullopt;
    if (e.get_object().get(o) != simdjson::SUCCESS) {
      Fail(key, "not an object");
      return std::nullopt;
    }
    return Fields(o, absl::StrCat(path_, ".", key), status_);
  }
  // Records that `key` holds a bad value (the first problem is kept).
  void Fail(const char* key, absl::string_view what) {
    if (!status_->ok()) return;
    *status_ = absl::DataLossError(
        absl::StrCat("bad server reply: ", path_, ".", key, ": ", what));
  }
  // Calls `each(Fields)` for every object of the array at `key`.
  template <typename F>
  void Array(const char* key, F each) {
    array a;
    element e = Get(key);
    if (status_->ok() && e.get_array().get(a) != simdjson::SUCCESS) {
      Fail(key, "not an array");
    }
    if (!status_->ok()) return;
    size_t i = 0;
    for (element item : a) {
      object o;
      std::string path = absl::StrCat(path_, ".", key, "[", i++, "]");
      if (item.get_object().get(o) != simdjson::SUCCESS) {
        *status_ = absl::DataLossError(absl::StrCat(path, ": not an object"));
        return;
      }
      Fields f(o, std::move(path), status_);
      each(f);
      if (!status_->ok()) return;
    }
  }

 private:
  object obj_;
  std::string path_;
  absl::Status* status_;
};

std::optional<KernelRef> ReadKernel(Fields& f, const char* key) {
  std::optional<Fields> k = f.Object(key);
  if (!k.has_value()) return std::nullopt;
  return KernelRef{.name = k->String("name"),
                   .start_ns = k->Int("start_ns"),
                   .end_ns = k->Int("end_ns"),
                   .stream = static_cast<int32_t>(k->Int("stream"))};
}

Attribution ReadAttribution(Fields& f) {
  Attribution a{};
  if (std::optional<Fields> o = f.Object("attribution_us")) {
    for (BubbleCause c : kAllBubbleCauses) {
      const std::string name(BubbleCauseName(c));
      a[static_cast<int>(c)] = o->Ns(name.c_str());
    }
  }
  return a;
}

PeriodStats ReadPeriod(Fields& f) {
  PeriodStats p;
  p.windows = f.Int("windows");
  p.span_ns = f.Ns("span_us");
  p.compute_ns = f.Ns("compute_us");
  p.bubble_ns = f.Ns("bubble_us");
  p.attribution = ReadAttribution(f);
  return p;
}

FleetJobPeriod ReadFleetPeriod(Fields& f) {
  FleetJobPeriod p;
  p.stats = ReadPeriod(f);
  p.partial_windows = f.Int("partial_windows");
  p.capacity_ns = f.Ns("capacity_us");
  if (f.Has("collective_windows")) {
    p.collective_windows = f.Int("collective_windows");
    p.comm_wait_ns = f.Ns("comm_wait_us");
    p.straggler_wait_ns = f.Ns("straggler_wait_us");
    // Absent from servers older than the field.
    if (f.Has("straggler_cost_us")) {
      p.straggler_cost_ns = f.Ns("straggler_cost_us");
    }
  }
  return p;
}

// The "ranks", "stragglers" and "collectives" members of query_report_json.cc
// WriteCollectives; nullopt when absent (single-rank windows and jobs).
std::optional<WindowCollectives> ReadCollectives(Fields& f,
                                                 int64_t* late_collectives) {
  if (!f.Has("ranks")) return std::nullopt;
  WindowCollectives c;
  f.Array("ranks", [&](Fields& r) {
    RankWindow& o = c.ranks.emplace_back();
    o.rank = static_cast<int32_t>(r.Int("rank"));
    o.device = static_cast<int32_t>(r.Int("device"));
    o.host = r.IsNull("host") ? SharedString() : SharedString(r.String("host"));
    if (r.Has("pid")) o.pid = r.Int("pid");  // Absent: unknown.
    o.span_ns = r.Ns("span_us");
    o.compute_ns = r.Ns("compute_us");
    o.comm_ns = r.Ns("comm_us");
    o.comm_exposed_ns = r.Ns("comm_exposed_us");
    o.comm_wait_ns = r.Ns("comm_wait_us");
    o.wait_caused_ns = r.Ns("wait_caused_us");
    o.arrived_last = r.Int("arrived_last");
    if (r.Has("clock_offset_us")) o.clock_offset_ns = r.Ns("clock_offset_us");
    // The rest of the clock: absent from servers older than it.
    if (r.Has("clock_connected")) {
      o.clock_instances = r.Int("clock_instances");
      if (!r.IsNull("clock_drift_us_per_s")) {
        o.clock_drift_ns_per_s = r.Double("clock_drift_us_per_s") * 1e3;
      }
      if (!r.IsNull("clock_residual_us")) {
        o.clock_residual_ns = r.Ns("clock_residual_us");
      }
      o.clock_connected = r.Bool("clock_connected");
      o.clock_corrected = r.Bool("clock_corrected");
    }
  });
  f.Array("stragglers", [&](Fields& s) {
    StragglerWindow& o = c.stragglers.emplace_back();
    o.rank = static_cast<int32_t>(s.Int("rank"));
    o.wait_caused_ns = s.Ns("wait_caused_us");
    o.arrived_last = s.Int("arrived_last");
    if (std::optional<Fields> causes = s.Object("causes_us")) {
      for (BubbleCause cause : kAllBubbleCauses) {
        const std::string name(BubbleCauseName(cause));
        o.causes[static_cast<int>(cause)] = causes->Ns(name.c_str());
      }
      o.compute_ns = causes->Ns("compute");
      o.comm_ns = causes->Ns("comm");
    }
    o.unattributed_ns = s.Ns("unattributed_us");
    // The root blame and cost: absent from servers older than them.
    if (s.Has("host") && !s.IsNull("host")) o.host = s.String("host");
    if (s.Has("pid")) o.pid = s.Int("pid");  // Absent: unknown.
    if (s.Has("direct_wait_caused_us")) {
      o.direct_wait_caused_ns = s.Ns("direct_wait_caused_us");
    }
    if (s.Has("via")) {
      s.Array("via", [&](Fields& v) {
        o.via.push_back(
            Straggler::Via{.rank = static_cast<int32_t>(v.Int("rank")),
                           .wait_ns = v.Ns("wait_us")});
      });
    }
    if (s.Has("saved_us") && !s.IsNull("saved_us")) {
      o.saved_ns = s.Ns("saved_us");
    }
  });
  if (f.Has("what_if") && !f.IsNull("what_if")) {
    if (std::optional<Fields> w = f.Object("what_if")) {
      c.job_ns = w->Ns("job_us");
      c.job_ns_without_stragglers = w->Ns("job_us_without_stragglers");
    }
  }
  if (std::optional<Fields> n = f.Object("collectives")) {
    c.kernels = n->Int("kernels");
    c.matched = n->Int("matched");
    c.unmatched = n->Int("unmatched");
    c.unsynchronized = n->Int("unsynchronized");
    c.used = n->Int("used");
    c.unattributed = n->Int("unattributed");
    c.seq_backwards = n->Int("seq_backwards");
    // Absent from servers older than the field.
    c.seq_jumps = n->Has("seq_jumps") ? n->Int("seq_jumps") : 0;
    const std::string key = n->String("key");
    for (uint8_t k = 0; k < 3; ++k) {
      if (WindowCollectiveKeyName(k) == key) c.key = k;
    }
    *late_collectives = n->Int("late");
  }
  return c;
}

WindowPoint ReadWindow(Fields& f) {
  WindowPoint p;
  p.start_ns = f.Int("start_ns");
  p.end_ns = f.Int("end_ns");
  p.stats.span_ns = f.Ns("span_us");
  p.stats.compute_ns = f.Ns("compute_us");
  p.stats.bubble_ns = f.Ns("bubble_us");
  p.stats.largest_bubble_ns = f.Ns("largest_bubble_us");
  p.stats.largest_bubble_start_ns = f.Int("largest_bubble_start_ns");
  p.stats.culprit_before_bubble = ReadKernel(f, "culprit_before_bubble");
  p.stats.attribution = ReadAttribution(f);
  p.devices = static_cast<int32_t>(f.Int("devices"));
  p.gpu_events = f.Int("gpu_events");
  p.cpu_events = f.Int("cpu_events");
  p.late_events = f.Int("late_events");
  // A name this build does not know (a newer server's) is refused, as the
  // window codec refuses the value: no reason is shown for another.
  const std::string closed_by = f.String("closed_by");
  if (std::optional<WindowSummary::ClosedBy> c = ParseClosedBy(closed_by)) {
    p.closed_by = *c;
  } else {
    f.Fail("closed_by", absl::StrCat("unknown value \"", closed_by, "\""));
  }
  // Absent in reports of servers older than the field.
  p.host_skew_ns = f.Has("host_skew_us") ? f.Ns("host_skew_us") : 0;
  p.collectives = ReadCollectives(f, &p.late_collectives);
  if (f.Has("late_collectives")) {
    p.late_collectives = f.Int("late_collectives");
  }
  if (f.Has("observed_us")) p.observed_ns = f.Ns("observed_us");
  // Absent for windows that fit (and from servers older than the field).
  std::optional<Fields> t =
      f.Has("trimmed") ? f.Object("trimmed") : std::nullopt;
  if (t) {
    p.trimmed =
        WindowTrim{.limit_bytes = t->Int("limit_bytes"),
                   .original_bytes = t->Int("original_bytes"),
                   .names_cut = t->Int("names_cut"),
                   .devices = t->Int("devices_left_out"),
                   .top_bubbles = t->Int("top_bubbles_left_out"),
                   .ranks = t->Int("ranks_left_out"),
                   .stragglers = t->Int("stragglers_left_out"),
                   .via = t->Has("via_left_out") ? t->Int("via_left_out") : 0};
  }
  return p;
}

BubbleReport ReadBubble(Fields& f) {
  BubbleReport b;
  b.device = static_cast<int32_t>(f.Int("device"));
  b.start_ns = f.Int("start_ns");
  b.end_ns = f.Int("end_ns");
  b.cause =
      ParseBubbleCause(f.String("cause")).value_or(BubbleCause::kUnattributed);
  b.blamed = f.String("blamed");
  b.before = ReadKernel(f, "before");
  b.after = ReadKernel(f, "after");
  b.attribution = ReadAttribution(f);
  return b;
}

// Parses `json` and calls `read(Fields&)` on its top-level object.
template <typename T, typename F>
absl::StatusOr<T> ParseTop(absl::string_view json, F read) {
  simdjson::dom::parser parser;
  element doc;
  object root;
  if (parser.parse(json.data(), json.size()).get(doc) != simdjson::SUCCESS ||
      doc.get_object().get(root) != simdjson::SUCCESS) {
    return absl::DataLossError("bad server reply: not a JSON object");
  }
  absl::Status status;
  Fields f(root, "$", &status);
  T value = read(f);
  if (!status.ok()) return status;
  return value;
}

}  // namespace

absl::StatusOr<JobReport> ParseJobReportJson(absl::string_view json) {
  return ParseTop<JobReport>(json, [](Fields& f) {
    JobReport r;
    r.job = f.String("job");
    r.from_ns = f.Int("from_ns");
    r.to_ns = f.Int("to_ns");
    r.anchor_ns = f.Int("anchor_ns");
    f.Array("windows", [&](Fields& w) { r.windows.push_back(ReadWindow(w)); });
    f.Array("rolling", [&](Fields& w) {
      r.rolling.push_back(RollingUtilization{
          .range = absl::Seconds(w.Int("range_s")), .stats = ReadPeriod(w)});
    });
    if (std::optional<Fields> s = f.Object("summary")) {
      r.summary = ReadPeriod(*s);
      if (!s->IsNull("worst_utilization")) {
        r.worst_utilization = s->Double("worst_utilization");
      }
      r.worst_window_start_ns = s->Int("worst_window_start_ns");
      // Absent when no window's observed time is known, and from servers
      // older than the fields.
      if (s->Has("observed_windows")) {
        ObservedPeriod& o = r.observed.emplace();
        o.windows = s->Int("observed_windows");
        o.observed_ns = s->Ns("observed_us");
        o.length_ns = o.observed_ns + s->Ns("unobserved_us");
        o.partial_windows = s->Int("partly_observed_windows");
      }
    }
    f.Array("top_bubbles",
            [&](Fields& b) { r.top_bubbles.push_back(ReadBubble(b)); });
    r.collectives = ReadCollectives(f, &r.late_collectives);
    return r;
  });
}

absl::StatusOr<FleetReport> ParseFleetJson(absl::string_view json) {
  absl::Status order_status;
  auto report = ParseTop<FleetReport>(json, [&](Fields& f) {
    FleetReport r;
    absl::StatusOr<FleetOrder> by = ParseFleetOrder(f.String("by"));
    if (by.ok()) {
      r.by = *by;
    } else {
      order_status = absl::DataLossError("bad server reply: $.by");
    }
    r.from_ns = f.Int("from_ns");
    r.to_ns = f.Int("to_ns");
    r.jobs = f.Int("jobs");
    f.Array("top", [&](Fields& e) {
      FleetEntry entry;
      entry.job = e.String("job");
      if (e.Has("state")) {
        entry.state = e.String("state");
        std::string err;
        if (!absl::ParseTime(absl::RFC3339_full, e.String("last_seen"),
                             &entry.last_seen_wall, &err)) {
          entry.last_seen_wall = absl::UnixEpoch();
        }
      }
      if (std::optional<Fields> p = e.Object("period")) {
        entry.period = ReadFleetPeriod(*p);
      }
      if (std::optional<Fields> w = e.Object("window")) {
        entry.latest = ReadWindow(*w);
      }
      entry.score = r.by.Score(entry.period);
      r.entries.push_back(std::move(entry));
    });
    if (std::optional<Fields> all = f.Object("fleet")) {
      r.all = ReadFleetPeriod(*all);
    }
    return r;
  });
  if (report.ok() && !order_status.ok()) return order_status;
  return report;
}

absl::StatusOr<std::vector<JobInfo>> ParseJobsJson(absl::string_view json) {
  return ParseTop<std::vector<JobInfo>>(json, [](Fields& f) {
    std::vector<JobInfo> jobs;
    f.Array("jobs", [&](Fields& j) {
      JobInfo info;
      info.job = j.String("job");
      info.window_count = j.Int("window_count");
      if (!j.IsNull("last_event_ns")) {
        info.last_event_ns = j.Int("last_event_ns");
      }
      info.latest_window_start_ns = j.Int("latest_window_start_ns");
      std::string err;
      if (!absl::ParseTime(absl::RFC3339_full, j.String("last_seen"),
                           &info.last_seen_wall, &err)) {
        info.last_seen_wall = absl::UnixEpoch();
      }
      // A server from before the lifecycle sends none of it: active.
      if (j.Has("ended")) {
        info.lifecycle.ended = j.Bool("ended");
        info.lifecycle.expired = j.Bool("expired");
        info.lifecycle.batches_after_end = j.Int("batches_after_end");
        // Added later: absent from an older server's reply.
        if (j.Has("overlapping_observations")) {
          info.lifecycle.overlapping_observations =
              j.Int("overlapping_observations");
          info.lifecycle.observations_backwards =
              j.Int("observations_backwards");
        }
        // The cadence comes as one figure: two equal gaps have it as median.
        const auto cadence_ns =
            static_cast<int64_t>(std::llround(j.Double("cadence_s") * 1e9));
        if (cadence_ns > 0) info.lifecycle.gaps_ns = {cadence_ns, cadence_ns};
      }
      jobs.push_back(std::move(info));
    });
    return jobs;
  });
}

absl::Status ParseErrorJson(absl::string_view json) {
  simdjson::dom::parser parser;
  element doc;
  std::string_view message, code;
  if (parser.parse(json.data(), json.size()).get(doc) != simdjson::SUCCESS ||
      doc["error"].get_string().get(message) != simdjson::SUCCESS ||
      doc["code"].get_string().get(code) != simdjson::SUCCESS) {
    return absl::UnknownError("not an error reply");
  }
  absl::StatusCode c = absl::StatusCode::kUnknown;
  if (code == "not_found") c = absl::StatusCode::kNotFound;
  if (code == "invalid_argument") c = absl::StatusCode::kInvalidArgument;
  if (code == "unauthenticated") c = absl::StatusCode::kUnauthenticated;
  if (code == "unavailable") c = absl::StatusCode::kUnavailable;
  return absl::Status(c, std::string(message));
}

}  // namespace bubblewatch
