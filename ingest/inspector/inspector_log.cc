#include "ingest/inspector/inspector_log.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "ingest/trace_io/json_support.h"
#include "ingest/trace_io/trace_file.h"
#include "simdjson.h"

namespace bubblewatch {

int64_t InspectorLog::coll_dropped() const {
  int64_t n = 0;
  for (const InspectorComm& c : comms) n += c.coll_dropped();
  return n;
}

int64_t InspectorLog::p2p_dropped() const {
  int64_t n = 0;
  for (const InspectorComm& c : comms) n += c.p2p_dropped();
  return n;
}

int64_t InspectorLog::lines_skipped() const {
  int64_t n = 0;
  for (const auto& [reason, count] : skipped) {
    if (absl::EndsWith(reason, "(line skipped)")) n += count;
  }
  return n;
}

namespace {

namespace od = simdjson::ondemand;

constexpr size_t kChunkBytes = size_t{1} << 20;
constexpr int64_t kMaxTimestampUs = kMaxEventTimeNs / 1000;
constexpr int64_t kMaxExecUs = int64_t{86'400} * 1'000'000;
// A line longer than this is no Inspector record (they are hundreds of
// bytes, a few KiB verbose with many channels): skipped, counted.
constexpr size_t kMaxLineBytes = size_t{16} << 20;

// `<hostname>-pid<PID>` from a file name (any directory and extension).
void HostPidFromFileName(absl::string_view file, std::string* host,
                         int64_t* pid) {
  const size_t slash = file.find_last_of('/');
  if (slash != absl::string_view::npos) file.remove_prefix(slash + 1);
  for (absl::string_view ext : {".gz", ".log", ".jsonl", ".json"}) {
    absl::ConsumeSuffix(&file, ext);
  }
  const size_t at = file.rfind("-pid");
  if (at == absl::string_view::npos || at == 0) return;
  int64_t p = 0;
  if (!absl::SimpleAtoi(file.substr(at + 4), &p) || p < 0) return;
  *host = std::string(file.substr(0, at));
  *pid = p;
}

bool KnownVersion(std::string_view v) {
  return v.substr(0, 3) == "v4." || v.substr(0, 3) == "v5.";
}

// What one line says, before it is applied to the log (a line that turns
// out bad must leave no trace).
struct Line {
  bool has_header = false;
  std::string_view comm_id;
  std::string_view comm_name;
  int64_t rank = -1;
  int64_t n_ranks = -1;
  int64_t nnodes = -1;

  bool has_metadata = false;
  std::string_view version;
  std::string_view hostname;
  int64_t pid = -1;
  int64_t dump_ts = -1;

  enum Kind { kNone, kColl, kP2p, kDumpStats, kProxy } kind = kNone;
  int kinds = 0;  // How many of coll_perf/p2p_perf/dump_stats/proxy_trace.
  std::string_view op_name;
  std::string_view timing_source;
  int64_t sn = -1;
  int64_t peer = -1;
  int64_t msg_bytes = -1;
  int64_t exec_us = -1;
  double algobw = -1;
  double busbw = -1;
  int64_t kernel_start = -1;
  int64_t kernel_stop = -1;

  // dump_stats.
  int64_t coll_records = -1;
  int64_t p2p_records = -1;
  int64_t proxy_records = 0;
  int64_t coll_dropped_total = 0;
  int64_t coll_dropped_since = 0;
  int64_t p2p_dropped_total = 0;
  int64_t p2p_dropped_since = 0;

  // Names of fields not known, and fields of the wrong type.
  std::vector<std::string_view> unknown;
  std::vector<std::string_view> wrong_type;
};

class LogParser {
 public:
  explicit LogParser(InspectorLog* log) : log_(log) {}

  // Parses the complete line [data, data + len); the memory after it up to
  // data + capacity is readable (simdjson's padding).
  void ParseLine(const char* data, size_t len, size_t capacity, bool last) {
    while (len > 0 && (data[len - 1] == '\r' || data[len - 1] == ' ' ||
                       data[len - 1] == '\t')) {
      --len;
    }
    size_t lead = 0;
    while (lead < len && (data[lead] == ' ' || data[lead] == '\t')) ++lead;
    if (lead == len) return;  // Blank.
    ++log_->lines;
    Line line;
    if (!Parse(data + lead, len - lead, capacity - lead, &line)) {
      Skip(last ? "truncated last line" : "bad JSON line");
      return;
    }
    Apply(line);
  }

  void Finish() {
    if (remaining_coll_ + remaining_p2p_ > 0) {
      log_->skipped["records announced by a dump marker, missing"] +=
          remaining_coll_ + remaining_p2p_;
    }
  }

 private:
  void Skip(absl::string_view reason) {
    log_->skipped[absl::StrCat(reason, " (line skipped)")]++;
  }

  static bool Int(od::value v, int64_t* out) {
    int64_t x = 0;
    if (v.get_int64().get(x) != simdjson::SUCCESS) return false;
    *out = x;
    return true;
  }
  static bool Double(od::value v, double* out) {
    double x = 0;
    if (v.get_double().get(x) != simdjson::SUCCESS) return false;
    *out = x;
    return true;
  }
  static bool String(od::value v, std::string_view* out) {
    return v.get_string().get(*out) == simdjson::SUCCESS;
  }

  bool ParseHeader(od::object o, Line* line) {
    line->has_header = true;
    for (auto field : o) {
      std::string_view key;
      if (field.unescaped_key().get(key) != simdjson::SUCCESS) return false;
      od::value v;
      if (field.value().get(v) != simdjson::SUCCESS) return false;
      if (key == "id") {
        if (!String(v, &line->comm_id)) line->wrong_type.push_back("header.id");
      } else if (key == "comm_name") {
        if (!String(v, &line->comm_name)) {
          line->wrong_type.push_back("header.comm_name");
        }
      } else if (key == "rank") {
        if (!Int(v, &line->rank)) line->wrong_type.push_back("header.rank");
      } else if (key == "n_ranks") {
        if (!Int(v, &line->n_ranks)) {
          line->wrong_type.push_back("header.n_ranks");
        }
      } else if (key == "nnodes") {
        if (!Int(v, &line->nnodes)) line->wrong_type.push_back("header.nnodes");
      } else {
        line->unknown.push_back(key);
      }
    }
    return true;
  }

  bool ParseMetadata(od::object o, Line* line) {
    line->has_metadata = true;
    for (auto field : o) {
      std::string_view key;
      if (field.unescaped_key().get(key) != simdjson::SUCCESS) return false;
      od::value v;
      if (field.value().get(v) != simdjson::SUCCESS) return false;
      if (key == "inspector_output_format_version") {
        if (!String(v, &line->version)) {
          line->wrong_type.push_back(
              "metadata.inspector_output_format_version");
        }
      } else if (key == "hostname") {
        if (!String(v, &line->hostname)) {
          line->wrong_type.push_back("metadata.hostname");
        }
      } else if (key == "pid") {
        if (!Int(v, &line->pid)) line->wrong_type.push_back("metadata.pid");
      } else if (key == "dump_timestamp_us") {
        if (!Int(v, &line->dump_ts)) {
          line->wrong_type.push_back("metadata.dump_timestamp_us");
        }
      } else if (key != "git_rev" && key != "rec_mechanism") {
        line->unknown.push_back(key);
      }
    }
    return true;
  }

  // event_trace_ts: the kernel's earliest start and latest stop over its
  // channels.
  bool ParseTrace(od::object o, Line* line) {
    for (auto field : o) {
      std::string_view key;
      if (field.unescaped_key().get(key) != simdjson::SUCCESS) return false;
      od::value v;
      if (field.value().get(v) != simdjson::SUCCESS) return false;
      if (key != "kernel_events") continue;
      od::array channels;
      if (v.get_array().get(channels) != simdjson::SUCCESS) {
        line->wrong_type.push_back("event_trace_ts.kernel_events");
        continue;
      }
      for (auto ch : channels) {
        od::object cho;
        if (ch.get_object().get(cho) != simdjson::SUCCESS) return false;
        for (auto f : cho) {
          std::string_view k;
          if (f.unescaped_key().get(k) != simdjson::SUCCESS) return false;
          od::value cv;
          if (f.value().get(cv) != simdjson::SUCCESS) return false;
          int64_t t = -1;
          if (k == "kernel_start_ts") {
            if (Int(cv, &t) && t > 0 &&
                (line->kernel_start < 0 || t < line->kernel_start)) {
              line->kernel_start = t;
            }
          } else if (k == "kernel_stop_ts") {
            if (Int(cv, &t) && t > 0 && t > line->kernel_stop) {
              line->kernel_stop = t;
            }
          }
        }
      }
    }
    return true;
  }

  bool ParseOp(od::object o, bool p2p, Line* line) {
    const std::string_view prefix = p2p ? "p2p" : "coll";
    for (auto field : o) {
      std::string_view key;
      if (field.unescaped_key().get(key) != simdjson::SUCCESS) return false;
      od::value v;
      if (field.value().get(v) != simdjson::SUCCESS) return false;
      if (key == prefix) {
        if (!String(v, &line->op_name)) line->wrong_type.push_back(key);
        continue;
      }
      if (key == "event_trace_ts") {
        od::object t;
        if (v.get_object().get(t) != simdjson::SUCCESS) {
          line->wrong_type.push_back(key);
          continue;
        }
        if (!ParseTrace(t, line)) return false;
        continue;
      }
      std::string_view rest = key;
      if (rest.size() <= prefix.size() + 1 ||
          rest.substr(0, prefix.size()) != prefix ||
          rest[prefix.size()] != '_') {
        // event_trace_sn (callback order) and events (v4.4+ nested child
        // events) are known and not needed.
        if (key != "event_trace_sn" && key != "events") {
          line->unknown.push_back(key);
        }
        continue;
      }
      rest.remove_prefix(prefix.size() + 1);
      bool ok = true;
      if (rest == "sn") {
        ok = Int(v, &line->sn);
      } else if (rest == "exec_time_us") {
        ok = Int(v, &line->exec_us);
      } else if (rest == "msg_size_bytes") {
        ok = Int(v, &line->msg_bytes);
      } else if (rest == "algobw_gbs") {
        ok = Double(v, &line->algobw);
      } else if (rest == "busbw_gbs") {
        ok = Double(v, &line->busbw);
      } else if (rest == "timing_source") {
        ok = String(v, &line->timing_source);
      } else if (p2p && rest == "peer") {
        ok = Int(v, &line->peer);
      } else if (rest == "algo" || rest == "proto") {
        // Known, not needed.
      } else {
        line->unknown.push_back(key);
      }
      if (!ok) line->wrong_type.push_back(key);
    }
    return true;
  }

  bool ParseDumpStats(od::object o, Line* line) {
    for (auto field : o) {
      std::string_view key;
      if (field.unescaped_key().get(key) != simdjson::SUCCESS) return false;
      od::value v;
      if (field.value().get(v) != simdjson::SUCCESS) return false;
      int64_t* target = nullptr;
      if (key == "coll_records") target = &line->coll_records;
      if (key == "p2p_records") target = &line->p2p_records;
      if (key == "proxy_records") target = &line->proxy_records;
      if (key == "coll_dropped_total") target = &line->coll_dropped_total;
      if (key == "coll_dropped_since_last_dump") {
        target = &line->coll_dropped_since;
      }
      if (key == "p2p_dropped_total") target = &line->p2p_dropped_total;
      if (key == "p2p_dropped_since_last_dump") {
        target = &line->p2p_dropped_since;
      }
      if (target == nullptr) {
        // Proxy counters (v5 with proxy tracing) are known, not used.
        if (key.substr(0, 6) != "proxy_") line->unknown.push_back(key);
        continue;
      }
      if (!Int(v, target) || *target < 0) {
        *target = key == "coll_records" || key == "p2p_records" ? -1 : 0;
        line->wrong_type.push_back(key);
      }
    }
    return true;
  }

  bool Parse(const char* data, size_t len, size_t capacity, Line* line) {
    od::document doc;
    if (parser_.iterate(data, len, capacity).get(doc) != simdjson::SUCCESS) {
      return false;
    }
    od::object top;
    if (doc.get_object().get(top) != simdjson::SUCCESS) return false;
    for (auto field : top) {
      std::string_view key;
      if (field.unescaped_key().get(key) != simdjson::SUCCESS) return false;
      od::value v;
      if (field.value().get(v) != simdjson::SUCCESS) return false;
      od::object o;
      const bool known = key == "header" || key == "metadata" ||
                         key == "coll_perf" || key == "p2p_perf" ||
                         key == "dump_stats";
      if (!known) {
        if (key == "proxy_trace" || key == "record_type") {
          line->kind = Line::kProxy;
          ++line->kinds;
        } else {
          line->unknown.push_back(key);
        }
        continue;
      }
      if (v.get_object().get(o) != simdjson::SUCCESS) return false;
      bool ok = true;
      if (key == "header") {
        ok = ParseHeader(o, line);
      } else if (key == "metadata") {
        ok = ParseMetadata(o, line);
      } else if (key == "coll_perf") {
        line->kind = Line::kColl;
        ++line->kinds;
        ok = ParseOp(o, false, line);
      } else if (key == "p2p_perf") {
        line->kind = Line::kP2p;
        ++line->kinds;
        ok = ParseOp(o, true, line);
      } else {
        line->kind = Line::kDumpStats;
        ++line->kinds;
        ok = ParseDumpStats(o, line);
      }
      if (!ok) return false;
    }
    // Nothing after the object: a location left means trailing text.
    const char* rest = nullptr;
    return doc.current_location().get(rest) != simdjson::SUCCESS;
  }

  uint32_t NameIndex(std::string_view name) {
    auto it = names_.find(absl::string_view(name.data(), name.size()));
    if (it != names_.end()) return it->second;
    const uint32_t id = static_cast<uint32_t>(log_->op_names.size());
    log_->op_names.emplace_back(name);
    names_.emplace(log_->op_names.back(), id);
    return id;
  }

  // The communicator of a header; -1 when the header lacks an id.
  int CommOf(const Line& line) {
    if (line.comm_id.empty()) return -1;
    auto it = comms_.find(AbslView(line.comm_id));
    if (it != comms_.end()) {
      InspectorComm& c = log_->comms[it->second];
      if (line.rank >= 0 && c.rank >= 0 && line.rank != c.rank) {
        log_->skipped["communicator header with another rank"]++;
      }
      return it->second;
    }
    InspectorComm c;
    c.id = std::string(line.comm_id);
    if (line.comm_name != "unknown") c.name = std::string(line.comm_name);
    c.rank = line.rank >= 0 && line.rank <= INT32_MAX
                 ? static_cast<int32_t>(line.rank)
                 : -1;
    c.n_ranks = line.n_ranks > 0 && line.n_ranks <= INT32_MAX
                    ? static_cast<int32_t>(line.n_ranks)
                    : -1;
    c.nnodes = line.nnodes;
    const int id = static_cast<int>(log_->comms.size());
    log_->comms.push_back(std::move(c));
    comms_.emplace(log_->comms.back().id, id);
    return id;
  }

  void Apply(const Line& line) {
    if (line.kinds > 1) {
      Skip("more than one of coll_perf, p2p_perf, dump_stats");
      return;
    }
    if (line.kind == Line::kNone) {
      Skip("no coll_perf, p2p_perf or dump_stats");
      return;
    }
    if (line.kind == Line::kProxy) {
      log_->skipped["proxy_trace record (not used)"]++;
      return;
    }
    if (line.has_metadata) {
      if (!line.hostname.empty() || line.pid >= 0) {
        const bool other =
            (!log_->hostname.empty() && !line.hostname.empty() &&
             from_metadata_ && log_->hostname != line.hostname) ||
            (log_->pid >= 0 && line.pid >= 0 && from_metadata_ &&
             log_->pid != line.pid);
        if (other) {
          Skip("metadata names another process than the file's first");
          return;
        }
        if (!from_metadata_) {
          if (!line.hostname.empty())
            log_->hostname = std::string(line.hostname);
          if (line.pid >= 0) log_->pid = line.pid;
          from_metadata_ = true;
        }
      }
      if (!line.version.empty()) {
        if (log_->version.empty()) log_->version = std::string(line.version);
        if (!KnownVersion(line.version)) {
          log_->skipped[absl::StrCat("unknown format version '",
                                     AbslView(line.version),
                                     "' (read as v5)")]++;
        }
      }
      if (line.dump_ts >= 0) {
        if (log_->dump_timestamps_us.empty() ||
            log_->dump_timestamps_us.back() != line.dump_ts) {
          log_->dump_timestamps_us.push_back(line.dump_ts);
        }
        log_->last_dump_timestamp_us = line.dump_ts;
      }
    }
    for (std::string_view key : line.unknown) {
      log_->skipped[absl::StrCat("unknown field '", AbslView(key), "'")]++;
    }
    for (std::string_view key : line.wrong_type) {
      log_->skipped[absl::StrCat("field '", AbslView(key),
                                 "' of the wrong type")]++;
    }

    if (line.kind == Line::kDumpStats) {
      ++log_->dump_markers;
      if (remaining_coll_ + remaining_p2p_ > 0) {
        log_->skipped["records announced by a dump marker, missing"] +=
            remaining_coll_ + remaining_p2p_;
      }
      context_ = line.has_header ? CommOf(line) : -1;
      if (context_ < 0) {
        remaining_coll_ = remaining_p2p_ = 0;
        Skip("dump_stats without a header");
        return;
      }
      remaining_coll_ = std::max<int64_t>(line.coll_records, 0);
      announced_coll_ = remaining_coll_;
      remaining_p2p_ = std::max<int64_t>(line.p2p_records, 0);
      InspectorComm& c = log_->comms[context_];
      c.coll_dropped_total =
          std::max(c.coll_dropped_total, line.coll_dropped_total);
      c.coll_dropped_since_sum += line.coll_dropped_since;
      c.p2p_dropped_total =
          std::max(c.p2p_dropped_total, line.p2p_dropped_total);
      c.p2p_dropped_since_sum += line.p2p_dropped_since;
      return;
    }

    const bool p2p = line.kind == Line::kP2p;
    int comm = -1;
    int64_t dump_pos = -1;
    if (line.has_header) {
      comm = CommOf(line);
      // v4.1/v4.2: a marker before self-contained records counts them too.
      int64_t& remaining = p2p ? remaining_p2p_ : remaining_coll_;
      if (comm == context_ && remaining > 0) {
        if (!p2p) dump_pos = announced_coll_ - remaining;
        --remaining;
      }
    } else if (context_ >= 0) {
      // v4.3 and later: the marker before it holds the context.
      comm = context_;
      int64_t& remaining = p2p ? remaining_p2p_ : remaining_coll_;
      if (remaining > 0) {
        if (!p2p) dump_pos = announced_coll_ - remaining;
        --remaining;
      } else {
        log_->skipped["records beyond their dump marker's count"]++;
      }
    }
    if (comm < 0) {
      Skip("record without a header or a dump marker before it");
      return;
    }
    const char* what = p2p ? "p2p_perf" : "coll_perf";
    if (line.op_name.empty()) {
      Skip(absl::StrCat(what, " without its operation name"));
      return;
    }
    if (line.sn < 0) {
      Skip(absl::StrCat(what, " without a sequence number"));
      return;
    }
    // Microseconds become nanoseconds, and a job's exec times are added
    // up (docs/semantics.md#exec-time-only-waits): beyond these bounds
    // (about 146 years; a day) no arithmetic on them could be trusted.
    if (line.exec_us > kMaxExecUs) {
      Skip(absl::StrCat(what, " with an exec time over a day"));
      return;
    }
    if (line.kernel_start > kMaxTimestampUs ||
        line.kernel_stop > kMaxTimestampUs) {
      Skip("kernel timestamp out of the accepted time range");
      return;
    }
    if (line.exec_us < 0) {
      Skip(absl::StrCat(what, " without an exec time"));
      return;
    }
    InspectorOp op;
    op.comm = static_cast<uint32_t>(comm);
    op.name = NameIndex(line.op_name);
    op.p2p = p2p;
    op.peer = line.peer >= 0 && line.peer <= INT32_MAX
                  ? static_cast<int32_t>(line.peer)
                  : -1;
    op.sn = line.sn;
    op.msg_bytes = line.msg_bytes;
    op.exec_us = line.exec_us;
    op.algobw_gbs = line.algobw;
    op.busbw_gbs = line.busbw;
    if (line.kernel_start > 0 && line.kernel_stop >= line.kernel_start) {
      op.kernel_start_us = line.kernel_start;
      op.kernel_stop_us = line.kernel_stop;
      ++log_->verbose_records;
    } else if (line.kernel_start > 0 || line.kernel_stop > 0) {
      log_->skipped
          ["kernel timestamps incomplete or reversed (exec time "
           "kept)"]++;
    }
    if (!line.timing_source.empty()) {
      op.timing_source = static_cast<int32_t>(NameIndex(line.timing_source));
    }
    op.dump_us = log_->last_dump_timestamp_us;
    op.dump_marker =
        static_cast<int32_t>(std::min<int64_t>(log_->dump_markers, INT32_MAX));
    if (dump_pos >= 0 && announced_coll_ <= INT32_MAX) {
      op.dump_pos = static_cast<int32_t>(dump_pos);
      op.dump_size = static_cast<int32_t>(announced_coll_);
    }
    if (p2p) {
      ++log_->p2p_records;
    } else {
      ++log_->coll_records;
    }
    log_->ops.push_back(op);
  }

  InspectorLog* log_;
  od::parser parser_;
  bool from_metadata_ = false;
  int context_ = -1;
  int64_t remaining_coll_ = 0;
  int64_t announced_coll_ = 0;
  int64_t remaining_p2p_ = 0;
  absl::flat_hash_map<std::string, uint32_t> comms_;
  absl::flat_hash_map<std::string, uint32_t> names_;
};

// Feeds complete lines of buf[0, len) (readable up to capacity) to the
// parser; returns the bytes consumed. At the end of the data (final) the
// rest is a last line without its newline.
size_t FeedLines(LogParser& parser, const char* buf, size_t len,
                 size_t capacity, bool final) {
  size_t pos = 0;
  while (pos < len) {
    const void* nl = std::memchr(buf + pos, '\n', len - pos);
    if (nl == nullptr) {
      if (!final) break;
      parser.ParseLine(buf + pos, len - pos, capacity - pos, true);
      return len;
    }
    const size_t end = static_cast<const char*>(nl) - buf;
    parser.ParseLine(buf + pos, end - pos, capacity - pos, false);
    pos = end + 1;
  }
  return pos;
}

}  // namespace

bool LooksLikeInspectorLog(absl::string_view head) {
  size_t pos = 0;
  while (pos < head.size() && (head[pos] == ' ' || head[pos] == '\t' ||
                               head[pos] == '\n' || head[pos] == '\r')) {
    ++pos;
  }
  if (pos >= head.size() || head[pos] != '{') return false;
  size_t end = head.find('\n', pos);
  absl::string_view line =
      head.substr(pos, end == absl::string_view::npos ? absl::string_view::npos
                                                      : end - pos);
  for (absl::string_view key :
       {"\"coll_perf\"", "\"p2p_perf\"", "\"dump_stats\"",
        "\"inspector_output_format_version\""}) {
    if (absl::StrContains(line, key)) return true;
  }
  return false;
}

absl::StatusOr<bool> FileLooksLikeInspectorLog(absl::string_view path) {
  absl::StatusOr<std::unique_ptr<TraceByteSource>> source =
      TraceByteSource::Open(path);
  if (!source.ok()) return source.status();
  std::string head(64 << 10, '\0');
  size_t size = 0;
  while (size < head.size()) {
    absl::StatusOr<size_t> n =
        (*source)->Read(head.data() + size, head.size() - size);
    if (!n.ok()) return n.status();
    if (*n == 0) break;
    size += *n;
  }
  head.resize(size);
  return LooksLikeInspectorLog(head);
}

InspectorLog ParseInspectorLog(absl::string_view bytes,
                               absl::string_view file_name) {
  InspectorLog log;
  HostPidFromFileName(file_name, &log.hostname, &log.pid);
  simdjson::padded_string padded(bytes.data(), bytes.size());
  LogParser parser(&log);
  FeedLines(parser, padded.data(), padded.size(),
            padded.size() + simdjson::SIMDJSON_PADDING, true);
  parser.Finish();
  return log;
}

absl::StatusOr<InspectorLog> ReadInspectorLog(absl::string_view path,
                                              int64_t max_records) {
  absl::StatusOr<std::unique_ptr<TraceByteSource>> source =
      TraceByteSource::Open(path);
  if (!source.ok()) return source.status();
  auto log = std::make_unique<InspectorLog>();
  HostPidFromFileName(path, &log->hostname, &log->pid);
  LogParser parser(log.get());
  size_t capacity = kChunkBytes;
  auto buf = std::make_unique<char[]>(capacity + simdjson::SIMDJSON_PADDING);
  size_t len = 0;
  bool skipping_long_line = false;
  while (true) {
    if (len == capacity) {
      if (capacity < kMaxLineBytes) {
        const size_t grown = capacity * 2;
        auto bigger =
            std::make_unique<char[]>(grown + simdjson::SIMDJSON_PADDING);
        std::memcpy(bigger.get(), buf.get(), len);
        buf = std::move(bigger);
        capacity = grown;
      } else {
        // One line fills the largest buffer: drop it up to its newline.
        if (!skipping_long_line) {
          ++log->lines;
          log->skipped[absl::StrCat("line over ", kMaxLineBytes >> 20,
                                    " MiB (line skipped)")]++;
        }
        skipping_long_line = true;
        len = 0;
      }
    }
    absl::StatusOr<size_t> n = (*source)->Read(buf.get() + len, capacity - len);
    if (!n.ok()) return n.status();
    const bool final = *n == 0;
    size_t start = 0;
    const size_t old = len;
    len += *n;
    if (skipping_long_line) {
      const void* nl = std::memchr(buf.get() + old, '\n', len - old);
      if (nl == nullptr) {
        len = 0;
        if (final) break;
        continue;
      }
      start = static_cast<const char*>(nl) - buf.get() + 1;
      skipping_long_line = false;
    }
    const size_t used =
        FeedLines(parser, buf.get() + start, len - start,
                  capacity + simdjson::SIMDJSON_PADDING - start, final);
    start += used;
    std::memmove(buf.get(), buf.get() + start, len - start);
    len -= start;
    // Checked per buffer: at most one buffer's records past the limit are
    // held, and the rest of the file is not read.
    if (max_records >= 0 &&
        static_cast<int64_t>(log->ops.size()) > max_records) {
      return absl::ResourceExhaustedError(
          absl::StrCat("more than ", max_records, " records"));
    }
    if (final) break;
  }
  parser.Finish();
  if (max_records >= 0 && static_cast<int64_t>(log->ops.size()) > max_records) {
    return absl::ResourceExhaustedError(
        absl::StrCat("more than ", max_records, " records"));
  }
  return std::move(*log);
}

}  // namespace bubblewatch
