// ExecTimePool (ingest/watch/exec_time_pool.h): the generator's
// exec-time-only TP × DP job pooled from its logs gives every process's
// wait exactly (exec time minus the instance's shortest), a timeline
// without overlaps anchored near the dumps' wall time, the same placements
// however the logs are cut into chunks (a restart re-reads them whole), a
// process that stops reporting counted, and a directory missing processes
// held, not placed.
#include "ingest/watch/exec_time_pool.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "analysis/collectives.h"
#include "gtest/gtest.h"
#include "ingest/synthetic/synthetic_inspector_job.h"
#include "ingest/watch/inspector_tailer.h"

namespace bubblewatch {
namespace {

InspectorJobSpec ExecSpec() {
  InspectorJobSpec spec;
  spec.tp = 2;
  spec.dp = 2;
  spec.steps = 40;
  spec.plant = 1;
  spec.verbose = false;
  return spec;
}

int64_t Instances(const InspectorJobSpec& s) {
  return 1 + int64_t{s.dp} * s.steps * s.tp_per_step + int64_t{s.tp} * s.steps;
}

// Feeds `text` of log `name` in pieces cut after the given line counts, as
// the tailer does (context marker carried), advancing after each.
void FeedInPieces(ExecTimePool& pool, const std::string& name,
                  const std::string& text, int pieces,
                  std::vector<PlacedInstance>* out) {
  std::vector<size_t> ends;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n') ends.push_back(i + 1);
  }
  TailedLog state;
  size_t from = 0;
  for (int k = 1; k <= pieces; ++k) {
    const size_t to =
        k == pieces ? text.size() : ends[ends.size() * k / pieces];
    if (to <= from) continue;
    InspectorChunk chunk =
        BuildInspectorChunk(text.substr(from, to - from), name, state);
    pool.Add(name, chunk.log, chunk.pos_offset);
    state = chunk.after;
    from = to;
    for (PlacedInstance& p : pool.Advance()) out->push_back(std::move(p));
  }
}

using Placement = std::tuple<std::string, int64_t, int64_t,
                             std::vector<std::pair<std::string, int64_t>>>;
std::vector<Placement> Flatten(const std::vector<PlacedInstance>& placed) {
  std::vector<Placement> out;
  for (const PlacedInstance& p : placed) {
    std::vector<std::pair<std::string, int64_t>> m;
    for (const PlacedMember& x : p.members) m.push_back({x.log, x.start_ns});
    out.push_back({p.comm, p.sn, p.end_ns, m});
  }
  return out;
}

TEST(ExecTimePool, WholeJobGivesTheTruthsWaitsOnAnAnchoredTimeline) {
  const InspectorJobSpec spec = ExecSpec();
  const InspectorJobLogs gen = GenerateInspectorJob(spec);
  ExecTimePool pool;
  std::vector<PlacedInstance> placed;
  for (const InspectorJobFile& f : gen.files) {
    EXPECT_TRUE(pool.Advance().empty() || pool.Whole());
    pool.Add(f.name, ParseInspectorLog(f.text, f.name));
  }
  ASSERT_TRUE(pool.Whole());
  placed = pool.Advance();
  // The last dumps are below no later dump: they wait for the flush.
  EXPECT_LT(static_cast<int64_t>(placed.size()), Instances(spec));
  for (PlacedInstance& p : pool.Advance(-1, /*flush=*/true)) {
    placed.push_back(std::move(p));
  }
  ASSERT_EQ(static_cast<int64_t>(placed.size()), Instances(spec));
  EXPECT_EQ(pool.records_held(), 0);

  std::map<std::string, int64_t> wait_ns;
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> kernels;
  for (const PlacedInstance& p : placed) {
    int64_t shortest = INT64_MAX;
    for (const PlacedMember& m : p.members) {
      shortest = std::min(shortest, p.end_ns - m.start_ns);
    }
    for (const PlacedMember& m : p.members) {
      wait_ns[m.log] += p.end_ns - m.start_ns - shortest;
      kernels[m.log].push_back({m.start_ns, p.end_ns});
    }
  }
  for (size_t r = 0; r < gen.files.size(); ++r) {
    EXPECT_EQ(wait_ns[gen.files[r].name], gen.truth.wait_us[r] * 1000)
        << "process " << r;
  }
  // Each process's kernels never overlap, in placement order.
  const int64_t lo = spec.start_us * 1000 - int64_t{2'000'000'000};
  const int64_t hi = spec.start_us * 1000 + int64_t{2'000'000'000};
  for (const auto& [log, ks] : kernels) {
    for (size_t i = 1; i < ks.size(); ++i) {
      EXPECT_GE(ks[i].first, ks[i - 1].second) << log << " kernel " << i;
    }
    // Anchored at the dumps' wall time (the first dump's records spread
    // over the second before it; hosts' clocks apart by at most 41 ms).
    EXPECT_GE(ks.front().first, lo) << log;
    EXPECT_LE(ks.back().second, hi) << log;
  }
}

TEST(ExecTimePool, ALongJobStaysAnchoredWithExactWaits) {
  // Steps of about 0.9 s, mostly compute the timeline does not have: the
  // job-wide floor lifts it whenever it falls 2 s behind the dumps.
  InspectorJobSpec spec = ExecSpec();
  spec.steps = 20;
  spec.compute_us = 400'000;
  spec.dump_every_steps = 1;
  const InspectorJobLogs gen = GenerateInspectorJob(spec);
  ExecTimePool pool;
  for (const InspectorJobFile& f : gen.files) {
    pool.Add(f.name, ParseInspectorLog(f.text, f.name));
  }
  std::vector<PlacedInstance> placed = pool.Advance();
  for (PlacedInstance& p : pool.Advance(-1, true)) {
    placed.push_back(std::move(p));
  }
  ASSERT_EQ(static_cast<int64_t>(placed.size()), Instances(spec));
  std::map<std::string, int64_t> wait_ns;
  std::map<std::string, int64_t> last_end;
  for (const PlacedInstance& p : placed) {
    int64_t shortest = INT64_MAX;
    for (const PlacedMember& m : p.members) {
      shortest = std::min(shortest, p.end_ns - m.start_ns);
    }
    for (const PlacedMember& m : p.members) {
      wait_ns[m.log] += p.end_ns - m.start_ns - shortest;
      EXPECT_GE(m.start_ns, last_end[m.log]) << m.log;
      last_end[m.log] = p.end_ns;
    }
  }
  for (size_t r = 0; r < gen.files.size(); ++r) {
    EXPECT_EQ(wait_ns[gen.files[r].name], gen.truth.wait_us[r] * 1000);
  }
  // The job ran about 18 s of wall time; its timeline ends within the lag
  // (2 s) and a dump interval (1 s) of its last dump, not seconds earlier.
  const int64_t job_us = spec.steps * (2 * spec.compute_us + 5'000);
  for (const auto& [log, end] : last_end) {
    EXPECT_GE(end, (spec.start_us + job_us) * 1000 - int64_t{3'500'000'000})
        << log;
    EXPECT_LE(end, (spec.start_us + job_us) * 1000 + int64_t{1'000'000'000})
        << log;
  }
}

// The placed instances as the tailer sends them (one trace per process, a
// kernel and a collective record per instance, members inferred, clock
// domains the hosts), analyzed as a window is: every wait within 10 % of
// the truth, the planted process first with at least 90 % of the wait,
// with the job-wide floor lifting the timeline (long steps) or not.
TEST(ExecTimePool, PlacedTimelineNamesThePlantedStraggler) {
  for (int64_t compute_us : {int64_t{8'000}, int64_t{400'000}}) {
    InspectorJobSpec spec = ExecSpec();
    spec.compute_us = compute_us;
    spec.steps = compute_us > 100'000 ? 20 : 40;
    spec.dump_every_steps = compute_us > 100'000 ? 1 : 5;
    const InspectorJobLogs gen = GenerateInspectorJob(spec);
    ExecTimePool pool;
    for (const InspectorJobFile& f : gen.files) {
      pool.Add(f.name, ParseInspectorLog(f.text, f.name));
    }
    std::vector<PlacedInstance> placed = pool.Advance();
    for (PlacedInstance& p : pool.Advance(-1, true)) {
      placed.push_back(std::move(p));
    }
    std::vector<Trace> traces(gen.files.size());
    std::map<std::string, size_t> index;
    for (size_t r = 0; r < gen.files.size(); ++r) {
      index[gen.files[r].name] = r;
      traces[r].rank = static_cast<int32_t>(r);
      traces[r].world_size = static_cast<int32_t>(gen.files.size());
      traces[r].host = gen.truth.hosts[r];
    }
    for (const PlacedInstance& p : placed) {
      for (const PlacedMember& m : p.members) {
        Trace& t = traces[index[m.log]];
        NameInterner names(&t);
        GpuActivity a;
        a.start_ns = m.start_ns;
        a.end_ns = p.end_ns;
        a.name = names.Intern(absl::StrCat("nccl", p.coll));
        a.stream =
            static_cast<int32_t>(std::hash<std::string>()(p.comm) % 1000);
        t.gpu.push_back(a);
        CollectiveKernel k;
        k.start_ns = a.start_ns;
        k.end_ns = a.end_ns;
        k.stream = a.stream;
        k.kernel_name = a.name;
        k.collective = names.Intern(p.coll);
        k.process_group = names.Intern(p.comm);
        k.seq = p.sn;
        k.group_size = p.n_ranks;
        t.collectives.push_back(k);
      }
    }
    std::vector<RankInput> ranks;
    for (size_t r = 0; r < traces.size(); ++r) {
      RankInput in;
      in.trace = &traces[r];
      in.rank = static_cast<int32_t>(r);
      in.host = traces[r].host;
      in.clock_domain = absl::StrCat("host:", traces[r].host);
      ranks.push_back(in);
    }
    absl::StatusOr<CollectiveAnalysis> c = AnalyzeCollectives(ranks);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->unmatched, 0);
    EXPECT_EQ(c->used, c->matched);
    int64_t waited = 0;
    for (const RankCollectiveStats& r : c->ranks) {
      const int64_t truth_ns = gen.truth.wait_us[r.rank] * 1000;
      waited += r.comm_wait_ns;
      EXPECT_LE(std::abs(r.comm_wait_ns - truth_ns), 0.10 * truth_ns)
          << "rank " << r.rank << ", compute " << compute_us;
    }
    ASSERT_FALSE(c->stragglers.empty());
    const Straggler& first = c->stragglers.front();
    EXPECT_EQ(first.rank, spec.plant);
    EXPECT_GE(first.wait_caused_ns, 0.9 * waited)
        << "compute " << compute_us << ": caused " << first.wait_caused_ns
        << " of " << waited;
    EXPECT_GE(first.wait_caused_ns, 0.9 * gen.truth.planted_wait_us * 1000)
        << "compute " << compute_us;
    std::cerr << "compute " << compute_us << " us: rank " << first.rank
              << " caused " << first.wait_caused_ns << " ns of " << waited
              << " ns waited\n";
  }
}

TEST(ExecTimePool, ChunksCutAnywhereGiveTheSamePlacements) {
  const InspectorJobLogs gen = GenerateInspectorJob(ExecSpec());
  std::vector<PlacedInstance> whole;
  {
    ExecTimePool pool;
    for (const InspectorJobFile& f : gen.files) {
      pool.Add(f.name, ParseInspectorLog(f.text, f.name));
    }
    whole = pool.Advance();
    for (PlacedInstance& p : pool.Advance(-1, true)) {
      whole.push_back(std::move(p));
    }
  }
  for (int pieces : {3, 7, 29}) {
    ExecTimePool pool;
    std::vector<PlacedInstance> cut;
    // Logs fed one after another, each in pieces, with advances between.
    for (size_t i = 0; i < gen.files.size(); ++i) {
      const InspectorJobFile& f = gen.files[(i * 3) % gen.files.size()];
      FeedInPieces(pool, f.name, f.text, pieces + static_cast<int>(i), &cut);
    }
    for (PlacedInstance& p : pool.Advance(-1, true)) {
      cut.push_back(std::move(p));
    }
    EXPECT_EQ(Flatten(cut), Flatten(whole)) << pieces << " pieces";
  }
}

TEST(ExecTimePool, InterleavedGrowthPlacesOnlyFinalTimes) {
  // All logs grow together, a piece at a time: what is placed early is a
  // prefix of what the whole logs give.
  const InspectorJobLogs gen = GenerateInspectorJob(ExecSpec());
  std::vector<PlacedInstance> whole;
  {
    ExecTimePool pool;
    for (const InspectorJobFile& f : gen.files) {
      pool.Add(f.name, ParseInspectorLog(f.text, f.name));
    }
    whole = pool.Advance();
    for (PlacedInstance& p : pool.Advance(-1, true)) {
      whole.push_back(std::move(p));
    }
  }
  constexpr int kPieces = 9;
  ExecTimePool pool;
  std::vector<TailedLog> state(gen.files.size());
  std::vector<size_t> from(gen.files.size(), 0);
  std::vector<PlacedInstance> grown;
  for (int k = 1; k <= kPieces; ++k) {
    for (size_t i = 0; i < gen.files.size(); ++i) {
      const std::string& text = gen.files[i].text;
      size_t to = text.size() * k / kPieces;
      to = k == kPieces ? text.size() : text.rfind('\n', to) + 1;
      if (to <= from[i]) continue;
      InspectorChunk chunk = BuildInspectorChunk(
          text.substr(from[i], to - from[i]), gen.files[i].name, state[i]);
      pool.Add(gen.files[i].name, chunk.log, chunk.pos_offset);
      state[i] = chunk.after;
      from[i] = to;
    }
    for (PlacedInstance& p : pool.Advance()) grown.push_back(std::move(p));
  }
  // Placed while growing: all but the last dump's (below no later dump).
  EXPECT_GT(grown.size(), whole.size() * 3 / 4);
  for (PlacedInstance& p : pool.Advance(-1, true)) {
    grown.push_back(std::move(p));
  }
  EXPECT_EQ(Flatten(grown), Flatten(whole));
}

TEST(ExecTimePool, AProcessThatStopsIsCountedAndTheOthersGoOn) {
  const InspectorJobSpec spec = ExecSpec();
  const InspectorJobLogs gen = GenerateInspectorJob(spec);
  ExecTimePoolOptions o;
  o.expire = absl::Milliseconds(150);
  ExecTimePool pool(o);
  // Process 3 stops writing a third of the way through.
  for (size_t i = 0; i < gen.files.size(); ++i) {
    std::string text = gen.files[i].text;
    if (i == 3) text.resize(text.rfind('\n', text.size() / 3) + 1);
    pool.Add(gen.files[i].name, ParseInspectorLog(text, gen.files[i].name));
  }
  const std::vector<PlacedInstance> placed = pool.Advance();
  int64_t tp0 = 0;
  for (const PlacedInstance& p : placed) {
    if (p.comm == "0x7a000000000000") ++tp0;
  }
  // The TP group of processes 0 and 1 goes on without process 3: all but
  // its last dump (no later dump bounds it) placed.
  EXPECT_GT(tp0, spec.steps * spec.tp_per_step * 3 / 4);
  ASSERT_TRUE(pool.counts().contains(
      "exec-time only: instance never complete (a member's ring dropped it "
      "or its process stopped; not sent)"));
  EXPECT_GT(pool.counts().begin()->second, 0);
}

TEST(ExecTimePool, ADirectoryWithoutEveryProcessHoldsItsRecords) {
  const InspectorJobLogs gen = GenerateInspectorJob(ExecSpec());
  ExecTimePool pool;
  int64_t records = 0;
  for (size_t i = 0; i < 2; ++i) {
    InspectorLog log = ParseInspectorLog(gen.files[i].text, gen.files[i].name);
    records += log.coll_records;
    pool.Add(gen.files[i].name, log);
  }
  EXPECT_FALSE(pool.Whole());
  EXPECT_EQ(pool.WholeProgress(), std::make_pair(int64_t{2}, int64_t{4}));
  EXPECT_TRUE(pool.Advance(-1, /*flush=*/true).empty());
  EXPECT_EQ(pool.records_held(), records);
}

}  // namespace
}  // namespace bubblewatch
