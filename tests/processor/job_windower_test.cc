// The streaming windower against its oracle: for streams whose gaps are
// shorter than the lateness, the finalized windows equal the offline
// windowed analysis of the same events, whatever the batch boundaries, host
// interleaving or shuffling within the lateness.
#include "processor/job_windower.h"

#include <algorithm>
#include <random>

#include "absl/functional/function_ref.h"
#include "analysis/bubble_analyzer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ingest/batched_trace.h"
#include "ingest/synthetic/synthetic_fleet.h"
#include "ingest/synthetic/synthetic_straggler.h"
#include "processor/batch_validator.h"
#include "schemas/event_batch_codec.h"
#include "schemas/window_summary_codec.h"
#include "tests/testing/units.h"

namespace bubblewatch {
namespace {

// The windowers here close their jobs as the idle timeout does.
constexpr WindowSummary::ClosedBy kIdle = WindowSummary::ClosedBy::kIdleTimeout;

using testing::kUs;
constexpr int64_t kWindow = 1000 * kUs;
constexpr int64_t kLateness = 300 * kUs;

struct Stream {
  Trace whole;  // All events, for the oracle.
  // Per host, its events in start order.
  std::vector<Trace> per_host;
};

// Two hosts; host h runs devices {2h, 2h+1}, kernels on two streams each,
// launched from one thread per device, with syncs, allocator calls, data
// loading and copies planted in some gaps. Gaps stay under 150 us.
Stream MakeStream(uint32_t seed, int windows) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> dur(5 * kUs, 80 * kUs),
      gap(0, 150 * kUs), lead(1 * kUs, 40 * kUs), kind(0, 9);
  Stream s;
  s.per_host.resize(2);
  NameInterner whole_names(&s.whole);
  const char* kernels[] = {"gemm", "elementwise", "reduce", "nccl:all_reduce"};
  CorrelationId corr = 1;
  const int64_t t0 = 1'700'000'000'000'000'000;
  const int64_t end = t0 + windows * kWindow;
  for (int host = 0; host < 2; ++host) {
    Trace& t = s.per_host[host];
    NameInterner names(&t);
    t.host = "host" + std::to_string(host);
    for (int d = 2 * host; d < 2 * host + 2; ++d) {
      int64_t gpu_free = t0 + gap(rng);
      int64_t cpu_free = t0;
      uint64_t tid = 100 + d;
      while (gpu_free < end) {
        int64_t g = gap(rng);
        int64_t start = gpu_free + g;
        int64_t k_end = start + dur(rng);
        int64_t k = kind(rng);
        // Host activity in the gap.
        if (g > 20 * kUs && k < 4) {
          const char* what[] = {"cudaStreamSynchronize", "cudaFree",
                                "enumerate(DataLoader)#next", "aten::add"};
          CpuEvent e{.start_ns = gpu_free + kUs,
                     .end_ns = start - 2 * kUs,
                     .thread = tid,
                     .name = names.Intern(what[k]),
                     .category = CpuEventCategory::kCpuOp};
          t.cpu.push_back(e);
        }
        if (g > 30 * kUs && k == 4) {
          t.gpu.push_back(GpuActivity{.start_ns = gpu_free + 3 * kUs,
                                      .end_ns = start - 5 * kUs,
                                      .name = names.Intern("Memcpy HtoD"),
                                      .device = d,
                                      .stream = 9,
                                      .kind = GpuActivityKind::kMemcpy});
        }
        int64_t launch = std::max(cpu_free, start - lead(rng));
        t.cpu.push_back(CpuEvent{.start_ns = launch,
                                 .end_ns = launch + kUs,
                                 .correlation = corr,
                                 .thread = tid,
                                 .name = names.Intern("cudaLaunchKernel"),
                                 .category = CpuEventCategory::kCudaRuntime});
        cpu_free = launch + kUs;
        t.gpu.push_back(GpuActivity{.start_ns = start,
                                    .end_ns = k_end,
                                    .correlation = corr,
                                    .name = names.Intern(kernels[k % 4]),
                                    .device = d,
                                    .stream = static_cast<int32_t>(k % 2)});
        ++corr;
        gpu_free = k_end;
      }
    }
    // The oracle sees everything.
    for (GpuActivity a : t.gpu) {
      a.name = whole_names.Intern(t.names[a.name]);
      s.whole.gpu.push_back(a);
    }
    for (CpuEvent e : t.cpu) {
      e.name = whole_names.Intern(t.names[e.name]);
      s.whole.cpu.push_back(e);
    }
  }
  return s;
}

// Cuts one host's events (sorted by start) into batches of random size,
// shuffling events inside each batch. With 100 us of batching and 100 us of
// jitter, every event arrives within 200 us of its host's newest one: inside
// the 300 us lateness.
std::vector<DecodedBatch> MakeBatches(const Trace& host, int rank,
                                      std::mt19937& rng) {
  struct Item {
    int64_t start;
    bool gpu;
    size_t index;
  };
  std::vector<Item> items;
  for (size_t i = 0; i < host.gpu.size(); ++i)
    items.push_back({host.gpu[i].start_ns, true, i});
  for (size_t i = 0; i < host.cpu.size(); ++i)
    items.push_back({host.cpu[i].start_ns, false, i});
  std::stable_sort(
      items.begin(), items.end(),
      [](const Item& a, const Item& b) { return a.start < b.start; });
  std::vector<DecodedBatch> batches;
  std::uniform_int_distribution<size_t> size(1, 60);
  for (size_t pos = 0; pos < items.size();) {
    size_t n = std::min(size(rng), items.size() - pos);
    // A batch leaves when full or when its span reaches 100 us (a producer's
    // linger), so batching plus jitter stays within the lateness.
    size_t span_end = pos + 1;
    while (span_end < pos + n &&
           items[span_end].start - items[pos].start <= 100 * kUs) {
      ++span_end;
    }
    n = span_end - pos;
    std::vector<Item> chunk(items.begin() + pos, items.begin() + pos + n);
    std::shuffle(chunk.begin(), chunk.end(), rng);
    DecodedBatch b;
    b.header.job = "job";
    b.header.host = host.host;
    b.header.rank = rank;
    b.trace.names = host.names;
    for (const Item& it : chunk) {
      if (it.gpu) {
        b.trace.gpu.push_back(host.gpu[it.index]);
      } else {
        b.trace.cpu.push_back(host.cpu[it.index]);
      }
    }
    batches.push_back(std::move(b));
    pos += n;
  }
  return batches;
}

// The two hosts' batches as they arrive: one of each in turn.
std::vector<const DecodedBatch*> Interleave(
    const std::vector<DecodedBatch>& h0, const std::vector<DecodedBatch>& h1) {
  std::vector<const DecodedBatch*> order;
  for (size_t i = 0; i < std::max(h0.size(), h1.size()); ++i) {
    if (i < h0.size()) order.push_back(&h0[i]);
    if (i < h1.size()) order.push_back(&h1[i]);
  }
  return order;
}

void ExpectSameStats(const UtilizationStats& a, const UtilizationStats& b,
                     const std::string& where) {
  EXPECT_EQ(a.span_ns, b.span_ns) << where;
  EXPECT_EQ(a.compute_ns, b.compute_ns) << where;
  EXPECT_EQ(a.bubble_ns, b.bubble_ns) << where;
  EXPECT_EQ(a.attribution, b.attribution) << where;
  EXPECT_EQ(a.largest_bubble_ns, b.largest_bubble_ns) << where;
  EXPECT_EQ(a.largest_bubble_start_ns, b.largest_bubble_start_ns) << where;
  ASSERT_EQ(a.culprit_before_bubble.has_value(),
            b.culprit_before_bubble.has_value())
      << where;
  if (a.culprit_before_bubble) {
    EXPECT_EQ(a.culprit_before_bubble->name, b.culprit_before_bubble->name)
        << where;
    EXPECT_EQ(a.culprit_before_bubble->end_ns, b.culprit_before_bubble->end_ns)
        << where;
  }
}

void ExpectSameWindow(const WindowAnalysis& got, const WindowAnalysis& want) {
  std::string where = "window " + std::to_string(want.start_ns);
  EXPECT_EQ(got.start_ns, want.start_ns);
  EXPECT_EQ(got.end_ns, want.end_ns);
  ExpectSameStats(got.job, want.job, where);
  ASSERT_EQ(got.devices.size(), want.devices.size()) << where;
  for (size_t d = 0; d < got.devices.size(); ++d) {
    EXPECT_EQ(got.devices[d].device, want.devices[d].device) << where;
    EXPECT_EQ(got.devices[d].kernels, want.devices[d].kernels) << where;
    ExpectSameStats(got.devices[d].stats, want.devices[d].stats,
                    where + " device " + std::to_string(d));
  }
  ASSERT_EQ(got.top_bubbles.size(), want.top_bubbles.size()) << where;
  for (size_t i = 0; i < got.top_bubbles.size(); ++i) {
    const BubbleReport& g = got.top_bubbles[i];
    const BubbleReport& w = want.top_bubbles[i];
    EXPECT_EQ(g.device, w.device) << where;
    EXPECT_EQ(g.start_ns, w.start_ns) << where;
    EXPECT_EQ(g.end_ns, w.end_ns) << where;
    EXPECT_EQ(g.attribution, w.attribution) << where;
    EXPECT_EQ(g.cause, w.cause) << where;
  }
}

TEST(JobWindower, FinalizedWindowsEqualTheOfflineOracle) {
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Stream s = MakeStream(seed, /*windows=*/12);
    AnalyzerOptions oracle_options;
    oracle_options.window_ns = kWindow;
    oracle_options.top_bubbles_per_window = 3;
    absl::StatusOr<Analysis> oracle = AnalyzeTrace(s.whole, oracle_options);
    ASSERT_TRUE(oracle.ok());

    std::mt19937 rng(seed * 7919);
    std::vector<DecodedBatch> h0 = MakeBatches(s.per_host[0], 0, rng);
    std::vector<DecodedBatch> h1 = MakeBatches(s.per_host[1], 1, rng);
    WindowerOptions options;
    options.window_ns = kWindow;
    options.lateness_ns = kLateness;
    options.max_launch_lead_ns = kWindow;
    JobWindower windower("job", options);
    std::vector<WindowSummary> got;
    absl::Time now = absl::UnixEpoch();
    // Interleave the two hosts' batches by time, each delayed by a random
    // transport jitter well within the lateness.
    struct Arrival {
      int64_t at;
      const DecodedBatch* batch;
    };
    std::vector<Arrival> arrivals;
    std::uniform_int_distribution<int64_t> jitter(0, 100 * kUs);
    for (const auto* host : {&h0, &h1}) {
      int64_t latest = INT64_MIN;
      for (const DecodedBatch& b : *host) {
        for (const auto& a : b.trace.gpu) latest = std::max(latest, a.start_ns);
        for (const auto& e : b.trace.cpu) latest = std::max(latest, e.start_ns);
        arrivals.push_back({latest + jitter(rng), &b});
      }
    }
    std::stable_sort(
        arrivals.begin(), arrivals.end(),
        [](const Arrival& a, const Arrival& b) { return a.at < b.at; });
    int64_t offset = 0;
    for (const Arrival& arrival : arrivals) {
      const DecodedBatch& b = *arrival.batch;
      EXPECT_EQ(windower.Add(b, offset++, /*replay=*/false, now), 0);
      for (WindowSummary& w : windower.FinalizeReady(now, absl::Hours(1))) {
        got.push_back(std::move(w));
      }
    }
    EXPECT_LT(windower.buffered_events(),
              (s.whole.gpu.size() + s.whole.cpu.size()) / 3)
        << "the windower evicts what closed windows no longer need";
    for (WindowSummary& w : windower.FinalizeAll(kIdle))
      got.push_back(std::move(w));

    ASSERT_EQ(got.size(), oracle->windows.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ExpectSameWindow(got[i].window, oracle->windows[i]);
      EXPECT_EQ(got[i].job, "job");
    }
  }
}

