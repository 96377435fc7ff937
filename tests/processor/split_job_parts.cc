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

namespace bubblewatch::testing {
namespace {

constexpr char kJob[] = "job";

struct Source {
  Trace trace;
  std::string host;
  int32_t rank = -1;
};

std::vector<DecodedBatch> Batches(const std::vector<Source>& sources,
                                  int64_t max_events, uint32_t seed) {
  struct Timed {
    int64_t first;
    size_t source;
    DecodedBatch batch;
  };
  std::vector<Timed> all;
  for (size_t s = 0; s < sources.size(); ++s) {
    BatchedTrace batched(sources[s].trace,
                         BatchHeader{.job = kJob,
                                     .host = sources[s].host,
                                     .rank = sources[s].rank,
                                     .world_size = sources[s].trace.world_size},
                         {.max_events = max_events});
    for (size_t i = 0; i < batched.num_batches(); ++i) {
      absl::StatusOr<DecodedBatch> d = DecodeEventBatch(batched.Encode(i));
      EXPECT_TRUE(d.ok()) << d.status();
      if (!d.ok()) continue;
      all.push_back({batched.batch(i).first_start_ns, s, *std::move(d)});
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const Timed& a, const Timed& b) {
    return std::tie(a.first, a.source) < std::tie(b.first, b.source);
  });
  std::mt19937 rng(seed);
  for (size_t i = 0; i + 1 < all.size(); ++i) {
    if (rng() % 3 == 0) std::swap(all[i], all[i + 1]);
  }
  std::vector<DecodedBatch> out;
  for (Timed& t : all) out.push_back(std::move(t.batch));
  return out;
}

std::vector<WindowSummary> Stream(const std::vector<DecodedBatch>& batches,
                                  const WindowerOptions& options) {
  JobWindower windower(kJob, options);
  std::vector<WindowSummary> out;
  const absl::Time now = absl::UnixEpoch();
  int64_t offset = 0;
  for (const DecodedBatch& b : batches) {
    EXPECT_EQ(windower.Add(b, offset++, /*replay=*/false, now), 0);
    for (WindowSummary& w : windower.FinalizeReady(now, absl::Hours(1))) {
      out.push_back(std::move(w));
    }
  }
  for (WindowSummary& w :
       windower.FinalizeAll(WindowSummary::ClosedBy::kIdleTimeout)) {
    out.push_back(std::move(w));
  }
  return out;
}

Trace Cut(const Trace& t, int64_t start, int64_t end) {
  Trace out = t;
  auto outside = [&](const auto& e) {
    return e.start_ns < start || e.start_ns >= end;
  };
  std::erase_if(out.gpu, outside);
  std::erase_if(out.cpu, outside);
  std::erase_if(out.collectives, outside);
  return out;
}

// The sources' events that start in [start, end), as the windower cuts
// them (job_windower_collectives_test.cc's WindowTraces).
std::vector<Trace> WindowTraces(const std::vector<Source>& sources,
                                int64_t start, int64_t end,
                                std::vector<std::string>* labels) {
  std::vector<Trace> cut;
  for (const Source& s : sources) {
    Trace whole = s.trace;
    NumberPointToPointPairs(whole);
    Trace t = Cut(whole, start, end);
    if (t.gpu.empty() && t.cpu.empty() && t.collectives.empty()) continue;
    JobWindower::ApplyRankIds(
        BatchHeader{.rank = s.rank, .world_size = s.trace.world_size}, t);
    t.host = s.host;
    labels->push_back(absl::StrCat(s.host, "/", s.rank));
    cut.push_back(std::move(t));
  }
  return cut;
}

SplitJob* BuildSplitJob() {
  auto* out = new SplitJob;
  ParallelJobOptions o;
  o.tp = 2;
  o.dp = 2;
  o.pp = 4;
  o.steps = 12;
  o.pipeline_groups = true;
  o.clock_offset_ns = {0,         1'300'000, -2'100'000, 700'000,
                       2'900'000, -600'000,  1'800'000,  -1'400'000};
  o.host_names = true;
  o.drift_ppm = {0, 3, -2, 5, -4, 1, 2, -1};
  o.roots = {{.rank = 9, .step = 4, .extra_ns = 8'000'000, .steps = 4},
             {.rank = 2,
              .step = 8,
              .extra_ns = 3'000'000,
              .cause = StragglerCause::kDataLoading}};
  ParallelJob job = MakeParallelJob(o);
  std::vector<Source> sources;
  for (Trace& t : job.ranks) {
    const int32_t rank = t.rank;
    const std::string host = t.host;
    out->world = std::max(out->world, t.world_size);
    sources.push_back({.trace = std::move(t), .host = host, .rank = rank});
  }
  out->options.window_ns = 40'000'000;
  out->options.lateness_ns = 1'000'000'000;
  out->single = Stream(Batches(sources, 300, 5), out->options);
  std::set<std::string> hosts;
  for (const Source& s : sources) hosts.insert(s.host);
  for (const std::string& name : hosts) {
    std::vector<Source> own;
    for (const Source& s : sources) {
      if (s.host == name) own.push_back(s);
    }
    const std::vector<DecodedBatch> batches = Batches(own, 300, 5);
    std::vector<Interval> observations;
    for (const DecodedBatch& b : batches) {
      if (b.header.observation) {
        observations.push_back(
            {b.header.observation->start_ns, b.header.observation->end_ns});
      }
    }
    const IntervalSet observed =
        IntervalSet::FromIntervals(std::move(observations));
    const std::vector<WindowSummary> windows = Stream(batches, out->options);
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
        AnalyzerOptions analyzer;
        analyzer.top_bubbles = 0;
        absl::StatusOr<RankDigest> d = DigestRank(r, analyzer);
        EXPECT_TRUE(d.ok()) << d.status();
        if (!d.ok()) continue;
        ranks_so_far.insert(d->rank);
        part.digests.push_back(*std::move(d));
      }
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
// know (timelines, host skew; why a window closed is checked apart).
void ExpectSingleStageWindows(const std::vector<WindowSummary>& got) {
  const std::vector<WindowSummary>& single = TheSplitJob().single;
  ASSERT_EQ(got.size(), single.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("window ", single[i].window.start_ns));
    WindowSummary expected = single[i];
    if (expected.collectives) expected.collectives->timelines.clear();
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
