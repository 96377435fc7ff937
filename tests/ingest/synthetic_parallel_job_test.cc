// The TP×DP×PP job generator (ingest/synthetic/synthetic_parallel_job.h):
// process groups as PyTorch writes them, Seq per group, the causal
// simulation and its truth, clocks, and the Kineto writer's round trip
// through the reader.
#include "ingest/synthetic/synthetic_parallel_job.h"

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ingest/chrome/chrome_trace_writer.h"
#include "ingest/trace_reader.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace {

constexpr int64_t kMs = 1'000'000;

ParallelJobOptions FourByTwo() {
  ParallelJobOptions o;
  o.tp = 4;
  o.dp = 2;
  o.steps = 6;
  return o;
}

const ParallelInstanceTruth* Find(const ParallelJobTruth& truth,
                                  absl::string_view collective, int step,
                                  int member) {
  for (const ParallelInstanceTruth& i : truth.instances) {
    if (i.collective != collective || i.step != step) continue;
    for (int32_t m : i.members) {
      if (m == member) return &i;
    }
  }
  return nullptr;
}

TEST(ParallelJob, ProcessGroupsAreThoseOfPyTorch) {
  ParallelJob job = MakeParallelJob(FourByTwo());
  ASSERT_EQ(job.ranks.size(), 8u);
  // Rank 5: host 1, tensor index 1: TP group [4..7], DP group [1, 5].
  const Trace& t = job.ranks[5];
  EXPECT_EQ(t.rank, 5);
  EXPECT_EQ(t.world_size, 8);
  EXPECT_TRUE(t.host.empty());  // No host names by default.
  std::map<std::string, std::tuple<std::string, std::string, int>> groups;
  for (const CollectiveKernel& c : t.collectives) {
    EXPECT_EQ(c.device, 1);
    groups[std::string(t.Name(c.process_group))] = {
        std::string(t.Name(c.group_ranks)), std::string(t.Name(c.collective)),
        c.group_size};
    EXPECT_TRUE(IsCollectiveKernelName(t.Name(c.kernel_name)));
  }
  ASSERT_EQ(groups.size(), 2u);
  // TP groups "1", "2" (hosts 0, 1), then DP groups "3" .. "6".
  EXPECT_EQ(groups["2"], std::make_tuple(std::string("[4, 5, 6, 7]"),
                                         std::string("_allgather_base"), 4));
  EXPECT_EQ(groups["4"], std::make_tuple(std::string("[1, 5]"),
                                         std::string("allreduce"), 2));
  std::set<std::string> kernels;
  for (const CollectiveKernel& c : t.collectives) {
    kernels.insert(std::string(t.Name(c.kernel_name)));
  }
  EXPECT_EQ(kernels,
            (std::set<std::string>{
                "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, "
                "ncclWork*)",
                "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, "
                "unsigned long, ncclWork*)"}));
}

TEST(ParallelJob, SeqCountsEachGroupFromOneOnEveryRank) {
  ParallelJobOptions o = FourByTwo();
  o.pp = 3;
  ParallelJob job = MakeParallelJob(o);
  ASSERT_EQ(job.ranks.size(), 24u);
  for (const Trace& t : job.ranks) {
    std::map<std::string, int64_t> last;
    std::vector<const CollectiveKernel*> sorted;
    for (const CollectiveKernel& c : t.collectives) sorted.push_back(&c);
    std::sort(sorted.begin(), sorted.end(),
              [](auto* a, auto* b) { return a->start_ns < b->start_ns; });
    for (const CollectiveKernel* c : sorted) {
      int64_t& prev = last[std::string(t.Name(c->process_group))];
      EXPECT_EQ(c->seq, prev + 1) << "rank " << t.rank;
      prev = c->seq;
    }
  }
  // Send/recv between consecutive stages only, in 2-rank groups: a middle
  // stage rank has a group with the stage before and one with the next.
  const Trace& mid = job.ranks[9];  // t=1, d=0, stage 1.
  std::set<std::string> pairs;
  for (const CollectiveKernel& c : mid.collectives) {
    if (c.group_size == 2 && mid.Name(c.collective) != "allreduce") {
      pairs.insert(std::string(mid.Name(c.group_ranks)));
    }
  }
  EXPECT_EQ(pairs, (std::set<std::string>{"[1, 9]", "[9, 17]"}));
}