// Collective records add the windows' collective analysis
// (job_windower_collectives_test.cc) and change nothing else: the windows
// of a multi-rank job, sent with and without them, are the same bytes once
// the analysis is taken out, and only the windows sent with them hold one.
TEST(JobWindower, CollectiveRecordsLeaveTheBubbleFiguresAsTheyWere) {
  StragglerJob job = MakeStragglerJob(
      {.ranks = 4, .ranks_per_host = 2, .steps = 400, .late_rank = 1});
  auto windows = [&](bool with_collectives) {
    std::vector<DecodedBatch> batches;
    for (const Trace& rank : job.ranks) {
      Trace t = rank;
      if (!with_collectives) t.collectives.clear();
      BatchedTrace batched(
          std::move(t),
          BatchHeader{.job = "job", .host = rank.host, .rank = rank.rank},
          {.max_events = 256});
      for (size_t i = 0; i < batched.num_batches(); ++i) {
        absl::StatusOr<DecodedBatch> d = DecodeEventBatch(batched.Encode(i));
        EXPECT_TRUE(d.ok()) << d.status();
        if (!d.ok()) return std::vector<std::string>{};
        EXPECT_EQ(ValidateBatch(*d), std::nullopt) << "batch " << i;
        batches.push_back(*std::move(d));
      }
    }
    size_t records = 0;
    for (const DecodedBatch& b : batches) records += b.trace.collectives.size();
    EXPECT_EQ(records, with_collectives ? 4u * 400u : 0u);
    // In event-time order of each batch's first event, as a broker would
    // interleave the ranks' streams.
    std::stable_sort(batches.begin(), batches.end(),
                     [](const DecodedBatch& a, const DecodedBatch& b) {
                       return a.trace.gpu.front().start_ns <
                              b.trace.gpu.front().start_ns;
                     });
    WindowerOptions options;
    options.window_ns = 100'000'000;
    options.lateness_ns = 20'000'000;
    JobWindower windower("job", options);
    std::vector<std::string> out;
    absl::Time now = absl::UnixEpoch();
    int64_t offset = 0;
    int with_analysis = 0;
    auto keep = [&](WindowSummary w) {
      with_analysis += w.collectives.has_value();
      w.collectives.reset();
      out.push_back(EncodeWindowSummary(w));
    };
    for (const DecodedBatch& b : batches) {
      windower.Add(b, offset++, /*replay=*/false, now);
      for (WindowSummary& w : windower.FinalizeReady(now, absl::Hours(1)))
        keep(std::move(w));
    }
    for (WindowSummary& w : windower.FinalizeAll(kIdle)) keep(std::move(w));
    if (with_collectives) {
      EXPECT_EQ(with_analysis, static_cast<int>(out.size()));
    } else {
      EXPECT_EQ(with_analysis, 0);
    }
    return out;
  };
  const std::vector<std::string> with = windows(true);
  EXPECT_GT(with.size(), 3u);
  EXPECT_EQ(with, windows(false));
}

