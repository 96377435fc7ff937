// AnalyzeCollectives on real pairs of ranks, checked against a brute-force
// oracle written from docs/semantics.md#collectives (stream_order keys: the
// k-th collective of each type on each rank):
//   - nsys/mfu_2gpu_before.sqlite: one export, two GPUs, 33 SendRecv pairs
//     whose ends agree; device 1 arrives 340-570 us late at every other
//     instance of the first dozen;
//   - hta/sampled_rank-0 + sampled_rank-1: 2 of a 128-rank job, 10
//     SendRecv kernels each, of which only 4 end together.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "analysis/collectives.h"
#include "gtest/gtest.h"
#include "ingest/trace_reader.h"
#include "tests/testing/units.h"

namespace bubblewatch {
namespace {

using testing::kUs;

Trace Read(const std::string& relative) {
  const std::string path =
      absl::StrCat(BUBBLEWATCH_TESTDATA_DIR, "/real/", relative);
  absl::StatusOr<Trace> t = ReadTraceFile(path, TraceReadOptions{});
  EXPECT_TRUE(t.ok()) << path << ": " << t.status();
  return t.ok() ? *std::move(t) : Trace{};
}

struct OracleInstance {
  bool synchronized = false;
  int32_t late = -1;
  int64_t arrival_ns = 0;
  std::map<int32_t, int64_t> wait_ns;
};

// The type of a collective kernel from its name, as the spec says: after
// the first '_', up to the next '_' or '('.
std::string TypeOf(const std::string& name) {
  std::string rest = name.substr(name.find('_') + 1);
  return rest.substr(0, rest.find_first_of("_("));
}

struct Oracle {
  int64_t matched = 0;
  int64_t unmatched = 0;
  std::map<std::pair<std::string, int64_t>, OracleInstance> used;
};

// Ranks share one clock here (not corrected), so raw times are compared.
Oracle RunOracle(const std::vector<RankInput>& ranks) {
  // (type, k) -> rank -> kernel.
  std::map<std::pair<std::string, int64_t>,
           std::map<int32_t, const CollectiveKernel*>>
      instances;
  for (const RankInput& r : ranks) {
    std::vector<const CollectiveKernel*> mine;
    for (const CollectiveKernel& c : r.trace->collectives) {
      if (c.device == r.device) mine.push_back(&c);
    }
    std::sort(mine.begin(), mine.end(), [](auto* a, auto* b) {
      if (a->start_ns != b->start_ns) return a->start_ns < b->start_ns;
      if (a->end_ns != b->end_ns) return a->end_ns < b->end_ns;
      return a->stream < b->stream;
    });
    std::map<std::string, int64_t> k;
    for (const CollectiveKernel* c : mine) {
      const std::string type =
          TypeOf(std::string(r.trace->Name(c->kernel_name)));
      instances[{type, k[type]++}][r.rank] = c;
    }
  }
  Oracle o;
  for (const auto& [key, parts] : instances) {
    if (parts.size() != ranks.size()) {
      ++o.unmatched;
      continue;
    }
    ++o.matched;
    int64_t min_end = INT64_MAX, max_end = INT64_MIN, shortest = INT64_MAX;
    for (const auto& [rank, c] : parts) {
      min_end = std::min(min_end, c->end_ns);
      max_end = std::max(max_end, c->end_ns);
      shortest = std::min(shortest, c->end_ns - c->start_ns);
    }
    if (max_end - min_end >
        std::max<int64_t>(50 * kUs, static_cast<int64_t>(0.05 * shortest))) {
      continue;
    }
    OracleInstance& inst = o.used[key];
    inst.synchronized = true;
    inst.arrival_ns = INT64_MIN;
    for (const auto& [rank, c] : parts) {
      if (c->start_ns > inst.arrival_ns) {
        inst.arrival_ns = c->start_ns;
        inst.late = rank;
      }
    }
    for (const auto& [rank, c] : parts) {
      // Wait minus the other kernels of its device, brute force. (A copy
      // of the binding: clang 14 cannot capture a structured binding.)
      const auto wanted = rank;
      const RankInput& r =
          *std::find_if(ranks.begin(), ranks.end(),
                        [&](auto& x) { return x.rank == wanted; });
      std::vector<std::pair<int64_t, int64_t>> compute;
      const int64_t from = c->start_ns;
      const int64_t to = std::min(c->end_ns, inst.arrival_ns);
      for (const GpuActivity& a : r.trace->gpu) {
        if (a.kind != GpuActivityKind::kKernel || a.device != r.device ||
            IsCollectiveKernelName(r.trace->Name(a.name))) {
          continue;
        }
        const int64_t lo = std::max(a.start_ns, from);
        const int64_t hi = std::min(a.end_ns, to);
        if (lo < hi) compute.push_back({lo, hi});
      }
      std::sort(compute.begin(), compute.end());
      int64_t covered = 0, reach = from;
      for (const auto& [lo, hi] : compute) {
        if (hi <= reach) continue;
        covered += hi - std::max(lo, reach);
        reach = hi;
      }
      inst.wait_ns[rank] = std::max<int64_t>(0, to - from) - covered;
    }
  }
  return o;
}

void ExpectAgreesWithOracle(const std::vector<RankInput>& ranks,
                            const CollectiveAnalysis& c) {
  const Oracle o = RunOracle(ranks);
  EXPECT_EQ(c.key, CollectiveKey::kStreamOrder);
  EXPECT_EQ(c.matched, o.matched);
  EXPECT_EQ(c.unmatched, o.unmatched);
  EXPECT_EQ(c.used, static_cast<int64_t>(o.used.size()));
  EXPECT_EQ(c.unsynchronized, o.matched - static_cast<int64_t>(o.used.size()));
  ASSERT_EQ(c.instances.size(), o.used.size());
  for (const CollectiveInstance& inst : c.instances) {
    auto it = o.used.find({inst.group, inst.key});
    ASSERT_NE(it, o.used.end()) << inst.group << " #" << inst.key;
    EXPECT_EQ(inst.late_rank, it->second.late) << inst.group << inst.key;
    EXPECT_EQ(inst.arrival_ns, it->second.arrival_ns);
    for (const CollectiveInstance::Part& p : inst.parts) {
      EXPECT_EQ(p.wait_ns, it->second.wait_ns.at(p.rank))
          << inst.group << " #" << inst.key << " rank " << p.rank;
    }
  }
}

TEST(CollectivesRealPairs, TwoGpusOfOneNsysExport) {
  Trace t = Read("nsys/mfu_2gpu_before.sqlite");
  const std::string file = "mfu_2gpu_before.sqlite";
  std::vector<RankInput> ranks =
      RanksOfTraces(absl::MakeConstSpan(&t, 1), absl::MakeConstSpan(&file, 1));
  ASSERT_EQ(ranks.size(), 2u);
  CollectiveOptions options;
  options.keep_instances = true;
  absl::StatusOr<CollectiveAnalysis> c = AnalyzeCollectives(ranks, options);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->matched, 33);
  EXPECT_EQ(c->unsynchronized, 0);
  ExpectAgreesWithOracle(ranks, *c);
  // Device 1 arrives 340-570 us late at every other instance of the first
  // dozen (1, 3, ..., 11), and is the one the other waits for most.
  int late_by_device_1 = 0;
  for (const CollectiveInstance& inst : c->instances) {
    if (inst.key % 2 == 0 || inst.key > 11) continue;
    EXPECT_EQ(inst.late_rank, 1) << "#" << inst.key;
    const int64_t lateness = inst.parts[1].start_ns - inst.parts[0].start_ns;
    EXPECT_GE(lateness, 340 * kUs) << "#" << inst.key;
    EXPECT_LE(lateness, 570 * kUs) << "#" << inst.key;
    ++late_by_device_1;
  }
  EXPECT_EQ(late_by_device_1, 6);
  ASSERT_FALSE(c->stragglers.empty());
  EXPECT_EQ(c->stragglers[0].rank, 1);
  EXPECT_FALSE(c->ranks[1].clock_corrected);  // One host, one clock.
}

TEST(CollectivesRealPairs, TwoSampledRanksOfA128RankJob) {
  std::vector<Trace> traces = {Read("hta/sampled_rank-0.json.gz"),
                               Read("hta/sampled_rank-1.json.gz")};
  const std::vector<std::string> files = {"sampled_rank-0", "sampled_rank-1"};
  std::vector<RankInput> ranks = RanksOfTraces(traces, files);
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[0].rank, 0);
  EXPECT_EQ(ranks[1].rank, 1);
  CollectiveOptions options;
  options.keep_instances = true;
  absl::StatusOr<CollectiveAnalysis> c = AnalyzeCollectives(ranks, options);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->world_size, 128);
  // An old trace: `ncclKernel_SendRecv_...` kernels with no collective args
  // at all (TorchRec's all_to_all runs as grouped send/recv). Without
  // `Collective name` a SendRecv kernel is not taken for a point-to-point
  // pair, and without `Process Group Ranks` the members are inferred
  // (docs/semantics.md#point-to-point-pairs).
  EXPECT_TRUE(c->members_inferred);
  EXPECT_EQ(c->unpaired, 0);
  for (const CollectiveInstance& i : c->instances) EXPECT_FALSE(i.pair);
  EXPECT_EQ(c->matched, 10);
  EXPECT_EQ(c->unsynchronized, 6);
  EXPECT_EQ(c->used, 4);
  // Too few instances end together within 50 us of each other to set a
  // clock offset: the clocks are taken as they are, and the oracle too.
  ASSERT_FALSE(c->ranks[1].clock_corrected);
  ExpectAgreesWithOracle(ranks, *c);
}

}  // namespace
}  // namespace bubblewatch