TEST(ParallelJob, CollectivesEndTogetherAtTheLastArrivalPlusTransfer) {
  ParallelJobOptions o = FourByTwo();
  o.pp = 2;
  o.max_drift_ppm = 20;
  ParallelJob job = MakeParallelJob(o);
  // Every instance's kernels, read back to true time, are its truth's.
  std::map<std::pair<std::string, int64_t>, int> seen;
  for (const Trace& t : job.ranks) {
    for (const CollectiveKernel& c : t.collectives) {
      const std::string group(t.Name(c.process_group));
      const ParallelInstanceTruth* inst = nullptr;
      for (const ParallelInstanceTruth& i : job.truth.instances) {
        if (i.group == group && i.seq == c.seq) inst = &i;
      }
      ASSERT_NE(inst, nullptr);
      const size_t m =
          std::find(inst->members.begin(), inst->members.end(), t.rank) -
          inst->members.begin();
      ASSERT_LT(m, inst->members.size());
      EXPECT_EQ(c.start_ns, inst->start_ns[m] + job.truth.ClockOffsetAt(
                                                    t.rank, inst->start_ns[m]));
      EXPECT_EQ(c.end_ns,
                inst->end_ns + job.truth.ClockOffsetAt(t.rank, inst->end_ns));
      ++seen[{group, c.seq}];
    }
  }
  EXPECT_EQ(seen.size(), job.truth.instances.size());
  for (const ParallelInstanceTruth& i : job.truth.instances) {
    EXPECT_EQ(i.arrival_ns,
              *std::max_element(i.start_ns.begin(), i.start_ns.end()));
    const int64_t transfer = i.collective == "allreduce"         ? 600'000
                             : i.collective == "_allgather_base" ? 150'000
                                                                 : 80'000;
    EXPECT_EQ(i.end_ns, i.arrival_ns + transfer);
  }
}