TEST(JobWindower, EventsBehindTheFinalizedEdgeAreCountedLate) {
  Stream s = MakeStream(3, 6);
  std::mt19937 rng(3);
  std::vector<DecodedBatch> batches = MakeBatches(s.per_host[0], 0, rng);
  WindowerOptions options;
  options.window_ns = kWindow;
  options.lateness_ns = kLateness;
  JobWindower windower("job", options);
  absl::Time now = absl::UnixEpoch();
  int64_t offset = 0;
  for (const DecodedBatch& b : batches) {
    windower.Add(b, offset++, false, now);
    windower.FinalizeReady(now, absl::Hours(1));
  }
  ASSERT_TRUE(windower.finalized_through_ns().has_value());
  // Resend the first batch: its kernels are behind the edge now.
  int64_t late = windower.Add(batches[0], offset++, false, now);
  EXPECT_GT(late, 0);
  absl::flat_hash_map<int64_t, int64_t> counts = windower.TakeLateCounts();
  int64_t total = 0;
  for (const auto& [window, n] : counts) total += n;
  EXPECT_EQ(total, late);
  // A replayed batch is not counted again.
  EXPECT_EQ(windower.Add(batches[0], offset++, /*replay=*/true, now), 0);
}

TEST(JobWindower, SilentGpuMakesZeroPercentWindowsWhileTheJobIsAlive) {
  // One kernel, then only CPU activity for several windows.
  DecodedBatch b;
  b.header.job = "job";
  b.header.host = "h";
  NameInterner names(&b.trace);
  b.trace.gpu.push_back(GpuActivity{
      .start_ns = 0, .end_ns = 100 * kUs, .name = names.Intern("k")});
  for (int i = 0; i < 40; ++i) {
    int64_t t = 200 * kUs + i * 100 * kUs;
    b.trace.cpu.push_back(
        CpuEvent{.start_ns = t,
                 .end_ns = t + 90 * kUs,
                 .thread = 1,
                 .name = names.Intern("cudaStreamSynchronize"),
                 .category = CpuEventCategory::kCudaRuntime});
  }
  WindowerOptions options;
  options.window_ns = kWindow;
  options.lateness_ns = kLateness;
  JobWindower windower("job", options);
  windower.Add(b, 0, false, absl::UnixEpoch());
  std::vector<WindowSummary> windows =
      windower.FinalizeReady(absl::UnixEpoch(), absl::Hours(1));
  ASSERT_EQ(windows.size(), 3u);  // Watermark 4.1 ms - 0.3 ms -> [0, 3 ms).
  EXPECT_EQ(windows[1].window.job.compute_ns, 0);
  EXPECT_EQ(windows[1].window.job.bubble_ns, kWindow);
  EXPECT_EQ(
      windows[1]
          .window.job.attribution[static_cast<int>(BubbleCause::kHostSync)],
      kWindow);
}

