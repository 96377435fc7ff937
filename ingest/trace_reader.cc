#include "ingest/trace_reader.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ingest/chrome/chrome_trace_reader.h"
#include "ingest/inspector/inspector_job.h"
#include "ingest/inspector/inspector_log.h"
#include "ingest/nsys/nsys_reader.h"
#include "ingest/timeline_reader.h"
#include "ingest/trace_io/trace_file.h"

namespace bubblewatch {
namespace {

// Decides between the two JSON shapes by looking for their top-level keys
// near the start; falls back to a full scan only when neither shows up early.
constexpr size_t kSniffBytes = 1 << 16;
constexpr absl::string_view kJsonWhitespace = " \t\r\n";

std::optional<TraceFormat> SniffJsonFormat(absl::string_view json) {
  absl::string_view head = json.substr(0, kSniffBytes);
  size_t trace_events = head.find("\"traceEvents\"");
  size_t gpu_kernels = head.find("\"gpu_kernels\"");
  if (trace_events == absl::string_view::npos &&
      gpu_kernels == absl::string_view::npos) {
    trace_events = json.find("\"traceEvents\"");
    gpu_kernels = json.find("\"gpu_kernels\"");
  }
  if (trace_events != absl::string_view::npos &&
      (gpu_kernels == absl::string_view::npos || trace_events < gpu_kernels)) {
    return TraceFormat::kChrome;
  }
  if (gpu_kernels != absl::string_view::npos) return TraceFormat::kTimeline;
  return std::nullopt;
}

// True if the file starts with the SQLite header. Reads 16 bytes, so that an
// Nsight Systems export is not loaded whole; a file that cannot be opened
// reports false and fails in TraceByteSource::Open with the proper error.
bool FileHasSqliteMagic(absl::string_view path) {
  absl::StatusOr<FILE*> opened = OpenRegularFile(path);
  if (!opened.ok()) return false;
  FILE* f = *opened;
  char head[16];
  size_t n = std::fread(head, 1, sizeof(head), f);
  std::fclose(f);
  return HasSqliteMagic(absl::string_view(head, n));
}

// The limit on events for readers that cannot stop early (their memory is
// bounded by the bytes they read).
absl::StatusOr<Trace> WithinEvents(absl::StatusOr<Trace> trace,
                                   uint64_t max_events) {
  if (trace.ok() && max_events > 0 &&
      trace->gpu.size() + trace->cpu.size() > max_events) {
    return absl::ResourceExhaustedError(
        absl::StrCat("over the limit of ", max_events, " events (",
                     trace->gpu.size() + trace->cpu.size(), ")"));
  }
  return trace;
}

}  // namespace

absl::string_view TraceFormatName(TraceFormat format) {
  switch (format) {
    case TraceFormat::kAuto:
      return "auto";
    case TraceFormat::kTimeline:
      return "timeline";
    case TraceFormat::kChrome:
      return "chrome";
    case TraceFormat::kNsys:
      return "nsys";
    case TraceFormat::kInspector:
      return "inspector";
  }
  return "unknown";
}

std::optional<TraceFormat> ParseTraceFormat(absl::string_view name) {
  for (TraceFormat f :
       {TraceFormat::kAuto, TraceFormat::kTimeline, TraceFormat::kChrome,
        TraceFormat::kNsys, TraceFormat::kInspector}) {
    if (TraceFormatName(f) == name) return f;
  }
  return std::nullopt;
}

// Every reader's output passes here, the one entrance that analyze, diff,
// produce and the watcher share: a time no later stage could do arithmetic
// on makes a malformed file, and names that are not printable UTF-8 are
// escaped before they reach a report, a log line or a message.
static absl::StatusOr<Trace> Admitted(absl::StatusOr<Trace> trace) {
  if (trace.ok()) {
    if (absl::Status s = CheckEventTimes(*trace); !s.ok()) return s;
    EscapeUnprintableNames(&*trace);
  }
  return trace;
}

absl::StatusOr<Trace> ReadTraceFile(absl::string_view path,
                                    const TraceReadOptions& options) {
  TraceFormat format = options.format;
  if (format == TraceFormat::kNsys ||
      (format == TraceFormat::kAuto && FileHasSqliteMagic(path))) {
    // SQLite is not compressed: its size on disk is what it holds.
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(std::string(path), ec);
    if (!ec && options.max_bytes > 0 && size > options.max_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "over the limit of ", options.max_bytes, " bytes (", size, ")"));
    }
    absl::StatusOr<Trace> trace = ReadNsysExport(path);
    if (trace.ok()) {
      trace->source_format = std::string(TraceFormatName(TraceFormat::kNsys));
    }
    return Admitted(WithinEvents(std::move(trace), options.max_events));
  }
  // The first 64 KiB (uncompressed) after any leading whitespace decide the
  // format; a Chrome trace then streams through the reader, everything else
  // is read whole. Leading whitespace is valid JSON and is skipped as it
  // streams by, so a file that is mostly blanks (2 GiB of them in
  // a 2 MB .json.gz) never sits in memory.
  ASSIGN_OR_RETURN(std::unique_ptr<TraceByteSource> source,
                   TraceByteSource::Open(path));
  if (options.max_bytes > 0) source->set_max_bytes(options.max_bytes);
  std::string head(kSniffBytes, '\0');
  size_t head_size = 0;
  uint64_t blanks_skipped = 0;
  bool content_seen = false;
  while (head_size < head.size()) {
    ASSIGN_OR_RETURN(size_t n, source->Read(head.data() + head_size,
                                            head.size() - head_size));
    if (n == 0) break;
    head_size += n;
    if (content_seen) continue;
    const size_t first = absl::string_view(head.data(), head_size)
                             .find_first_not_of(kJsonWhitespace);
    content_seen = first != absl::string_view::npos;
    const size_t blanks = content_seen ? first : head_size;
    std::memmove(head.data(), head.data() + blanks, head_size - blanks);
    head_size -= blanks;
    blanks_skipped += blanks;
  }
  head.resize(head_size);
  if (head.empty() && blanks_skipped > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a JSON trace: only whitespace (", blanks_skipped,
                     " bytes", source->compressed() ? " gunzipped" : "", ")"));
  }
  if (format == TraceFormat::kAuto) {
    // A gzip-compressed SQLite file: not something nsys writes.
    if (HasSqliteMagic(head)) {
      return absl::InvalidArgumentError(
          "a compressed SQLite file: gunzip the Nsight Systems export first");
    }
    if (LooksLikeInspectorLog(head)) {
      format = TraceFormat::kInspector;
    } else if (SniffJsonFormat(head) == TraceFormat::kChrome) {
      format = TraceFormat::kChrome;
    }
  }
  // JSON text never holds a NUL byte: a file that does in its first 64 KiB
  // (a sparse file, a binary) is refused now, not after reading it whole
  // (11 s and 4.2 GB for a 2 GB sparse file).
  if (size_t nul = head.find('\0'); nul != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a JSON trace: a NUL byte at offset ", blanks_skipped + nul,
        source->compressed() ? " of the gunzipped data" : ""));
  }
  if (format == TraceFormat::kChrome) {
    absl::StatusOr<Trace> trace =
        ReadChromeTrace(*source, head, options.progress, options.parse_threads,
                        options.max_events);
    if (trace.ok()) trace->source_format = std::string(TraceFormatName(format));
    return Admitted(std::move(trace));
  }
  ASSIGN_OR_RETURN(simdjson::padded_string bytes, ReadRest(*source, head));
  source.reset();
  absl::string_view view(bytes.data(), bytes.size());
  if (format == TraceFormat::kInspector) {
    std::vector<InspectorLog> logs;
    logs.push_back(ParseInspectorLog(view, path));
    SkipCounts skipped = logs[0].skipped;
    absl::StatusOr<InspectorJob> job =
        BuildInspectorJob(std::move(logs), {std::string(path)});
    if (!job.ok()) return job.status();
    Trace trace = std::move(job->traces[0]);
    // One log does not know the other members' job ranks.
    for (CollectiveKernel& c : trace.collectives) c.group_ranks = kNoName;
    for (const auto& [reason, n] : skipped) trace.skipped[reason] += n;
    for (const auto& [reason, n] : job->skipped) trace.skipped[reason] += n;
    return Admitted(WithinEvents(std::move(trace), options.max_events));
  }
  if (format == TraceFormat::kAuto) {
    std::optional<TraceFormat> sniffed = SniffJsonFormat(view);
    if (!sniffed) {
      return absl::InvalidArgumentError(
          "unknown format: not an Nsight Systems SQLite export, and no "
          "\"traceEvents\" (Chrome trace) or \"gpu_kernels\" (timeline) key "
          "found, and no NCCL Inspector record; pass --format to force one");
    }
    format = *sniffed;
  }
  absl::StatusOr<Trace> trace;
  switch (format) {
    case TraceFormat::kTimeline:
      trace = ReadTimelineJson(bytes);
      break;
    case TraceFormat::kChrome:
      trace = ReadChromeTrace(bytes, options.progress, options.parse_threads,
                              options.max_events);
      break;
    default:
      return absl::InternalError("unreachable trace format");
  }
  if (trace.ok()) trace->source_format = std::string(TraceFormatName(format));
  return Admitted(WithinEvents(std::move(trace), options.max_events));
}

}  // namespace bubblewatch
