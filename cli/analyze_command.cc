#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "analysis/bubble_analyzer.h"
#include "analysis/diagnosis.h"
#include "cli/analysis_report.h"
#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/diagnosis_report.h"
#include "cli/exit_codes.h"
#include "ingest/trace_reader.h"
#include "schemas/trace.h"

namespace bubblewatch {
namespace {

int Fail(int code, absl::string_view message) {
  std::cerr << "bubblewatch analyze: " << message << "\n";
  return code;
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
  CommandLine cl(
      "bubblewatch analyze [options] FILE",
      "Finds the GPU bubbles (idle gaps between kernels) in one trace file and "
      "attributes every idle\nmicrosecond to a cause: host_sync, "
      "launch_overhead, allocator, memcpy, data_loading,\nhost_compute, "
      "gpu_dependency or unattributed. Reads the seed timeline JSON, "
      "PyTorch-profiler\n(Kineto) Chrome traces (.json, .json.gz) and Nsight "
      "Systems SQLite exports.\n\nExit codes: 0 ok, 2 usage error, 3 "
      "unreadable or malformed input.");
  cl.AddString("format", &format, "auto|timeline|chrome|nsys",
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
  cl.AddInt("rank", &rank, "R",
            "only accept a trace of this distributed rank (-1 = any)");
  cl.AddInt("device", &device, "D", "only analyze GPU device D (-1 = all)");
  cl.AddBool("no-color", &no_color, "no ANSI colors in the text report");
  cl.AddInt("threads", &threads, "N",
            "threads parsing a Chrome trace beside the main one (-1 = one "
            "less than the cores, at most 3; 0 = the main thread only); the "
            "report does not depend on it");

  std::vector<std::string> files;
  if (std::optional<int> exit = cl.ParseOrExit(argc, argv, &files)) {
    return *exit;
  }
  if (files.size() != 1) {
    std::cerr << "bubblewatch analyze: expected exactly one FILE, got "
              << files.size() << "\nTry 'bubblewatch analyze --help'.\n";
    return kExitUsage;
  }
  std::optional<TraceFormat> parsed_format = ParseTraceFormat(format);
  if (!parsed_format) {
    return Fail(kExitUsage,
                absl::StrCat("unknown --format '", format,
                             "' (want auto, timeline, chrome or nsys)"));
  }
  if (threads < -1) return Fail(kExitUsage, "--threads must be >= -1");
  AnalyzerOptions options;
  options.top_bubbles = top;
  options.window_ns = absl::ToInt64Nanoseconds(window);
  options.max_windows = max_windows;
  if (absl::Status s = options.Validate(); !s.ok()) {
    return Fail(kExitUsage, s.message());
  }
  const std::string& path = files[0];

  TraceReadOptions read_options;
  read_options.format = *parsed_format;
  read_options.parse_threads = threads;
  // A progress bar for big inputs, only for a person watching stderr.
  constexpr uint64_t kProgressMinBytes = uint64_t{64} << 20;
  bool progress_shown = false;
  if (isatty(STDERR_FILENO)) {
    read_options.progress = [&](uint64_t done, uint64_t total) {
      if (total < kProgressMinBytes) return;
      int percent = static_cast<int>(100.0 * done / total);
      std::string bar(percent / 4, '#');
      bar.resize(25, '.');
      std::fprintf(stderr, "\rreading %s [%s] %3d%% (%llu/%llu MB)",
                   path.c_str(), bar.c_str(), percent,
                   static_cast<unsigned long long>(done >> 20),
                   static_cast<unsigned long long>(total >> 20));
      progress_shown = true;
    };
  }
  absl::StatusOr<Trace> trace = ReadTraceFile(path, read_options);
  if (progress_shown) std::fputs("\r\033[K", stderr);
  if (!trace.ok()) {
    return Fail(kExitBadInput,
                absl::StrCat(path, ": ", trace.status().message()));
  }
  if (rank >= 0 && trace->rank >= 0 && trace->rank != rank) {
    return Fail(kExitBadInput, absl::StrCat(path, ": holds rank ", trace->rank,
                                            ", not rank ", rank));
  }
  if (device >= 0) {
    std::erase_if(trace->gpu,
                  [&](const GpuActivity& a) { return a.device != device; });
  }
  absl::StatusOr<Analysis> analysis = AnalyzeTrace(*trace, options);
  if (!analysis.ok()) {
    return Fail(kExitBadInput,
                absl::StrCat(path, ": ", analysis.status().message()));
  }
  absl::StatusOr<Diagnosis> diagnosis = DiagnoseTrace(*trace, *analysis);
  if (!diagnosis.ok()) {
    return Fail(kExitBadInput,
                absl::StrCat(path, ": ", diagnosis.status().message()));
  }
  // Name the format actually read, not "auto".
  std::string format_name(TraceFormatName(*parsed_format));
  if (*parsed_format == TraceFormat::kAuto) format_name = trace->source_format;
  InputSummary input = SummarizeInput(*trace, path, format_name);
  const bool color =
      !no_color && isatty(STDOUT_FILENO) && std::getenv("NO_COLOR") == nullptr;
  std::string report =
      json ? RenderAnalysisJson(*analysis, input, pretty, &*diagnosis)
           : RenderAnalysisText(*analysis, input, color);
  if (!json && analysis->kernels > 0) {
    report += RenderDiagnosisText(*diagnosis, color);
  }
  std::fwrite(report.data(), 1, report.size(), stdout);
  if (std::fflush(stdout) != 0) {
    return Fail(kExitFailure, "cannot write the report to stdout");
  }
  return kExitOk;
}

}  // namespace bubblewatch