TEST(JobWindower, ResumeOffsetIsTheOldestBatchStillBuffered) {
  Stream s = MakeStream(5, 6);
  std::mt19937 rng(5);
  std::vector<DecodedBatch> batches = MakeBatches(s.per_host[0], 0, rng);
  WindowerOptions options;
  options.window_ns = kWindow;
  options.lateness_ns = kLateness;
  options.max_launch_lead_ns = kWindow;
  JobWindower windower("job", options);
  EXPECT_FALSE(windower.ResumeOffset().has_value());
  int64_t offset = 1000;
  for (const DecodedBatch& b : batches) {
    windower.Add(b, offset++, false, absl::UnixEpoch());
    windower.FinalizeReady(absl::UnixEpoch(), absl::Hours(1));
  }
  ASSERT_TRUE(windower.ResumeOffset().has_value());
  EXPECT_GT(*windower.ResumeOffset(), 1000);
  EXPECT_LT(*windower.ResumeOffset(), offset);
}

namespace bubblewatch {
namespace {

// Recovery replays at most about a window plus the lateness (or the launch
// lead): on every scenario of the synthetic fleet, the lowest offset a job
// still needs (ResumeOffset) keeps moving forward with the stream.
TEST(JobWindower, ResumeOffsetFollowsTheStreamOnTheSyntheticFleet) {
  SyntheticFleetOptions fleet_options;
  fleet_options.jobs = 6;
  fleet_options.gpus_per_job = 2;
  fleet_options.duration = absl::Seconds(60);
  fleet_options.events_per_second_per_gpu = 2000;
  fleet_options.scenario = SyntheticScenario::kMix;
  fleet_options.seed = 11;
  absl::StatusOr<std::vector<SyntheticJob>> fleet =
      GenerateSyntheticFleet(fleet_options);
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  WindowerOptions options;
  options.window_ns = 10'000'000'000;
  options.lateness_ns = 2'000'000'000;
  for (const SyntheticJob& job : *fleet) {
    std::mt19937 rng(5);
    std::vector<std::pair<int64_t, DecodedBatch>> arrivals;  // By first start.
    for (size_t r = 0; r < job.ranks.size(); ++r) {
      for (DecodedBatch& b :
           MakeBatches(job.ranks[r], static_cast<int>(r), rng)) {
        int64_t first = INT64_MAX;
        for (const GpuActivity& a : b.trace.gpu)
          first = std::min(first, a.start_ns);
        for (const CpuEvent& e : b.trace.cpu)
          first = std::min(first, e.start_ns);
        arrivals.emplace_back(first, std::move(b));
      }
    }
    std::stable_sort(
        arrivals.begin(), arrivals.end(),
        [](const auto& a, const auto& b) { return a.first < b.first; });
    JobWindower windower(job.job, options);
    absl::Time now = absl::UnixEpoch();
    for (size_t offset = 0; offset < arrivals.size(); ++offset) {
      windower.Add(arrivals[offset].second, static_cast<int64_t>(offset), false,
                   now);
      windower.FinalizeReady(now, absl::InfiniteDuration());
    }
    std::optional<int64_t> resume = windower.ResumeOffset();
    ASSERT_TRUE(resume.has_value());
    const int64_t newest = arrivals.back().first;
    const int64_t needed_from = arrivals[*resume].first;
    EXPECT_LE(newest - needed_from, options.window_ns + options.lateness_ns +
                                        options.max_launch_lead_ns)
        << job.job << " (" << SyntheticScenarioName(job.scenario)
        << ") still needs the batch at offset " << *resume << " of "
        << arrivals.size();
  }
}

}  // namespace
}  // namespace bubblewatch

// A batch of `host` with one kernel per start (each 100 us long).
DecodedBatch KernelsAt(const std::string& host,
                       const std::vector<int64_t>& starts) {
  DecodedBatch b;
  b.header.job = "job";
  b.header.host = host;
  NameInterner names(&b.trace);
  for (int64_t s : starts) {
    b.trace.gpu.push_back(GpuActivity{
        .start_ns = s, .end_ns = s + 100 * kUs, .name = names.Intern("k")});
  }
  return b;
}

