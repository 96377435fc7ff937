// `bubblewatch diff BEFORE AFTER`: compares two traces and, with --fail-if
// conditions, acts as a CI gate (diff/diff_condition.h has the grammar).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "diff/diff_condition.h"
#include "diff/diff_report.h"
#include "diff/diff_side.h"
#include "ingest/trace_reader.h"

namespace bubblewatch {
namespace {

int Fail(int code, absl::string_view message) {
  std::cerr << "bubblewatch diff: " << message << "\n";
  return code;
}

int Usage(absl::string_view message) {
  std::cerr << "bubblewatch diff: " << message
            << "\nTry 'bubblewatch diff --help'.\n";
  return kExitUsage;
}

}  // namespace

int RunDiffCommand(int argc, char** argv) {
  std::string format = "auto";
  bool json = false;
  bool pretty = false;
  bool no_color = false;
  int top = 5;
  std::vector<std::string> fail_if;
  CommandLine cl(
      "bubblewatch diff [options] BEFORE AFTER",
      "Compares two traces side by side: utilization, bubble time per cause "
      "(absolute, and per step\nor per second), the largest bubbles, launch "
      "lead time, top kernels and the CPU/GPU-bound\nverdict. With --fail-if "
      "it is a CI gate: each condition describes a regression, e.g.\n"
      "  --fail-if 'utilization_drop>2%'         utilization fell by more than "
      "2 points\n"
      "  --fail-if 'cause:host_sync>+5ms/step'   host-sync bubbles grew by "
      "more "
      "than 5 ms per step\n"
      "  --fail-if 'bubble_ratio>+0.05'          bubble ratio rose by more "
      "than 0.05\n"
      "  --fail-if 'lead_p50<-20us'              the CPU is 20 us less far "
      "ahead\n"
      "Metrics: utilization, bubble_ratio, span, compute, bubble, "
      "largest_bubble, lead_p50, lead_p90,\ncomm_exposed, cause:<cause>, "
      "kernel:<substring>, each optionally with _drop or _rise.\nValues: an "
      "unsigned value compares AFTER's figure, a signed one (+/-) the change; "
      "units %,\nns, us, ms, s; /step or /s normalize totals. See docs/diff.md "
      "(bubblewatch diff).\n\nExit codes: 0 no condition holds, 1 a condition "
      "holds (regression), 2 usage error\n(including a bad condition or one "
      "the traces cannot answer), 3 unreadable input.");
  cl.AddString("format", &format, "auto|timeline|chrome|nsys",
               "format of both inputs; auto decides by content");
  cl.AddList("fail-if", &fail_if, "CONDITION",
             "exit 1 if CONDITION holds (repeatable)");
  cl.AddBool("json", &json, "print a machine-readable JSON object");
  cl.AddBool("pretty", &pretty, "indent the JSON");
  cl.AddInt("top", &top, "N", "how many bubbles and kernels to list");
  cl.AddBool("no-color", &no_color, "no ANSI colors in the text report");

  std::vector<std::string> files;
  if (absl::Status s = cl.Parse(argc, argv, &files); !s.ok()) {
    return Usage(s.message());
  }
  if (cl.help_requested()) {
    std::cout << cl.Help();
    return kExitOk;
  }
  if (files.size() != 2) {
    return Usage(absl::StrCat("expected BEFORE and AFTER, got ", files.size(),
                              " file(s)"));
  }
  std::optional<TraceFormat> parsed_format = ParseTraceFormat(format);
  if (!parsed_format) {
    return Usage(absl::StrCat("unknown --format '", format,
                              "' (want auto, timeline, chrome or nsys)"));
  }
  if (top < 0) return Usage("--top must be >= 0");
  // Conditions are checked before the (possibly slow) reads, so a typo in a
  // CI script fails fast.
  std::vector<FailCondition> conditions;
  for (const std::string& text : fail_if) {
    absl::StatusOr<FailCondition> c = ParseFailCondition(text);
    if (!c.ok()) return Usage(c.status().message());
    conditions.push_back(*std::move(c));
  }

  std::vector<DiffSide> sides;
  for (const std::string& path : files) {
    absl::StatusOr<DiffSide> side =
        LoadDiffSide(path, *parsed_format, top, top);
    if (!side.ok()) {
      return Fail(kExitBadInput,
                  absl::StrCat(path, ": ", side.status().message()));
    }
    sides.push_back(*std::move(side));
  }
  const DiffSide& before = sides[0];
  const DiffSide& after = sides[1];

  std::vector<EvaluatedCondition> evaluated;
  for (const FailCondition& c : conditions) {
    absl::StatusOr<ConditionOutcome> outcome =
        EvaluateFailCondition(c, before, after);
    if (!outcome.ok()) {
      return Usage(
          absl::StrCat("condition '", c.text,
                       "' cannot be evaluated: ", outcome.status().message()));
    }
    evaluated.push_back({c, *std::move(outcome)});
  }

  const bool color =
      !no_color && isatty(STDOUT_FILENO) && std::getenv("NO_COLOR") == nullptr;
  std::string report =
      json ? RenderDiffJson(before, after, evaluated, top, pretty)
           : RenderDiffText(before, after, evaluated, top, color);
  std::fwrite(report.data(), 1, report.size(), stdout);
  if (std::fflush(stdout) != 0) {
    return Fail(kExitFailure, "cannot write the report to stdout");
  }
  int failed = 0;
  for (const EvaluatedCondition& e : evaluated) {
    if (!e.outcome.failed) continue;
    ++failed;
    // Also on stderr, so a CI log shows why even when stdout is JSON.
    std::cerr << "bubblewatch diff: FAIL " << e.condition.text << ": "
              << e.outcome.summary << "\n";
  }
  return failed > 0 ? kExitFailure : kExitOk;
}

}  // namespace bubblewatch