TEST(ParallelJob, AComputeRootDelaysItsHostThenEveryDataParallelPeer) {
  ParallelJobOptions o = FourByTwo();
  o.roots = {{5, 3, 2 * kMs, StragglerCause::kCompute}};
  ParallelJob job = MakeParallelJob(o);
  const ParallelJobTruth& truth = job.truth;
  // The TP all-gather of host 1 in step 3: rank 5 is late, and the root.
  const ParallelInstanceTruth* gather = Find(truth, "_allgather_base", 3, 5);
  ASSERT_NE(gather, nullptr);
  EXPECT_EQ(gather->late_rank, 5);
  EXPECT_EQ(gather->root_rank, 5);
  EXPECT_GE(gather->wait_ns, 3 * (2 * kMs - 50'000));
  // Host 1's ranks leave it together, late: each DP all-reduce of step 3
  // waits for its host-1 member, whose lateness started at rank 5.
  for (int t = 0; t < 4; ++t) {
    const ParallelInstanceTruth* reduce = Find(truth, "allreduce", 3, t);
    ASSERT_NE(reduce, nullptr);
    EXPECT_EQ(reduce->late_rank, 4 + t);
    EXPECT_EQ(reduce->root_rank, 5);
    EXPECT_EQ(reduce->root, 0);
  }
  int rooted = 0;
  for (const ParallelInstanceTruth& i : truth.instances) rooted += i.root >= 0;
  EXPECT_EQ(rooted, 5);  // Nothing else: host 0's all-gather was on time.
  // Host 0's ranks waited for it; rank 5 waited for no one in step 3.
  EXPECT_GT(truth.ranks[0].comm_wait_ns, 2 * kMs - 50'000);
  EXPECT_LT(truth.ranks[5].comm_wait_ns, truth.ranks[0].comm_wait_ns);
  ASSERT_EQ(truth.roots.size(), 1u);
  EXPECT_GT(truth.roots[0].saved_ns, 0);
  EXPECT_LE(truth.roots[0].saved_ns, 2 * kMs);
  EXPECT_GE(truth.roots[0].saved_ns, 2 * kMs - 50'000);
}

TEST(ParallelJob, WithoutJitterAComputeRootSavesExactlyItsSize) {
  ParallelJobOptions o = FourByTwo();
  o.pp = 2;
  o.kernel_jitter_ns = 0;
  o.loader_jitter_ns = 0;
  o.roots = {{13, 2, 1'500'000, StragglerCause::kCompute}};
  ParallelJob job = MakeParallelJob(o);
  ASSERT_EQ(job.truth.roots.size(), 1u);
  EXPECT_EQ(job.truth.roots[0].saved_ns, 1'500'000);
  EXPECT_EQ(job.truth.job_ns - job.truth.job_ns_without_stragglers, 1'500'000);
  EXPECT_EQ(job.truth.end_ns - o.start_time_ns, job.truth.job_ns);
}

TEST(ParallelJob, DataLoadingAndHostSyncRootsAreFoundLikeCompute) {
  for (StragglerCause cause :
       {StragglerCause::kDataLoading, StragglerCause::kHostSync}) {
    ParallelJobOptions o = FourByTwo();
    o.roots = {{2, 4, 3 * kMs, cause}};
    ParallelJob job = MakeParallelJob(o);
    const ParallelInstanceTruth* gather =
        Find(job.truth, "_allgather_base", 4, 2);
    ASSERT_NE(gather, nullptr);
    EXPECT_EQ(gather->root_rank, 2) << StragglerCauseName(cause);
    EXPECT_EQ(gather->late_rank, 2);
    EXPECT_GE(job.truth.roots[0].saved_ns, 3 * kMs - 100'000);
  }
  // The loader is a DataLoader event on the launching thread.
  ParallelJobOptions o = FourByTwo();
  o.roots = {{2, 4, 3 * kMs, StragglerCause::kDataLoading}};
  ParallelJob job = MakeParallelJob(o);
  int64_t longest = 0;
  for (const CpuEvent& e : job.ranks[2].cpu) {
    if (job.ranks[2].Name(e.name).find("DataLoader") !=
        absl::string_view::npos) {
      longest = std::max(longest, e.end_ns - e.start_ns);
    }
  }
  EXPECT_GE(longest, 3 * kMs);
}

// A later stage's DataLoader runs while the first stage computes the
// activations it waits for: a delay shorter than that slack delays nothing.
TEST(ParallelJob, ARootInThePipelinesSlackSavesNothing) {
  ParallelJobOptions o = FourByTwo();
  o.pp = 2;
  o.roots = {{12, 3, 1 * kMs, StragglerCause::kDataLoading}};
  ParallelJob job = MakeParallelJob(o);
  EXPECT_EQ(job.truth.roots[0].saved_ns, 0);
  EXPECT_EQ(job.truth.job_ns, job.truth.job_ns_without_stragglers);
  for (const ParallelInstanceTruth& i : job.truth.instances) {
    EXPECT_EQ(i.root, -1) << i.group << " seq " << i.seq;
  }
}

TEST(ParallelJob, TwoRootsInOneStepNameTheLongerOne) {
  ParallelJobOptions o = FourByTwo();
  o.roots = {{1, 2, 1 * kMs, StragglerCause::kCompute},
             {6, 2, 3 * kMs, StragglerCause::kCompute}};
  ParallelJob job = MakeParallelJob(o);
  EXPECT_EQ(Find(job.truth, "_allgather_base", 2, 1)->root_rank, 1);
  EXPECT_EQ(Find(job.truth, "_allgather_base", 2, 6)->root_rank, 6);
  EXPECT_EQ(Find(job.truth, "allreduce", 2, 0)->root_rank, 6);
  // Without rank 1's root the job is no shorter: rank 6's hides it.
  EXPECT_LT(job.truth.roots[0].saved_ns, 50'000);
  EXPECT_GT(job.truth.roots[1].saved_ns, 2 * kMs - 50'000);
  EXPECT_GT(job.truth.job_ns - job.truth.job_ns_without_stragglers,
            3 * kMs - 50'000);
}

TEST(ParallelJob, ClocksArePerHostWithOffsetAndDrift) {
  ParallelJobOptions o = FourByTwo();
  o.clock_offset_ns = {0, 3 * kMs};
  o.drift_ppm = {0, 10};
  o.host_names = true;
  ParallelJob job = MakeParallelJob(o);
  EXPECT_EQ(job.ranks[4].host, "host-1");
  EXPECT_EQ(job.truth.ClockOffsetAt(0, o.start_time_ns + 1'000 * kMs), 0);
  EXPECT_EQ(job.truth.ClockOffsetAt(7, o.start_time_ns), 3 * kMs);
  // 10 ppm over 1 s: 10 us.
  EXPECT_EQ(job.truth.ClockOffsetAt(7, o.start_time_ns + 1'000 * kMs),
            3 * kMs + 10'000);
  // Random offsets stay in range and differ between hosts.
  ParallelJobOptions r = FourByTwo();
  r.dp = 4;
  ParallelJob random = MakeParallelJob(r);
  std::set<int64_t> offsets;
  for (int64_t off : random.truth.host_offset_ns) {
    EXPECT_LE(std::abs(off), 5 * kMs);
    offsets.insert(off);
  }
  EXPECT_EQ(offsets.size(), 4u);
}

TEST(ParallelJob, SameSeedSameJob) {
  ParallelJobOptions o = FourByTwo();
  o.roots = {{3, 1, kMs, StragglerCause::kCompute}};
  const ParallelJob a = MakeParallelJob(o);
  const ParallelJob b = MakeParallelJob(o);
  EXPECT_EQ(ChromeTraceJson(a.ranks[3]), ChromeTraceJson(b.ranks[3]));
  EXPECT_EQ(ParallelJobTruthJson(a.truth), ParallelJobTruthJson(b.truth));
}

// A root that lasts (PlantedRoot::steps) is that root in each of its
// steps: the same events as one single-step root per step, and one
// counterfactual, so its saved time is all of theirs together.
TEST(ParallelJob, ARootOverSeveralStepsIsOneRootPerStep) {
  ParallelJobOptions lasting = FourByTwo();
  lasting.roots = {{.rank = 5,
                    .step = 2,
                    .extra_ns = kMs,
                    .cause = StragglerCause::kDataLoading,
                    .steps = 3}};
  ParallelJobOptions single = FourByTwo();
  for (int step = 2; step < 5; ++step) {
    single.roots.push_back({5, step, kMs, StragglerCause::kDataLoading});
  }
  const ParallelJob a = MakeParallelJob(lasting);
  const ParallelJob b = MakeParallelJob(single);
  ASSERT_EQ(a.ranks.size(), b.ranks.size());
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    EXPECT_EQ(ChromeTraceJson(a.ranks[r]), ChromeTraceJson(b.ranks[r]))
        << "rank " << r;
  }
  ASSERT_EQ(a.truth.roots.size(), 1u);
  EXPECT_EQ(a.truth.roots[0].saved_ns,
            a.truth.job_ns - a.truth.job_ns_without_stragglers);
  EXPECT_GE(a.truth.roots[0].saved_ns, 3 * kMs * 9 / 10);
  int rooted = 0;
  for (const ParallelInstanceTruth& i : a.truth.instances) {
    if (i.root_rank == 5) {
      ++rooted;
      EXPECT_GE(i.step, 2);
      EXPECT_LT(i.step, 5);
    }
  }
  EXPECT_GE(rooted, 3);  // Its TP all-gather in each late step at least.
}

// Events with their names resolved, in a canonical order.
struct Flat {
  std::vector<std::tuple<int64_t, int64_t, uint64_t, uint64_t, std::string,
                         int32_t, int32_t, int>>
      gpu;
  std::vector<
      std::tuple<int64_t, int64_t, uint64_t, uint64_t, std::string, int>>
      cpu;
  std::vector<std::tuple<int64_t, int64_t, int32_t, int32_t, std::string,
                         std::string, std::string, std::string, std::string,
                         int64_t, int64_t, int64_t, int32_t>>
      collectives;
};

Flat Flatten(const Trace& t) {
  auto name = [&](NameId id) {
    return id == kNoName ? std::string("<none>") : std::string(t.Name(id));
  };
  Flat f;
  for (const GpuActivity& a : t.gpu) {
    f.gpu.emplace_back(a.start_ns, a.end_ns, a.correlation, a.bytes,
                       name(a.name), a.device, a.stream,
                       static_cast<int>(a.kind));
  }
  for (const CpuEvent& e : t.cpu) {
    f.cpu.emplace_back(e.start_ns, e.end_ns, e.correlation, e.thread,
                       name(e.name), static_cast<int>(e.category));
  }
  for (const CollectiveKernel& c : t.collectives) {
    f.collectives.emplace_back(
        c.start_ns, c.end_ns, c.device, c.stream, name(c.kernel_name),
        name(c.collective), name(c.process_group), name(c.group_ranks),
        name(c.dtype), c.seq, c.in_elements, c.out_elements, c.group_size);
  }
  std::sort(f.gpu.begin(), f.gpu.end());
  std::sort(f.cpu.begin(), f.cpu.end());
  std::sort(f.collectives.begin(), f.collectives.end());
  return f;
}

TEST(ChromeTraceWriter, RanksReadBackIdentically) {
  ParallelJobOptions o = FourByTwo();
  o.pp = 2;
  o.host_names = true;
  o.world_size = 64;
  o.roots = {{3, 1, kMs, StragglerCause::kHostSync}};
  ParallelJob job = MakeParallelJob(o);
  testing::TempDir dir;
  for (const char* ext : {".json", ".json.gz"}) {
    for (int r : {0, 9, 15}) {
      const std::string path = dir.Sub(absl::StrCat("rank-", r, ext));
      ASSERT_TRUE(WriteChromeTraceFile(job.ranks[r], path).ok());
      absl::StatusOr<Trace> read = ReadTraceFile(path);
      ASSERT_TRUE(read.ok()) << read.status();
      EXPECT_TRUE(read->skipped.empty()) << path;
      EXPECT_EQ(read->source_format, "chrome");
      EXPECT_EQ(read->rank, r);
      EXPECT_EQ(read->world_size, 64);
      EXPECT_EQ(read->host, job.ranks[r].host);
      EXPECT_EQ(read->job, job.ranks[r].job);
      const Flat want = Flatten(job.ranks[r]);
      const Flat got = Flatten(*read);
      EXPECT_EQ(got.gpu, want.gpu) << path;
      EXPECT_EQ(got.cpu, want.cpu) << path;
      EXPECT_EQ(got.collectives, want.collectives) << path;
    }
  }
}

TEST(ChromeTraceWriter, AbsentFieldsStayAbsent) {
  Trace t;
  NameInterner names(&t);
  GpuActivity k;
  k.start_ns = -1'500;  // Before the epoch.
  k.end_ns = 2'000'001;
  k.name = names.Intern("ncclKernel_AllReduce_RING_LL_Sum_float(x)");
  k.device = 2;
  k.stream = 40;
  t.gpu.push_back(k);
  CollectiveKernel c;
  c.start_ns = k.start_ns;
  c.end_ns = k.end_ns;
  c.device = 2;
  c.stream = 40;
  c.kernel_name = k.name;
  c.process_group = names.Intern("0");
  t.collectives.push_back(c);
  GpuActivity copy;
  copy.start_ns = 10;
  copy.end_ns = 20;
  copy.kind = GpuActivityKind::kMemcpy;
  copy.bytes = 4096;
  copy.name = names.Intern("Memcpy DtoH (Device -> Pageable)");
  copy.pageable = true;
  t.gpu.push_back(copy);
  testing::TempDir dir;
  const std::string path = dir.Sub("t.json");
  ASSERT_TRUE(WriteChromeTraceFile(t, path).ok());
  absl::StatusOr<Trace> read = ReadTraceFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->rank, -1);
  EXPECT_EQ(read->world_size, -1);
  EXPECT_TRUE(read->host.empty());
  const Flat want = Flatten(t);
  const Flat got = Flatten(*read);
  EXPECT_EQ(got.gpu, want.gpu);
  EXPECT_EQ(got.collectives, want.collectives);
  ASSERT_EQ(read->gpu.size(), 2u);
  for (const GpuActivity& a : read->gpu) {
    EXPECT_EQ(a.pageable, a.kind == GpuActivityKind::kMemcpy);
  }
}

}  // namespace
}  // namespace bubblewatch