WindowerOptions SmallWindows() {
  WindowerOptions options;
  options.window_ns = kWindow;
  options.lateness_ns = kLateness;
  return options;
}

TEST(JobWindower, OpenWindowsCountFromTheOldestKeptEventToTheNewest) {
  JobWindower windower("job", SmallWindows());
  EXPECT_EQ(windower.OpenWindowsWith(DecodedBatch{}), 0);
  // One kernel: one window.
  EXPECT_EQ(windower.OpenWindowsWith(KernelsAt("h", {0})), 1);
  windower.Add(KernelsAt("h", {0}), 0, false, absl::UnixEpoch());
  EXPECT_EQ(windower.OpenWindowsWith(DecodedBatch{}), 1);
  // A kernel in window 4 (ending inside it) makes windows 0..4 open; one
  // ending exactly at a window's end does not open the next.
  EXPECT_EQ(windower.OpenWindowsWith(KernelsAt("h", {4 * kWindow})), 5);
  EXPECT_EQ(windower.OpenWindowsWith(KernelsAt("h", {5 * kWindow - 100 * kUs})),
            5);
  // Far future: the count a limit would see, no overflow.
  EXPECT_EQ(windower.OpenWindowsWith(KernelsAt("h", {1'000'000 * kWindow})),
            1'000'001);
  // A far past event of a job with nothing final counts too.
  EXPECT_EQ(windower.OpenWindowsWith(KernelsAt("h", {-10 * kWindow})), 11);
  // The range is not moved by a batch it does not keep (the count stays).
  windower.Add(KernelsAt("h", {2 * kWindow}), 1, false, absl::UnixEpoch());
  EXPECT_EQ(windower.OpenWindowsWith(DecodedBatch{}), 3);
}

TEST(JobWindower, OpenWindowsStartAtTheFinalizedEdge) {
  JobWindower windower("job", SmallWindows());
  windower.Add(KernelsAt("h", {0, kWindow / 2, kWindow, 2 * kWindow,
                               3 * kWindow + kLateness}),
               0, false, absl::UnixEpoch());
  // Watermark 3 windows: [0, 3) close.
  ASSERT_EQ(windower.FinalizeReady(absl::UnixEpoch(), absl::Hours(1)).size(),
            3u);
  EXPECT_EQ(windower.finalized_through_ns(), 3 * kWindow);
  EXPECT_EQ(windower.OpenWindowsWith(DecodedBatch{}), 1);
  // Late events (before the edge) are not kept and open nothing.
  EXPECT_EQ(windower.OpenWindowsWith(KernelsAt("h", {0})), 1);
  EXPECT_EQ(windower.OpenWindowsWith(KernelsAt("h", {9 * kWindow})), 7);
}

TEST(JobWindower, AfterAnIdleCloseOpenWindowsStartWithTheNextEvents) {
  // The processor replaces an idle-closed job's windower by a fresh one that
  // knows only the finalized edge: a job back after a pause opens only the
  // windows of its new events, not the pause.
  JobWindower windower("job", SmallWindows());
  windower.RestoreFinalizedThrough(3 * kWindow);
  EXPECT_EQ(windower.OpenWindowsWith(KernelsAt("h", {1000 * kWindow})), 1);
}

TEST(JobWindower, HostSkewIsTheSpreadOfTheHostsNewestStarts) {
  JobWindower windower("job", SmallWindows());
  const absl::Time t0 = absl::UnixEpoch();
  windower.Add(KernelsAt("a", {0, 5 * kUs}), 0, false, t0);
  EXPECT_EQ(windower.HostSkewNs(t0, absl::Hours(1)), 0);  // One host.
  // Two ranks of one host share its clock.
  DecodedBatch rank1 = KernelsAt("a", {700 * kUs});
  rank1.header.rank = 1;
  windower.Add(rank1, 1, false, t0);
  EXPECT_EQ(windower.HostSkewNs(t0, absl::Hours(1)), 0);
  windower.Add(KernelsAt("b", {200 * kUs}), 2, false, t0);
  std::string ahead, behind;
  EXPECT_EQ(windower.HostSkewNs(t0, absl::Hours(1), &ahead, &behind),
            500 * kUs);
  EXPECT_EQ(ahead, "a");
  EXPECT_EQ(behind, "b");
  // A host silent for longer than host_idle does not count.
  EXPECT_EQ(windower.HostSkewNs(t0 + absl::Seconds(2), absl::Seconds(1)), 0);
  // Closed windows carry the skew measured when they closed.
  windower.Add(KernelsAt("b", {3 * kWindow}), 3, false, t0);
  windower.Add(KernelsAt("a", {2 * kWindow + kLateness}), 4, false, t0);
  rank1 = KernelsAt("a", {2 * kWindow + kLateness});
  rank1.header.rank = 1;
  windower.Add(rank1, 5, false, t0);
  std::vector<WindowSummary> closed =
      windower.FinalizeReady(t0, absl::Hours(1));
  ASSERT_EQ(closed.size(), 2u);  // The watermark is a's: [0, 2) close.
  EXPECT_EQ(windower.last_host_skew_ns(), kWindow - kLateness);
  for (const WindowSummary& w : closed) {
    EXPECT_EQ(w.host_skew_ns, kWindow - kLateness);
  }
}

