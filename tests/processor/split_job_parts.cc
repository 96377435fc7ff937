#include "tests/processor/split_job_parts.h"

#include <algorithm>
#include <random>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "analysis/collective_windows.h"
#include "analysis/collectives.h"
#include "analysis/rank_digest.h"
#include "analysis/window_merge.h"
#include "gtest/gtest.h"
#include "ingest/batched_trace.h"
#include "ingest/synthetic/synthetic_parallel_job.h"
#include "tests/processor/windower_streams.h"

namespace bubblewatch::testing {
namespace {

constexpr char kJob[] = "job";

using Source = StreamSource;

SplitJob* BuildSplitJob() {
  auto* out = new SplitJob;
  ParallelJob job = MakeParallelJob(SplitJobOptions(/*host_names=*/true));
  std::vector<Source> sources;
  for (Trace& t : job.ranks) {
    const int32_t rank = t.rank;
    const std::string host = t.host;
    out->world = std::max(out->world, t.world_size);
    sources.push_back({.trace = std::move(t), .host = host, .rank = rank});
  }
  out->options.window_ns = 40'000'000;
  out->options.lateness_ns = 1'000'000'000;
  out->single =
      StreamWindows(InterleavedBatches(sources, 300, 5), out->options);
  std::set<std::string> hosts;
  for (const Source& s : sources) hosts.insert(s.host);
  for (const std::string& name : hosts) {
    std::vector<Source> own;
    for (const Source& s : sources) {
      if (s.host == name) own.push_back(s);
    }
    const std::vector<DecodedBatch> batches = InterleavedBatches(own, 300, 5);
    std::vector<Interval> observations;
    for (const DecodedBatch& b : batches) {
      if (b.header.observation) {
        observations.push_back(
            {b.header.observation->start_ns, b.header.observation->end_ns});
      }
    }
    const IntervalSet observed =
        IntervalSet::FromIntervals(std::move(observations));
    const std::vector<WindowSummary> windows =
        StreamWindows(batches, out->options);
    std::set<int32_t> ranks_so_far;
    for (size_t i = 0; i < windows.size(); ++i) {
      const WindowSummary& w = windows[i];
      HostWindowPart part{.job = kJob,
                          .host = name,
                          .window = w.window,
                          .gpu_events = w.gpu_events,
                          .cpu_events = w.cpu_events,
                          .observed = observed};
      std::vector<std::string> labels;
      const std::vector<Trace> traces =
          WindowTraces(own, w.window.start_ns, w.window.end_ns, &labels);
      for (const RankInput& r : RanksOfTraces(traces, labels)) {
        // As stage 1 makes them: its digest and its timeline's part.
        AnalyzerOptions analyzer;
        analyzer.top_bubbles = 0;
        const absl::Status s = DigestRanksInto({r}, analyzer, part);
        EXPECT_TRUE(s.ok()) << s;
        if (!s.ok()) continue;
        ranks_so_far.insert(r.rank);
      }
      EXPECT_EQ(part.timelines.size(), part.digests.size());
      // What stage 1 knows: the declared world, the ranks it has seen so
      // far, and whether the host's stream ended with this window.
      part.world_size = out->world;
      part.ranks.assign(ranks_so_far.begin(), ranks_so_far.end());
      part.last = i + 1 == windows.size();
      out->parts[name].push_back(EncodeHostWindowPart(part));
      out->starts[name].push_back(w.window.start_ns);
    }
  }
  return out;
}

}  // namespace

const SplitJob& TheSplitJob() {
  static const SplitJob* job = BuildSplitJob();
  return *job;
}

// The hosts' parts interleaved at random (each host's order kept), with
// stage-1 republishes: after a part, now and then, the host's previous
// part and this one again. `skip`: parts left out, (host, index).
std::vector<Sent> Interleave(const SplitJob& job, uint32_t seed,
                             std::set<std::pair<std::string, size_t>> skip) {
  std::mt19937 rng(seed);
  std::map<std::string, std::vector<size_t>> queues;
  for (const auto& [host, parts] : job.parts) {
    std::vector<size_t>& q = queues[host];
    for (size_t i = 0; i < parts.size(); ++i) {
      if (skip.contains({host, i})) continue;
      q.push_back(i);
      if (rng() % 4 == 0) {
        if (i > 0 && !skip.contains({host, i - 1})) q.push_back(i - 1);
        q.push_back(i);
      }
    }
  }
  std::vector<Sent> out;
  std::map<std::string, size_t> next;
  while (true) {
    std::vector<std::string> left;
    for (const auto& [host, q] : queues) {
      if (next[host] < q.size()) left.push_back(host);
    }
    if (left.empty()) break;
    const std::string& host = left[rng() % left.size()];
    out.push_back({host, queues[host][next[host]++]});
  }
  return out;
}

// `got` are the single stage's windows: every field but what a part cannot
// know (host skew; why a window closed is checked apart), the ranks'
// timelines included.
void ExpectSingleStageWindows(const std::vector<WindowSummary>& got) {
  const std::vector<WindowSummary>& single = TheSplitJob().single;
  ASSERT_EQ(got.size(), single.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("window ", single[i].window.start_ns));
    WindowSummary expected = single[i];
    expected.closed_by = got[i].closed_by;
    expected.host_skew_ns = got[i].host_skew_ns;
    std::string diff;
    EXPECT_TRUE(SameWindow(got[i], expected, &diff)) << diff;
  }
}

std::vector<std::string> AHostEndsEarly(const SplitJob& job, size_t k,
                                        int64_t& cut) {
  std::vector<std::tuple<int64_t, std::string, size_t>> order;
  for (const auto& [host, starts] : job.starts) {
    for (size_t i = 0; i < starts.size(); ++i) {
      order.emplace_back(starts[i], host, i);
    }
  }
  std::sort(order.begin(), order.end());
  const std::string& early = job.parts.begin()->first;
  const int64_t early_start = job.starts.at(early).at(k);
  std::vector<std::string> out;
  cut = -1;
  int after = 0;
  for (const auto& [start, host, i] : order) {
    std::string bytes = job.parts.at(host)[i];
    if (host == early) {
      if (i > k) continue;
      if (i == k) {
        absl::StatusOr<HostWindowPart> part = DecodeHostWindowPart(bytes);
        EXPECT_TRUE(part.ok());
        part->last = true;
        bytes = EncodeHostWindowPart(*part);
      }
    }
    if (start > early_start && ++after == 3) {
      cut = static_cast<int64_t>(out.size());
    }
    out.push_back(std::move(bytes));
  }
  EXPECT_GT(cut, 0);
  return out;
}

}  // namespace bubblewatch::testing
