#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "analysis/bubble_analyzer.h"
#include "analysis/collectives.h"
#include "analysis/diagnosis.h"
#include "base/json_writer.h"
#include "cli/analysis_report.h"
#include "cli/collectives_report.h"
#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/diagnosis_report.h"
#include "cli/exit_codes.h"
#include "cli/inspector_report.h"
#include "cli/timeline_export.h"
#include "ingest/inspector/inspector_log.h"
#include "ingest/trace_reader.h"
#include "schemas/trace.h"

namespace bubblewatch {
namespace {

int Fail(int code, absl::string_view message) {
  std::cerr << "bubblewatch analyze: " << message << "\n";
  return code;
}

// The files named on the command line, a directory standing for the
// regular, non-hidden files in it, by name.
absl::StatusOr<std::vector<std::string>> ExpandInputs(
    const std::vector<std::string>& args) {
  std::vector<std::string> paths;
  for (const std::string& arg : args) {
    std::error_code ec;
    if (!std::filesystem::is_directory(arg, ec)) {
      paths.push_back(arg);
      continue;
    }
    std::vector<std::string> inside;
    for (const auto& entry : std::filesystem::directory_iterator(arg, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.empty() || name[0] == '.') continue;
      std::error_code type_ec;
      if (entry.is_regular_file(type_ec)) inside.push_back(entry.path());
    }
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat(arg, ": cannot list the directory: ", ec.message()));
    }
    if (inside.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(arg, ": the directory holds no trace file"));
    }
    std::sort(inside.begin(), inside.end());
    paths.insert(paths.end(), inside.begin(), inside.end());
  }
  return paths;
}

// "0-3,8" as a set of ranks; nullopt when malformed.
std::optional<absl::flat_hash_set<int32_t>> ParseRankList(
    absl::string_view text) {
  absl::flat_hash_set<int32_t> ranks;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    std::pair<absl::string_view, absl::string_view> range =
        absl::StrSplit(item, absl::MaxSplits('-', 1));
    int32_t lo = 0;
    int32_t hi = 0;
    if (!absl::SimpleAtoi(range.first, &lo) || lo < 0) return std::nullopt;
    hi = lo;
    if (!range.second.empty() &&
        (!absl::SimpleAtoi(range.second, &hi) || hi < lo || hi - lo > 65535)) {
      return std::nullopt;
    }
    if (item.find('-') != absl::string_view::npos && range.second.empty()) {
      return std::nullopt;
    }
    for (int32_t r = lo; r <= hi; ++r) ranks.insert(r);
  }
  return ranks;
}

}  // namespace