// A processor restored from a snapshot (finalized edge) that replays from
// ResumeOffset() must make the same open-window decisions as one that never
// stopped: at every cut of a two-host stream, the restored windower counts
// the same open windows for the next batch (and for a far-future one).
TEST(JobWindower, OpenWindowsAreTheSameAfterARestoreAndReplay) {
  Stream s = MakeStream(17, 8);
  std::mt19937 rng(17);
  std::vector<DecodedBatch> h0 = MakeBatches(s.per_host[0], 0, rng);
  std::vector<DecodedBatch> h1 = MakeBatches(s.per_host[1], 1, rng);
  std::vector<const DecodedBatch*> order = Interleave(h0, h1);
  WindowerOptions options = SmallWindows();
  const absl::Time t0 = absl::UnixEpoch();
  JobWindower live("job", options);
  DecodedBatch far =
      KernelsAt("host0", {1'700'000'000'000'000'000 + 500 * kWindow});
  int compared = 0;
  for (size_t cut = 0; cut + 1 < order.size(); ++cut) {
    live.Add(*order[cut], static_cast<int64_t>(cut), false, t0);
    live.FinalizeReady(t0, absl::Hours(1));
    if (cut % 7 != 0 || !live.ResumeOffset()) continue;
    JobWindower restored("job", options);
    restored.RestoreFinalizedThrough(live.finalized_through_ns());
    for (size_t i = static_cast<size_t>(*live.ResumeOffset()); i <= cut; ++i) {
      restored.Add(*order[i], static_cast<int64_t>(i), /*replay=*/true, t0);
      restored.FinalizeReady(t0, absl::Hours(1));
    }
    ASSERT_EQ(restored.finalized_through_ns(), live.finalized_through_ns());
    EXPECT_EQ(restored.OpenWindowsWith(*order[cut + 1]),
              live.OpenWindowsWith(*order[cut + 1]))
        << "cut " << cut;
    EXPECT_EQ(restored.OpenWindowsWith(far), live.OpenWindowsWith(far))
        << "cut " << cut;
    EXPECT_GT(live.OpenWindowsWith(far), 400);
    ++compared;
  }
  EXPECT_GT(compared, 10);
}

// One kernel [start, end) in seconds, as a batch of its own.
DecodedBatch KernelSeconds(double start_s, double end_s) {
  DecodedBatch b;
  b.header.job = "job";
  b.header.host = "h";
  NameInterner names(&b.trace);
  b.trace.gpu.push_back(
      GpuActivity{.start_ns = static_cast<int64_t>(start_s * 1e9),
                  .end_ns = static_cast<int64_t>(end_s * 1e9),
                  .name = names.Intern("k")});
  return b;
}

// Feeds `batches` (offsets are their indexes) from `from` on, finalizing
// after each as the processor does, and returns the windows finalized.
std::vector<WindowSummary> Feed(JobWindower& w,
                                const std::vector<const DecodedBatch*>& batches,
                                size_t from, size_t to, bool replay) {
  std::vector<WindowSummary> out;
  for (size_t i = from; i < to; ++i) {
    w.Add(*batches[i], static_cast<int64_t>(i), replay, absl::UnixEpoch());
    for (WindowSummary& s : w.FinalizeReady(absl::UnixEpoch(), absl::Hours(1)))
      out.push_back(std::move(s));
  }
  return out;
}

// A restart of the windower after batch `cut`: a new windower restored from
// the uninterrupted one's finalized edge, replaying from its resume offset,
// then going on to the end and going quiet (the idle close too).
struct Restart {
  size_t cut = 0;
  size_t buffered_uninterrupted = 0;  // Events held at the cut.
  size_t buffered_restored = 0;       // The same, after the replay.
  std::vector<WindowSummary> got;     // Windows after the cut, restored.
  std::vector<WindowSummary> want;    // The same, uninterrupted.
};

// Runs `batches` uninterrupted, and restarted after every `stride`-th cut
// that has a resume offset, and hands each restart to `check`, which
// returns false to stop. A replay must finalize nothing. Returns the
// number of restarts checked.
int ForEachRestart(const std::vector<const DecodedBatch*>& batches,
                   const WindowerOptions& options, size_t stride,
                   absl::FunctionRef<bool(const Restart&)> check) {
  JobWindower live("job", options);
  std::vector<std::vector<WindowSummary>> live_after(batches.size());
  for (size_t i = 0; i < batches.size(); ++i) {
    live_after[i] = Feed(live, batches, i, i + 1, false);
  }
  const std::vector<WindowSummary> live_idle = live.FinalizeAll(kIdle);
  JobWindower before("job", options);
  int restarts = 0;
  for (size_t cut = 0; cut + 1 < batches.size(); ++cut) {
    Feed(before, batches, cut, cut + 1, false);
    if (cut % stride != 0 || !before.ResumeOffset()) continue;
    ++restarts;
    JobWindower restored("job", options);
    restored.RestoreFinalizedThrough(before.finalized_through_ns());
    EXPECT_TRUE(Feed(restored, batches,
                     static_cast<size_t>(*before.ResumeOffset()), cut + 1,
                     /*replay=*/true)
                    .empty());
    Restart r{.cut = cut,
              .buffered_uninterrupted = before.buffered_events(),
              .buffered_restored = restored.buffered_events()};
    r.got = Feed(restored, batches, cut + 1, batches.size(), false);
    for (size_t i = cut + 1; i < batches.size(); ++i) {
      for (const WindowSummary& w : live_after[i]) r.want.push_back(w);
    }
    for (const WindowSummary& w : restored.FinalizeAll(kIdle))
      r.got.push_back(w);
    r.want.insert(r.want.end(), live_idle.begin(), live_idle.end());
    if (!check(r)) break;
  }
  return restarts;
}

