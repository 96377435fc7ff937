// RankDigest (analysis/rank_digest.h): AnalyzeDigests over digests that
// went through their encoding gives what AnalyzeCollectives gives over the
// ranks' traces, field by field, on synthetic TP×DP×PP jobs and on real
// multi-rank traces; a digest's prefixes are the analyzer's own interval
// breakdowns; its bytes are a small share of the events' (the design of
// docs/architecture.md#one-job-across-processors measured); bad bytes are
// refused.
#include "analysis/rank_digest.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "analysis/collectives.h"
#include "gtest/gtest.h"
#include "ingest/batched_trace.h"
#include "ingest/synthetic/synthetic_parallel_job.h"
#include "ingest/trace_reader.h"
#include "tests/analysis/collective_fields.h"

namespace bubblewatch {
namespace {

constexpr int64_t kMs = 1'000'000;

Trace Read(const std::string& relative) {
  const std::string path =
      absl::StrCat(BUBBLEWATCH_TESTDATA_DIR, "/real/", relative);
  absl::StatusOr<Trace> t = ReadTraceFile(path, TraceReadOptions{});
  EXPECT_TRUE(t.ok()) << path << ": " << t.status();
  return t.ok() ? *std::move(t) : Trace{};
}

// The digests of `ranks` as a second stage would get them: each trace
// digested once, each digest encoded and decoded. `bytes` receives the sum
// of the encodings' sizes.
std::vector<RankDigest> DigestsThroughTheWire(absl::Span<const RankInput> ranks,
                                              int64_t* bytes) {
  *bytes = 0;
  std::vector<RankDigest> out;
  absl::flat_hash_map<const Trace*, std::vector<RankInput>> by_trace;
  std::vector<const Trace*> order;
  for (const RankInput& r : ranks) {
    auto [it, inserted] = by_trace.try_emplace(r.trace);
    if (inserted) order.push_back(r.trace);
    it->second.push_back(r);
  }
  for (const Trace* t : order) {
    absl::StatusOr<TraceDigests> d = DigestTrace(by_trace[t]);
    EXPECT_TRUE(d.ok()) << d.status();
    if (!d.ok()) continue;
    for (const RankDigest& digest : d->digests) {
      const std::string encoded = EncodeRankDigest(digest);
      *bytes += static_cast<int64_t>(encoded.size());
      absl::StatusOr<RankDigest> decoded = DecodeRankDigest(encoded);
      EXPECT_TRUE(decoded.ok()) << decoded.status();
      if (!decoded.ok()) continue;
      // Nothing lost: the decoded digest encodes to the same bytes.
      EXPECT_EQ(EncodeRankDigest(*decoded), encoded) << "rank " << digest.rank;
      out.push_back(*std::move(decoded));
    }
  }
  return out;
}

// AnalyzeDigests over the ranks' digests after the wire equals
// AnalyzeCollectives over the ranks, every field; returns the digests'
// bytes.
int64_t ExpectSameAnalysis(absl::Span<const RankInput> ranks,
                           CollectiveOptions options) {
  options.keep_instances = true;
  absl::StatusOr<CollectiveAnalysis> want = AnalyzeCollectives(ranks, options);
  EXPECT_TRUE(want.ok()) << want.status();
  int64_t bytes = 0;
  std::vector<RankDigest> digests = DigestsThroughTheWire(ranks, &bytes);
  // The second stage gets them in any order.
  std::reverse(digests.begin(), digests.end());
  absl::StatusOr<CollectiveAnalysis> got = AnalyzeDigests(digests, options);
  EXPECT_TRUE(got.ok()) << got.status();
  if (!want.ok() || !got.ok()) return bytes;
  // A test that compares nothing proves nothing.
  EXPECT_GT(want->used, 0);
  const std::vector<std::string> a = testing::CollectiveFields(*want);
  const std::vector<std::string> b = testing::CollectiveFields(*got);
  EXPECT_EQ(a.size(), b.size());
  int differences = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (a[i] != b[i] && ++differences <= 5) {
      ADD_FAILURE() << "AnalyzeCollectives: " << a[i]
                    << "\nAnalyzeDigests:    " << b[i];
    }
  }
  EXPECT_EQ(differences, 0);
  return bytes;
}

// The events of `trace` as a producer sends them (EventBatch messages).
int64_t EventBytes(const Trace& trace) {
  BatchHeader identity;
  identity.job = trace.job.empty() ? "job" : trace.job;
  identity.host = trace.host;
  identity.rank = trace.rank;
  identity.world_size = trace.world_size;
  BatchedTrace batched(trace, identity, BatchingOptions{});
  int64_t bytes = 0;
  for (size_t i = 0; i < batched.num_batches(); ++i) {
    bytes += static_cast<int64_t>(batched.Encode(i).size());
  }
  return bytes;
}

int64_t Events(absl::Span<const Trace> traces) {
  int64_t n = 0;
  for (const Trace& t : traces) n += t.gpu.size() + t.cpu.size();
  return n;
}

// A TP×DP×PP job whose send/recv kernels name the stage-spanning pipeline
// group, its hosts' clocks milliseconds apart and drifting, with roots of
// every cause planted.
ParallelJob PipelineJob(int tp, int dp, int pp, bool host_names, int steps) {
  ParallelJobOptions o;
  o.tp = tp;
  o.dp = dp;
  o.pp = pp;
  o.steps = steps;
  o.pipeline_groups = true;
  o.host_names = host_names;
  o.clock_offset_ns = {0, 3 * kMs, -2 * kMs, 7 * kMs};
  o.drift_ppm = {0, 4, -3, 2};
  const int world = tp * dp * pp;
  o.roots = {{1, 2, 2 * kMs, StragglerCause::kCompute},
             {world - 1, 3, 3 * kMs, StragglerCause::kDataLoading},
             {world / 2, 4, 1 * kMs, StragglerCause::kHostSync}};
  ParallelJob job = MakeParallelJob(o);
  // As the producer numbers a stream's pairs (ingest/batched_trace.h).
  for (Trace& t : job.ranks) NumberPointToPointPairs(t);
  return job;
}

std::vector<std::string> Files(size_t n) {
  std::vector<std::string> files;
  for (size_t i = 0; i < n; ++i) files.push_back(absl::StrCat("rank-", i));
  return files;
}

TEST(RankDigest, SyntheticPipelineJobsAnalyzeTheSameFromDigests) {
  for (int pp : {2, 4}) {
    for (bool host_names : {false, true}) {
      SCOPED_TRACE(absl::StrCat("pp ", pp, " host names ", host_names));
      const ParallelJob job = PipelineJob(2, 2, pp, host_names, 6);
      const std::vector<RankInput> ranks =
          RanksOfTraces(job.ranks, Files(job.ranks.size()));
      ExpectSameAnalysis(ranks, CollectiveOptions{});
      CollectiveOptions window;
      window.min_straggler_wait_ns = kWindowMinStragglerWaitNs;
      window.min_straggler_share = kWindowMinStragglerShare;
      window.max_what_if_stragglers = 1;
      ExpectSameAnalysis(ranks, window);
    }
  }
}

TEST(RankDigest, RealTracesAnalyzeTheSameFromDigests) {
  {
    SCOPED_TRACE("hta sampled ranks");
    const std::vector<Trace> traces = {Read("hta/sampled_rank-0.json.gz"),
                                       Read("hta/sampled_rank-1.json.gz")};
    ExpectSameAnalysis(RanksOfTraces(traces, Files(2)), CollectiveOptions{});
  }
  for (const char* file :
       {"nsys/mfu_2gpu_before.sqlite", "nsys/mfu_2gpu_after.sqlite"}) {
    SCOPED_TRACE(file);
    // One export, two GPUs: two ranks of one trace, analyzed once.
    const std::vector<Trace> traces = {Read(file)};
    const std::vector<RankInput> ranks = RanksOfTraces(traces, {file});
    ASSERT_EQ(ranks.size(), 2u);
    ExpectSameAnalysis(ranks, CollectiveOptions{});
    CollectiveOptions strict;
    strict.sync_floor_ns = 5'000;
    ExpectSameAnalysis(ranks, strict);
  }
}

// The premise: a rank's time between two of its collective kernels, as the
// analyzer breaks it down, is the difference of the digest's prefixes.
TEST(RankDigest, PrefixDifferencesAreTheAnalyzersBreakdowns) {
  std::mt19937_64 rng(7);
  for (const char* file :
       {"hta/sampled_rank-0.json.gz", "nsys/mfu_2gpu_before.sqlite"}) {
    SCOPED_TRACE(file);
    for (bool without_kernels : {false, true}) {
      SCOPED_TRACE(without_kernels ? "some records without their kernel" : "");
      std::vector<Trace> traces = {Read(file)};
      Trace& trace = traces[0];
      if (without_kernels) {
        // A record whose kernel is missing leaves its span unbusy: the digest
        // must ask the analyzer about it too.
        int64_t dropped = 0;
        std::erase_if(trace.gpu, [&](const GpuActivity& g) {
          const bool drop = g.kind == GpuActivityKind::kKernel &&
                            IsCollectiveKernelName(trace.Name(g.name)) &&
                            dropped++ % 3 == 0;
          return drop;
        });
        ASSERT_GT(dropped, 0);
      }
      const std::vector<RankInput> ranks = RanksOfTraces(traces, {file});
      absl::StatusOr<TraceDigests> d = DigestTrace(ranks);
      ASSERT_TRUE(d.ok()) << d.status();
      for (const RankDigest& digest : d->digests) {
        const std::vector<DigestKernel>& k = digest.kernels;
        ASSERT_GE(k.size(), 2u);
        std::vector<DeviceInterval> queries;
        std::vector<std::pair<size_t, size_t>> pairs;
        std::uniform_int_distribution<size_t> pick(0, k.size() - 1);
        for (int i = 0; i < 200; ++i) {
          size_t a = pick(rng), b = pick(rng);
          if (k[b].start_ns <= k[a].end_ns) continue;
          queries.push_back({digest.device, k[a].end_ns, k[b].start_ns});
          pairs.emplace_back(a, b);
        }
        ASSERT_GT(queries.size(), 20u);
        AnalyzerOptions options;
        options.breakdown_intervals = queries;
        absl::StatusOr<Analysis> a = AnalyzeTrace(trace, options);
        ASSERT_TRUE(a.ok()) << a.status();
        for (size_t q = 0; q < queries.size(); ++q) {
          const LatenessBreakdown& from = digest.times[pairs[q].first].at_end;
          const LatenessBreakdown& to = digest.times[pairs[q].second].at_start;
          const IntervalBreakdown& want = a->breakdowns[q];
          EXPECT_EQ(
              (to.compute_ns - from.compute_ns) + (to.comm_ns - from.comm_ns),
              want.busy_ns);
          for (int c = 0; c < kNumBubbleCauses; ++c) {
            EXPECT_EQ(to.bubble[c] - from.bubble[c], want.bubble[c]);
          }
        }
      }
    }
  }
}

// docs/architecture.md#arithmetic: the cross-rank stage's input against
// the events' bytes, per job (the whole trace as one window).
TEST(RankDigest, DigestsAreASmallShareOfTheEventBytes) {
  struct Job {
    std::string name;
    std::vector<Trace> traces;
    double at_most;  // The share the design allows.
  };
  std::vector<Job> jobs;
  jobs.push_back(
      {"hta/sampled_rank-0+1",
       {Read("hta/sampled_rank-0.json.gz"), Read("hta/sampled_rank-1.json.gz")},
       0.01});
  jobs.push_back(
      {"nsys/mfu_2gpu_before", {Read("nsys/mfu_2gpu_before.sqlite")}, 0.01});
  jobs.push_back(
      {"nsys/mfu_2gpu_after", {Read("nsys/mfu_2gpu_after.sqlite")}, 0.01});
  // 16 ranks, 4 stages: the generator writes few events per collective
  // (12 compute kernels and up to 6 collectives a step), far denser in
  // collectives than real traces, so its share is larger; bounded loosely.
  jobs.push_back(
      {"synthetic tp2 dp2 pp4", PipelineJob(2, 2, 4, true, 20).ranks, 0.10});
  for (const Job& job : jobs) {
    SCOPED_TRACE(job.name);
    int64_t event_bytes = 0;
    for (const Trace& t : job.traces) event_bytes += EventBytes(t);
    const std::vector<RankInput> ranks =
        RanksOfTraces(job.traces, Files(job.traces.size()));
    int64_t digest_bytes = 0;
    const std::vector<RankDigest> digests =
        DigestsThroughTheWire(ranks, &digest_bytes);
    int64_t kernels = 0;
    // What a digest costs without its kernels: the rank's names, file,
    // host and device figures, once per digest.
    int64_t fixed_bytes = 0;
    int64_t compute_intervals = 0;
    for (const RankDigest& d : digests) {
      kernels += d.kernels.size();
      compute_intervals += d.compute_in_kernels.size();
      RankDigest bare = d;
      bare.kernels.clear();
      bare.times.clear();
      bare.compute_in_kernels = IntervalSet();
      fixed_bytes += static_cast<int64_t>(EncodeRankDigest(bare).size());
    }
    const int64_t events = Events(job.traces);
    ASSERT_GT(event_bytes, 0);
    ASSERT_GT(kernels, 0);
    const double share = static_cast<double>(digest_bytes) / event_bytes;
    std::printf(
        "%s: %lld ranks, %lld events in %lld event bytes (%.1f B/event), "
        "%lld collective kernels (%.0f events each), digests %lld bytes "
        "(%.1f B/kernel; without kernels %lld B/digest; %lld compute "
        "intervals inside kernels): %.3f %% of the event bytes\n",
        job.name.c_str(), static_cast<long long>(digests.size()),
        static_cast<long long>(events), static_cast<long long>(event_bytes),
        static_cast<double>(event_bytes) / events,
        static_cast<long long>(kernels), static_cast<double>(events) / kernels,
        static_cast<long long>(digest_bytes),
        static_cast<double>(digest_bytes) / kernels,
        static_cast<long long>(fixed_bytes /
                               std::max<size_t>(1, digests.size())),
        static_cast<long long>(compute_intervals), 100 * share);
    EXPECT_LE(share, job.at_most);
  }
}

TEST(RankDigest, BadBytesAreRefused) {
  const std::vector<Trace> traces = {Read("nsys/mfu_2gpu_before.sqlite")};
  absl::StatusOr<TraceDigests> d =
      DigestTrace(RanksOfTraces(traces, {"mfu_2gpu_before"}));
  ASSERT_TRUE(d.ok()) << d.status();
  const std::string bytes = EncodeRankDigest(d->digests.front());
  ASSERT_TRUE(DecodeRankDigest(bytes).ok());
  // Every truncation, a byte more, another version.
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_EQ(DecodeRankDigest(bytes.substr(0, n)).status().code(),
              absl::StatusCode::kInvalidArgument)
        << n;
  }
  EXPECT_FALSE(DecodeRankDigest(bytes + '\0').ok());
  std::string other = bytes;
  other[0] = 9;
  EXPECT_FALSE(DecodeRankDigest(other).ok());
  // A kernel naming a name the digest does not hold.
  RankDigest bad = d->digests.front();
  ASSERT_FALSE(bad.kernels.empty());
  bad.kernels[0].process_group = static_cast<int32_t>(bad.names.size());
  EXPECT_FALSE(DecodeRankDigest(EncodeRankDigest(bad)).ok());
}

TEST(RankDigest, DigestTraceTakesTheRanksOfOneTrace) {
  const Trace a = Read("hta/sampled_rank-0.json.gz");
  const Trace b = Read("hta/sampled_rank-1.json.gz");
  RankInput x{.trace = &a, .device = 0, .rank = 0};
  RankInput y{.trace = &b, .device = 0, .rank = 1};
  EXPECT_FALSE(DigestTrace({x, y}).ok());
  EXPECT_FALSE(DigestTrace({}).ok());
  RankInput none{.trace = nullptr, .rank = 2};
  EXPECT_FALSE(DigestRank(none).ok());
  absl::StatusOr<RankDigest> one = DigestRank(x);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->rank, 0);
  EXPECT_FALSE(one->kernels.empty());
  // AnalyzeDigests checks the ranks as AnalyzeCollectives does.
  EXPECT_FALSE(AnalyzeDigests({}).ok());
  EXPECT_FALSE(AnalyzeDigests({*one, *one}).ok());
}

}  // namespace
}  // namespace bubblewatch