int RunAnalyzeCommand(int argc, char** argv) {
  std::string format = "auto";
  bool json = false;
  bool pretty = false;
  bool no_color = false;
  int top = 10;
  int rank = -1;
  int device = -1;
  int threads = kChromeParseThreadsAuto;
  absl::Duration window = absl::ZeroDuration();
  int64_t max_windows = AnalyzerOptions{}.max_windows;
  int64_t max_inspector_records = kDefaultInspectorMaxRecords;
  std::string timeline;
  std::string timeline_ranks;
  absl::Duration timeline_from = absl::ZeroDuration();
  absl::Duration timeline_to = absl::ZeroDuration();
  CommandLine cl(
      "bubblewatch analyze [options] FILE|DIR...",
      "Finds the GPU bubbles (idle gaps between kernels) in one trace file and "
      "attributes every idle\nmicrosecond to a cause: host_sync, "
      "launch_overhead, allocator, memcpy, data_loading,\nhost_compute, "
      "gpu_dependency or unattributed. Reads the seed timeline JSON, "
      "PyTorch-profiler\n(Kineto) Chrome traces (.json, .json.gz), Nsight "
      "Systems SQLite exports and NCCL Inspector\nlogs.\n\nGiven the files (or "
      "a directory) of one "
      "job's ranks, it also matches their NCCL\ncollectives, splits "
      "collective time into waiting and transfer, and names the rank that\n"
      "the others waited for, with the cause (docs/semantics.md#collectives)."
      "\n\nExit codes: 0 ok, 2 usage error, 3 "
      "unreadable or malformed input.");
  cl.AddString("format", &format, "auto|timeline|chrome|nsys|inspector",
               "input format; auto decides by content");
  cl.AddBool("json", &json,
             "print the machine-readable JSON report instead of text");
  cl.AddBool("pretty", &pretty, "indent the JSON report");
  cl.AddInt("top", &top, "N", "how many of the longest bubbles to list");
  cl.AddDuration("window", &window, "DURATION",
                 "also split the analysis into event-time windows of this "
                 "length (e.g. 10s); 0 = off");
  cl.AddInt64("max-windows", &max_windows, "N",
              "with --window, refuse a trace whose kernels span more than N "
              "windows (a far-off timestamp); 0 = no cap");
  cl.AddInt64("max-inspector-records", &max_inspector_records, "N",
              "Inspector logs: refuse a job whose logs hold more than N "
              "records together (the analysis keeps each in memory, about "
              "0.6 KB); 0 = no cap");
  cl.AddInt("rank", &rank, "R",
            "only accept a trace of this distributed rank (-1 = any)");
  cl.AddInt("device", &device, "D", "only analyze GPU device D (-1 = all)");
  cl.AddBool("no-color", &no_color, "no ANSI colors in the text report");
  cl.AddString("timeline", &timeline, "OUT.json[.gz]",
               "also write the job's ranks on one clock, with the bubbles, "
               "waits, roots and what-if, as one Chrome/Perfetto trace "
               "(docs/analyze.md#timeline-export)");
  cl.AddString("ranks", &timeline_ranks, "LIST",
               "with --timeline, only these ranks (e.g. 0-3,8)");
  cl.AddDuration("from", &timeline_from, "DURATION",
                 "with --timeline, only events after this much of the job "
                 "(from its first event, on the job's clock)");
  cl.AddDuration("to", &timeline_to, "DURATION",
                 "with --timeline, only events before this much of the job; "
                 "0 = to the end");
  cl.AddInt("threads", &threads, "N",
            "threads parsing a Chrome trace beside the main one (-1 = one "
            "less than the cores, at most 3; 0 = the main thread only); the "
            "report does not depend on it");

  std::vector<std::string> files;
  if (std::optional<int> exit = cl.ParseOrExit(argc, argv, &files)) {
    return *exit;
  }
  if (files.empty()) {
    std::cerr << "bubblewatch analyze: expected a FILE (or the files or a "
                 "directory of one job's ranks)\nTry 'bubblewatch analyze "
                 "--help'.\n";
    return kExitUsage;
  }
  std::optional<TraceFormat> parsed_format = ParseTraceFormat(format);
  if (!parsed_format) {
    return Fail(
        kExitUsage,
        absl::StrCat("unknown --format '", format,
                     "' (want auto, timeline, chrome, nsys or inspector)"));
  }
  if (threads < -1) return Fail(kExitUsage, "--threads must be >= -1");
  if (max_inspector_records < 0) {
    return Fail(kExitUsage, "--max-inspector-records must be >= 0");
  }
  AnalyzerOptions options;
  options.top_bubbles = top;
  options.window_ns = absl::ToInt64Nanoseconds(window);
  options.max_windows = max_windows;
  if (absl::Status s = options.Validate(); !s.ok()) {
    return Fail(kExitUsage,
                InFlagTerms(s.message(), {{"top_bubbles", "--top"},
                                          {"window_ns", "--window"},
                                          {"max_windows", "--max-windows"}}));
  }
  TimelineExportOptions export_options;
  if (timeline.empty() &&
      (!timeline_ranks.empty() || timeline_from != absl::ZeroDuration() ||
       timeline_to != absl::ZeroDuration())) {
    return Fail(kExitUsage, "--ranks, --from and --to need --timeline");
  }
  if (!timeline_ranks.empty()) {
    std::optional<absl::flat_hash_set<int32_t>> r =
        ParseRankList(timeline_ranks);
    if (!r) {
      return Fail(kExitUsage,
                  absl::StrCat("--ranks '", timeline_ranks,
                               "' is not a list of ranks like 0-3,8"));
    }
    export_options.ranks = *std::move(r);
  }
  if (timeline_from < absl::ZeroDuration() ||
      timeline_to < absl::ZeroDuration()) {
    return Fail(kExitUsage, "--from and --to must not be negative");
  }
  export_options.from_ns = absl::ToInt64Nanoseconds(timeline_from);
  if (timeline_to != absl::ZeroDuration()) {
    export_options.to_ns = absl::ToInt64Nanoseconds(timeline_to);
    if (export_options.to_ns <= export_options.from_ns) {
      return Fail(kExitUsage, "--to must be after --from");
    }
  }
  absl::StatusOr<std::vector<std::string>> paths = ExpandInputs(files);
  if (!paths.ok()) return Fail(kExitBadInput, paths.status().message());
  if (paths->size() > 1 && rank >= 0) {
    return Fail(kExitUsage,
                "--rank picks one trace; with several files every rank is "
                "analyzed");
  }

  const bool color =
      !no_color && isatty(STDOUT_FILENO) && std::getenv("NO_COLOR") == nullptr;

  // NCCL Inspector logs (by content, or --format inspector): one job's
  // processes, analyzed together (docs/analyze.md#inspector-logs).
  bool inspector = *parsed_format == TraceFormat::kInspector;
  if (*parsed_format == TraceFormat::kAuto) {
    std::string first_inspector;
    std::string first_other;
    for (const std::string& path : *paths) {
      absl::StatusOr<bool> is = FileLooksLikeInspectorLog(path);
      if (!is.ok()) {
        return Fail(kExitBadInput,
                    absl::StrCat(path, ": ", is.status().message()));
      }
      std::string& slot = *is ? first_inspector : first_other;
      if (slot.empty()) slot = path;
    }
    if (!first_inspector.empty() && !first_other.empty()) {
      return Fail(kExitBadInput,
                  absl::StrCat(first_other,
                               ": not an NCCL Inspector log, "
                               "while ",
                               first_inspector,
                               " is: give one job's Inspector logs or its "
                               "traces, not both"));
    }
    inspector = !first_inspector.empty();
  }
  if (inspector) {
    if (rank >= 0 || device >= 0 || options.window_ns > 0 ||
        !timeline.empty()) {
      return Fail(kExitUsage,
                  "--rank, --device, --window and --timeline do not apply to "
                  "Inspector logs");
    }
    InspectorReportOptions inspector_options;
    inspector_options.json = json;
    inspector_options.pretty = pretty;
    inspector_options.color = color;
    inspector_options.analyzer = options;
    inspector_options.max_records =
        max_inspector_records == 0 ? -1 : max_inspector_records;
    absl::StatusOr<std::string> report =
        AnalyzeInspectorLogs(*paths, inspector_options);
    if (!report.ok()) return Fail(kExitBadInput, report.status().message());
    std::fwrite(report->data(), 1, report->size(), stdout);
    if (std::fflush(stdout) != 0) {
      return Fail(kExitFailure, "cannot write the report to stdout");
    }
    return kExitOk;
  }

  TraceReadOptions read_options;
  read_options.format = *parsed_format;
  read_options.parse_threads = threads;
  // A progress bar for big inputs, only for a person watching stderr.
  constexpr uint64_t kProgressMinBytes = uint64_t{64} << 20;
  bool progress_shown = false;
  std::string reading;
  if (isatty(STDERR_FILENO)) {
    read_options.progress = [&](uint64_t done, uint64_t total) {
      if (total < kProgressMinBytes) return;
      int percent = static_cast<int>(100.0 * done / total);
      std::string bar(percent / 4, '#');
      bar.resize(25, '.');
      std::fprintf(stderr, "\rreading %s [%s] %3d%% (%llu/%llu MB)",
                   reading.c_str(), bar.c_str(), percent,
                   static_cast<unsigned long long>(done >> 20),
                   static_cast<unsigned long long>(total >> 20));
      progress_shown = true;
    };
  }
  std::vector<Trace> traces;
  traces.reserve(paths->size());
  // The paths, one per trace (a timeline export is one per rank).
  std::vector<std::string> timeline_paths;
  for (const std::string& path : *paths) {
    reading = path;
    absl::StatusOr<Trace> trace = ReadTraceFile(path, read_options);
    if (progress_shown) std::fputs("\r\033[K", stderr);
    progress_shown = false;
    if (!trace.ok()) {
      return Fail(kExitBadInput,
                  absl::StrCat(path, ": ", trace.status().message()));
    }
    if (rank >= 0 && trace->rank >= 0 && trace->rank != rank) {
      return Fail(kExitBadInput,
                  absl::StrCat(path, ": holds rank ", trace->rank,
                               ", not rank ", rank));
    }
    std::vector<Trace> read;
    if (trace->source_format == "chrome" && IsTimelineExport(path)) {
      // A job timeline of bubblewatch's: its ranks, one trace each.
      read = SplitTimelineExport(*std::move(trace), TimelineExportGroups(path));
    } else {
      read.push_back(*std::move(trace));
    }
    for (Trace& t : read) {
      if (device >= 0) {
        std::erase_if(t.gpu,
                      [&](const GpuActivity& a) { return a.device != device; });
        std::erase_if(t.collectives, [&](const CollectiveKernel& c) {
          return c.device != device;
        });
      }
      timeline_paths.push_back(path);
      traces.push_back(std::move(t));
    }
  }
  *paths = std::move(timeline_paths);

  // Several ranks: several files, or one trace whose collectives run on
  // several devices (an Nsight Systems export of a node).
  bool several_ranks = traces.size() > 1;
  if (traces.size() == 1) {
    absl::flat_hash_set<int32_t> devices;
    for (const CollectiveKernel& c : traces[0].collectives) {
      devices.insert(c.device);
    }
    several_ranks = devices.size() > 1;
  }
  std::optional<CollectiveAnalysis> collectives;
  std::vector<Analysis> analyses;
  if (several_ranks) {
    std::vector<RankInput> ranks = RanksOfTraces(traces, *paths);
    CollectiveOptions collective_options;
    // The timeline draws every instance's wait and transfer.
    collective_options.keep_instances = !timeline.empty();
    absl::StatusOr<CollectiveAnalysis> c =
        AnalyzeCollectives(ranks, collective_options, options);
    if (!c.ok()) return Fail(kExitBadInput, c.status().message());
    collectives = *std::move(c);
    // In input order (each trace is analyzed once, inside).
    for (const Trace& t : traces) {
      auto it =
          std::find(collectives->traces.begin(), collectives->traces.end(), &t);
      analyses.push_back(
          std::move(collectives->analyses[it - collectives->traces.begin()]));
    }
  } else {
    absl::StatusOr<Analysis> analysis = AnalyzeTrace(traces[0], options);
    if (!analysis.ok()) {
      return Fail(kExitBadInput,
                  absl::StrCat((*paths)[0], ": ", analysis.status().message()));
    }
    analyses.push_back(*std::move(analysis));
  }

  // One report per trace; with several files they sit in one job report.
  std::vector<std::string> reports;
  for (size_t i = 0; i < traces.size(); ++i) {
    const std::string& path = (*paths)[i];
    absl::StatusOr<Diagnosis> diagnosis = DiagnoseTrace(traces[i], analyses[i]);
    if (!diagnosis.ok()) {
      return Fail(kExitBadInput,
                  absl::StrCat(path, ": ", diagnosis.status().message()));
    }
    // Name the format actually read, not "auto".
    std::string format_name(TraceFormatName(*parsed_format));
    if (*parsed_format == TraceFormat::kAuto) {
      format_name = traces[i].source_format;
    }
    InputSummary input = SummarizeInput(traces[i], path, format_name);
    const CollectiveAnalysis* inline_collectives =
        traces.size() == 1 && collectives ? &*collectives : nullptr;
    if (json) {
      reports.push_back(RenderAnalysisJson(analyses[i], input, pretty,
                                           &*diagnosis, inline_collectives));
      continue;
    }
    std::string report = RenderAnalysisText(analyses[i], input, color);
    if (analyses[i].kernels > 0) {
      report += RenderDiagnosisText(*diagnosis, color);
    }
    if (traces.size() == 1) {
      report += inline_collectives != nullptr
                    ? RenderCollectivesText(*inline_collectives, color)
                    : RenderSingleRankCollectivesText(traces[0], analyses[0]);
    }
    reports.push_back(std::move(report));
  }

  std::string out;
  if (traces.size() == 1) {
    out = std::move(reports[0]);
  } else if (json) {
    JsonWriter w(pretty ? 2 : 0);
    w.BeginObject();
    w.Key("job");
    if (traces[0].job.empty()) {
      w.Null();
    } else {
      w.String(traces[0].job);
    }
    w.Key("files").BeginArray();
    for (std::string& r : reports) {
      while (!r.empty() && r.back() == '\n') r.pop_back();
      w.Raw(r);
    }
    w.EndArray();
    WriteCollectivesJson(w, *collectives);
    w.EndObject();
    out = std::move(w).Take();
    out.push_back('\n');
  } else {
    // The job first; each rank's own report after it.
    out = absl::StrCat("bubblewatch analyze  ", traces.size(), " files",
                       traces[0].job.empty()
                           ? std::string()
                           : absl::StrCat(", job ", traces[0].job),
                       "\n");
    out += RenderCollectivesText(*collectives, color);
    for (const std::string& r : reports) absl::StrAppend(&out, "\n", r);
  }
  if (!timeline.empty()) {
    export_options.analyzer = options;
    absl::StatusOr<TimelineExportStats> written = WriteTimelineExport(
        traces, *paths, collectives ? &*collectives : nullptr, export_options,
        timeline);
    if (!written.ok()) {
      return Fail(written.status().code() == absl::StatusCode::kInvalidArgument
                      ? kExitUsage
                      : kExitFailure,
                  absl::StrCat("--timeline ", timeline, ": ",
                               written.status().message()));
    }
    std::cerr << "bubblewatch analyze: wrote " << timeline << ": "
              << written->ranks << " ranks, " << written->events << " events ("
              << written->bubbles << " bubbles, " << written->collective_slices
              << " collective slices, " << written->flows << " flows), "
              << written->bytes << " bytes of JSON\n";
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (std::fflush(stdout) != 0) {
    return Fail(kExitFailure, "cannot write the report to stdout");
  }
  return kExitOk;
}

}  // namespace bubblewatch
