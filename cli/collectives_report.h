// Renders a CollectiveAnalysis (analysis/collectives.h) for `analyze` given
// the ranks of one job: the per-rank table and the "Collectives and
// stragglers" section for people, and the `ranks`, `collectives` and
// `stragglers` members of the `--json` report (docs/analyze.md).
#ifndef BUBBLEWATCH_CLI_COLLECTIVES_REPORT_H_
#define BUBBLEWATCH_CLI_COLLECTIVES_REPORT_H_

#include <string>

#include "analysis/collectives.h"
#include "base/json_writer.h"

namespace bubblewatch {

// The per-rank table and the collectives section. `ranks_given` of
// `world_size` (-1: unknown) is said in the header when fewer.
std::string RenderCollectivesText(const CollectiveAnalysis& analysis,
                                  bool color);

struct CollectivesTextOptions {
  // Only the collectives are known (Inspector logs): a straggler's time
  // outside them is one category, "own time", not bubble causes.
  bool own_time_unknown = false;
  // The timeline was built from exec times
  // (docs/semantics.md#exec-time-only-waits): no share of GPU time and no
  // job length, which it does not know.
  bool timeline_from_exec_times = false;
};

// The collectives section alone (instances, waits, stragglers, what-if),
// for reports with a table of their own in place of the per-rank one
// (Inspector logs: cli/inspector_report.h).
std::string RenderCollectivesSummaryText(
    const CollectiveAnalysis& analysis, bool color,
    const CollectivesTextOptions& options = {});

// Writes the members "ranks", "collectives" and "stragglers" into the object
// `w` is inside.
void WriteCollectivesJson(JsonWriter& w, const CollectiveAnalysis& analysis);

// For one rank's report: collective time is known, its waits are not (they
// need the other ranks). Empty when the trace has no collective kernel.
std::string RenderSingleRankCollectivesText(const Trace& trace,
                                            const Analysis& analysis);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_CLI_COLLECTIVES_REPORT_H_
