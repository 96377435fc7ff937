// JSON renderings of the analysis types (schemas/analysis.h) that more than
// one output shares, so that a kernel reads the same in `query --json`, the
// HTTP API and the alert events on `bubblewatch.alerts`. Each output's own
// parser reads these keys back; change them together.
#ifndef BUBBLEWATCH_SCHEMAS_ANALYSIS_JSON_H_
#define BUBBLEWATCH_SCHEMAS_ANALYSIS_JSON_H_

#include <optional>

#include "base/json_writer.h"
#include "schemas/analysis.h"

namespace bubblewatch {

// Writes one value: {"name", "start_ns", "end_ns", "stream"}, or null when
// there is no kernel (a bubble at the edge of a window).
void WriteKernelRefJson(JsonWriter& w, const std::optional<KernelRef>& kernel);

// Writes one value: {"rank", "wait_caused_us", "arrived_last", "causes_us":
// {each bubble cause, "compute", "comm"}, "unattributed_us", "host",
// "direct_wait_caused_us", "via": [{"rank", "wait_us"}], "saved_us"}, as
// `analyze --json` and `query job --json` both give a straggler. With
// `root` set (`query`), "root" (its value) and "cause" (StragglerCauseName in
// schemas/window_summary.h, null when none) follow.
void WriteStragglerJson(JsonWriter& w, const Straggler& s,
                        std::optional<bool> root = std::nullopt);

// Writes one value, the what-if replay (docs/semantics.md#what-it-cost):
// {"job_us", "job_us_without_stragglers"}, or null when job_ns < 0 (no used
// instance), as `analyze --json` and `query job --json` both give it.
void WriteWhatIfJson(JsonWriter& w, int64_t job_ns,
                     int64_t job_ns_without_stragglers);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_SCHEMAS_ANALYSIS_JSON_H_
