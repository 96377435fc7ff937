// libFuzzer target: an NCCL Inspector log read from memory, then the job of
// that log under two process names (one process's communicators with a
// copy's, so ranks are claimed twice). Any input reads (bad lines are
// counted skips, never an error); the job is a Trace per process or an
// error; every kept collective's names are in its string table, no event
// ends before it starts, every time is an accepted one, and the collective
// analysis of the job runs without a crash or an overflow.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "analysis/collectives.h"
#include "ingest/inspector/inspector_job.h"
#include "ingest/inspector/inspector_log.h"
#include "tests/fuzz/trace_invariants.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<bubblewatch::InspectorLog> logs;
  logs.push_back(bubblewatch::ParseInspectorLog(text, "a-pid1.log"));
  logs.push_back(bubblewatch::ParseInspectorLog(text, "b-pid2.log"));
  logs[1].hostname = "b";
  logs[1].pid = 2;
  absl::StatusOr<bubblewatch::InspectorJob> job =
      bubblewatch::BuildInspectorJob(std::move(logs), {"a", "b"});
  if (!job.ok()) return 0;
  std::vector<bubblewatch::RankInput> ranks;
  for (size_t i = 0; i < job->traces.size(); ++i) {
    const bubblewatch::Trace& t = job->traces[i];
    bubblewatch::CheckTraceInvariants(t);
    if (!bubblewatch::CheckEventTimes(t).ok()) __builtin_trap();
    bubblewatch::RankInput in;
    in.trace = &t;
    in.rank = job->processes[i].rank;
    in.clock_domain = job->processes[i].clock_domain;
    ranks.push_back(in);
  }
  (void)bubblewatch::AnalyzeCollectives(ranks);
  return 0;
}