// Restarted after every cut, the windows after the cut have the same
// analysis as the uninterrupted run's, and the same ones close by the
// watermark (the rest at the final close, which both make alike).
void ExpectRestartsChangeNothing(
    const std::vector<const DecodedBatch*>& batches,
    const WindowerOptions& options) {
  ForEachRestart(batches, options, 1, [](const Restart& r) {
    EXPECT_EQ(r.got.size(), r.want.size()) << "cut " << r.cut;
    if (r.got.size() != r.want.size()) return false;
    for (size_t i = 0; i < r.got.size(); ++i) {
      SCOPED_TRACE("cut " + std::to_string(r.cut));
      ExpectSameWindow(r.got[i].window, r.want[i].window);
      EXPECT_EQ(ClosedByName(r.got[i].closed_by),
                ClosedByName(r.want[i].closed_by))
          << "window " << r.want[i].window.start_ns;
    }
    return true;
  });
}

// Regression: kernels [1, 9.95], [10.05, 15], [15, 16] s, then
// [25, 26] s. Uninterrupted, window 10 s has a span of 10 s and 4.05 s of
// bubble (the gap [9.95, 10.05) crosses its start). After a restart that
// replayed from before 10 s it had 9.95 / 4.0 s: the replay dropped the
// kernel that ends before the finalized edge, and with it the gap's start.
TEST(JobWindower, GapAcrossAWindowStartSurvivesARestart) {
  const std::vector<DecodedBatch> kernels = {
      KernelSeconds(1, 9.95), KernelSeconds(10.05, 15), KernelSeconds(15, 16),
      KernelSeconds(25, 26)};
  std::vector<const DecodedBatch*> batches;
  for (const DecodedBatch& b : kernels) batches.push_back(&b);
  WindowerOptions options;  // 10 s windows, 2 s lateness.
  // After [15, 16] arrives, window 0 is final and [1, 9.95] is still kept.
  JobWindower before("job", options);
  Feed(before, batches, 0, 3, false);
  ASSERT_EQ(before.finalized_through_ns(), 10'000'000'000);
  ASSERT_EQ(before.ResumeOffset(), 0);
  JobWindower restored("job", options);
  restored.RestoreFinalizedThrough(before.finalized_through_ns());
  Feed(restored, batches, 0, 3, /*replay=*/true);
  std::vector<WindowSummary> windows = Feed(restored, batches, 3, 4, false);
  ASSERT_EQ(windows.size(), 1u);
  EXPECT_EQ(windows[0].window.start_ns, 10'000'000'000);
  EXPECT_EQ(windows[0].window.job.span_ns, 10'000'000'000);
  EXPECT_EQ(windows[0].window.job.bubble_ns, 4'050'000'000);
  ExpectRestartsChangeNothing(batches, options);
}

// The boundary cases of a restart, each a cut at every batch: a kernel
// across a window start, a device whose last kernel lies in a closed window
// while another device runs on, a device idle for longer than the lateness
// across two window starts, and a late kernel that would start the next
// gap.
TEST(JobWindower, RestartsAtEveryBatchGiveTheUninterruptedWindows) {
  auto on_device = [](DecodedBatch b, int32_t device) {
    for (GpuActivity& a : b.trace.gpu) a.device = device;
    return b;
  };
  const std::vector<DecodedBatch> kernels = {
      KernelSeconds(1, 4), on_device(KernelSeconds(2, 3), 1),
      KernelSeconds(5, 12), KernelSeconds(12.5, 13), KernelSeconds(14, 19.9),
      KernelSeconds(20.1, 21),
      KernelSeconds(19.95, 19.98),  // Late once 20 s is final.
      KernelSeconds(22, 23), KernelSeconds(24, 25), KernelSeconds(29.5, 31),
      KernelSeconds(33, 34), KernelSeconds(36, 37), KernelSeconds(45, 46),
      // Device 2 idles longer than the lateness across 40 s and 50 s: its
      // kernel [41, 42] ends in a closed window while its next one starts
      // after that window closed, then after the next one closed.
      on_device(KernelSeconds(38, 42), 2), KernelSeconds(47, 48),
      KernelSeconds(52, 53), on_device(KernelSeconds(54, 55), 2),
      KernelSeconds(56, 57)};
  std::vector<const DecodedBatch*> batches;
  for (const DecodedBatch& b : kernels) batches.push_back(&b);
  ExpectRestartsChangeNothing(batches, WindowerOptions{});
}

// The same over random two-host streams, cut at every batch.
TEST(JobWindower, RestartsOnRandomStreamsGiveTheUninterruptedWindows) {
  for (uint32_t seed : {21u, 22u}) {
    Stream s = MakeStream(seed, 5);
    std::mt19937 rng(seed);
    std::vector<DecodedBatch> h0 = MakeBatches(s.per_host[0], 0, rng);
    std::vector<DecodedBatch> h1 = MakeBatches(s.per_host[1], 1, rng);
    std::vector<const DecodedBatch*> order = Interleave(h0, h1);
    ExpectRestartsChangeNothing(order, SmallWindows());
  }
}

// Like ExpectRestartsChangeNothing, cut after every `stride`-th batch, and
// every field of every window (attribution, event counts, ...) must be
// byte-identical to the uninterrupted run's: the restored windower buffers
// exactly what the uninterrupted one does.
void ExpectRestartsChangeNoByte(const std::vector<const DecodedBatch*>& batches,
                                const WindowerOptions& options, size_t stride,
                                const std::string& what) {
  const int restarts =
      ForEachRestart(batches, options, stride, [&](const Restart& r) {
        EXPECT_EQ(r.buffered_restored, r.buffered_uninterrupted)
            << what << " cut " << r.cut;
        EXPECT_EQ(r.got.size(), r.want.size()) << what << " cut " << r.cut;
        if (r.got.size() != r.want.size()) return false;
        for (size_t i = 0; i < r.got.size(); ++i) {
          if (EncodeWindowSummary(r.got[i]) == EncodeWindowSummary(r.want[i])) {
            continue;
          }
          SCOPED_TRACE(what + " cut " + std::to_string(r.cut));
          ExpectSameWindow(r.got[i].window, r.want[i].window);
          EXPECT_EQ(r.got[i].gpu_events, r.want[i].gpu_events);
          EXPECT_EQ(r.got[i].cpu_events, r.want[i].cpu_events);
          ADD_FAILURE() << "window " << r.want[i].window.start_ns << " differs";
          return false;  // One window is enough to show it.
        }
        return true;
      });
  EXPECT_GT(restarts, 0) << what;
}

// A launch call [9, 9.001] s whose kernel runs at [20.3, 21] s (the CPU
// more than max_launch_lead ahead), a sync call in the gap before it.
// Uninterrupted, the kernel arrived before the edge passed 20 s and kept
// its launch buffered (gap [19.99, 20.3) s: gpu_dependency); a processor
// restored at edge 20 s re-read the launch before its kernel and evicted it
// at once (gap: host_sync). The launch's fate must not depend on that.
TEST(JobWindower, ALaunchFarAheadOfItsKernelIsKeptAlikeAfterARestart) {
  auto at = [](double s) { return static_cast<int64_t>(s * 1e9); };
  auto cpu = [&](double start_s, double end_s, CorrelationId corr,
                 const char* name, CpuEventCategory category) {
    DecodedBatch b;
    b.header.job = "job";
    b.header.host = "h";
    NameInterner names(&b.trace);
    b.trace.cpu.push_back(CpuEvent{.start_ns = at(start_s),
                                   .end_ns = at(end_s),
                                   .correlation = corr,
                                   .thread = 1,
                                   .name = names.Intern(name),
                                   .category = category});
    return b;
  };
  DecodedBatch launched = KernelSeconds(20.3, 21);
  launched.trace.gpu[0].correlation = 7;
  const std::vector<DecodedBatch> in = {
      KernelSeconds(1, 8.9),
      cpu(9, 9.001, 7, "cudaLaunchKernel", CpuEventCategory::kCudaRuntime),
      KernelSeconds(15, 19.99),
      cpu(19.995, 20.2, kNoCorrelation, "cudaStreamSynchronize",
          CpuEventCategory::kCudaRuntime),
      launched,
      KernelSeconds(25, 26),
      KernelSeconds(33, 34),
      KernelSeconds(36, 37)};
  std::vector<const DecodedBatch*> batches;
  for (const DecodedBatch& b : in) batches.push_back(&b);
  ExpectRestartsChangeNoByte(batches, WindowerOptions{}, 1, "by hand");
}

// The synthetic scenarios as `produce --synthetic --replay-speed 1x` sends
// them (one GPU per job, batches cut by the 50 ms linger, CPU and GPU
// events merged by start), restarted at many cuts.
TEST(JobWindower, RestartsOnTheSyntheticScenariosChangeNoWindow) {
  for (SyntheticScenario scenario :
       {SyntheticScenario::kHealthy, SyntheticScenario::kSync,
        SyntheticScenario::kLaunch, SyntheticScenario::kAlloc,
        SyntheticScenario::kDataloader, SyntheticScenario::kMemcpy}) {
    SyntheticFleetOptions fleet_options;
    fleet_options.jobs = 1;
    fleet_options.gpus_per_job = 1;
    fleet_options.duration = absl::Seconds(40);
    fleet_options.events_per_second_per_gpu = 300;
    fleet_options.scenario = scenario;
    fleet_options.seed = 21;
    absl::StatusOr<std::vector<SyntheticJob>> fleet =
        GenerateSyntheticFleet(fleet_options);
    ASSERT_TRUE(fleet.ok()) << fleet.status();
    const SyntheticJob& job = fleet->front();
    ASSERT_EQ(job.ranks.size(), 1u);
    BatchingOptions batching;
    batching.max_span_ns = 50'000'000;
    BatchHeader identity;
    identity.job = "job";
    identity.host = job.ranks[0].host;
    identity.rank = 0;
    identity.world_size = 1;
    BatchedTrace stream(job.ranks[0], identity, batching);
    std::vector<DecodedBatch> decoded;
    for (size_t i = 0; i < stream.num_batches(); ++i) {
      absl::StatusOr<DecodedBatch> b = DecodeEventBatch(stream.Encode(i));
      ASSERT_TRUE(b.ok()) << b.status();
      decoded.push_back(*std::move(b));
    }
    std::vector<const DecodedBatch*> batches;
    for (const DecodedBatch& b : decoded) batches.push_back(&b);
    ExpectRestartsChangeNoByte(batches, WindowerOptions{}, 7,
                               std::string(SyntheticScenarioName(scenario)));
  }
}

}  // namespace
}  // namespace bubblewatch
