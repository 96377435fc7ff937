// A job split across processors, as stage 2's tests see it
// (docs/architecture.md#one-job-across-processors): a TP2×DP2×PP4 job
// (16 ranks on 8 hosts, pipeline groups, host clocks milliseconds apart and
// drifting, two roots planted) streamed once through one windower (the
// single stage's windows), and each host's events through a windower of
// its own, its ranks digested per window: the parts its stage 1 publishes
// (EncodeHostWindowPart), with the world size (16), the ranks the host has
// shown so far, and `last` on its final window. As
// JobWindowerCollectives.HostPartsMergeIntoTheSingleStageWindow builds them
// (tests/processor/job_windower_collectives_test.cc).
#ifndef BUBBLEWATCH_TESTS_PROCESSOR_SPLIT_JOB_PARTS_H_
#define BUBBLEWATCH_TESTS_PROCESSOR_SPLIT_JOB_PARTS_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "processor/job_windower.h"
#include "schemas/window_summary.h"

namespace bubblewatch::testing {

inline constexpr char kSplitJob[] = "job";

struct SplitJob {
  WindowerOptions options;
  std::vector<WindowSummary> single;
  // host -> its parts' encodings and window starts, in window order.
  std::map<std::string, std::vector<std::string>> parts;
  std::map<std::string, std::vector<int64_t>> starts;
  int32_t world = 0;
};

// Built once, on first use.
const SplitJob& TheSplitJob();

// One message of the parts topic: whose part, which one of the host's.
struct Sent {
  std::string host;
  size_t index = 0;
};

// The hosts' parts interleaved at random (each host's order kept), with
// stage-1 republishes: after a part, now and then, the host's previous
// part and this one again. `skip`: parts left out, (host, index).
std::vector<Sent> Interleave(
    const SplitJob& job, uint32_t seed,
    std::set<std::pair<std::string, size_t>> skip = {});

// The job's parts in window order (each window's parts by host), but the
// first host ends early: its part of its window `k` says `last`, and it
// sends no later one. `cut`: the offset of the third part of the window
// after, where that window is open and the ended host's last part lies
// below every open window's parts (the resume offset there).
std::vector<std::string> AHostEndsEarly(const SplitJob& job, size_t k,
                                        int64_t& cut);

// `got` are the single stage's windows: every field but what a part cannot
// know (host skew; why a window closed is checked apart), the ranks'
// timelines included.
void ExpectSingleStageWindows(const std::vector<WindowSummary>& got);

}  // namespace bubblewatch::testing

#endif  // BUBBLEWATCH_TESTS_PROCESSOR_SPLIT_JOB_PARTS_H_
