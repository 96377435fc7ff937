#include "ingest/synthetic/synthetic_parallel_plan.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ingest/synthetic/synthetic_names.h"
#include "ingest/synthetic/synthetic_rng.h"

namespace bubblewatch {
namespace {

// ParallelJitter in [-range, range].
int64_t ParallelJitter(SyntheticRng& rng, int64_t range) {
  return range > 0 ? rng.Uniform(-range, range) : 0;
}

}  // namespace

ParallelPlan MakeParallelPlan(const ParallelJobOptions& o) {
  ParallelPlan plan;
  plan.tp = o.tp;
  plan.dp = o.dp;
  plan.pp = o.pp;
  const int world = o.tp * o.dp * o.pp;
  auto rank_of = [&](int t, int d, int p) { return t + o.tp * (d + o.dp * p); };
  auto add_group = [&](ParallelGroupKind kind, std::vector<int> ranks) {
    ParallelGroup g;
    g.kind = kind;
    // "0" is the world group, created first.
    g.name = absl::StrCat(plan.groups.size() + 1);
    g.ranks_text = ProcessGroupRanksText(ranks);
    g.shown_name = g.name;
    g.shown_ranks_text = g.ranks_text;
    g.shown_size = static_cast<int>(ranks.size());
    g.ranks = std::move(ranks);
    plan.groups.push_back(std::move(g));
    return static_cast<int>(plan.groups.size()) - 1;
  };
  plan.tensor_group.assign(world, -1);
  plan.data_group.assign(world, -1);
  plan.prev_group.assign(world, -1);
  plan.next_group.assign(world, -1);
  for (int h = 0; h < o.dp * o.pp; ++h) {
    std::vector<int> ranks;
    for (int t = 0; t < o.tp; ++t) ranks.push_back(h * o.tp + t);
    const int g = add_group(ParallelGroupKind::kTensor, ranks);
    for (int r : ranks) plan.tensor_group[r] = g;
  }
  for (int p = 0; p < o.pp; ++p) {
    for (int t = 0; t < o.tp; ++t) {
      std::vector<int> ranks;
      for (int d = 0; d < o.dp; ++d) ranks.push_back(rank_of(t, d, p));
      const int g = add_group(ParallelGroupKind::kData, ranks);
      for (int r : ranks) plan.data_group[r] = g;
    }
  }
  for (int p = 0; p + 1 < o.pp; ++p) {
    for (int d = 0; d < o.dp; ++d) {
      for (int t = 0; t < o.tp; ++t) {
        const int a = rank_of(t, d, p);
        const int b = rank_of(t, d, p + 1);
        const int g = add_group(ParallelGroupKind::kPipe, {a, b});
        plan.next_group[a] = g;
        plan.prev_group[b] = g;
      }
    }
  }
  if (o.pipeline_groups && o.pp > 1) {
    // Megatron's pipeline group of (t, d): every stage's rank, named after
    // the pairs (PyTorch would number it in their place; the pairs are
    // the plan's own bookkeeping then).
    int next_name = static_cast<int>(plan.groups.size()) + 1;
    for (int d = 0; d < o.dp; ++d) {
      for (int t = 0; t < o.tp; ++t) {
        std::vector<int> ranks;
        for (int p = 0; p < o.pp; ++p) ranks.push_back(rank_of(t, d, p));
        const std::string name = absl::StrCat(next_name++);
        const std::string text = ProcessGroupRanksText(ranks);
        for (int p = 0; p + 1 < o.pp; ++p) {
          ParallelGroup& g = plan.groups[plan.next_group[rank_of(t, d, p)]];
          g.shown_name = name;
          g.shown_ranks_text = text;
          g.shown_size = o.pp;
        }
      }
    }
  }

  SyntheticRng rng(o.seed);
  const int k = std::max(1, o.kernels_per_phase);
  std::map<std::pair<int, int64_t>, int> instance_of;  // (group, seq).
  std::vector<std::map<int, int64_t>> seqs(world);     // Per rank, group.
  plan.programs.resize(world);
  plan.step_ops.assign(world, std::vector<ParallelStepOps>(o.steps));
  for (int step = 0; step < o.steps; ++step) {
    for (int r = 0; r < world; ++r) {
      std::vector<ParallelOp>& prog = plan.programs[r];
      const int p = r / (o.tp * o.dp);
      auto collective = [&](int group, int64_t transfer_ns, bool send) {
        if (group < 0 || plan.groups[group].ranks.size() < 2) return;
        const int64_t seq = ++seqs[r][group];
        auto [it, inserted] = instance_of.try_emplace(
            {group, seq}, static_cast<int>(plan.instances.size()));
        if (inserted) plan.instances.push_back({group, seq, step, transfer_ns});
        ParallelOp op;
        op.kind = ParallelOpKind::kCollective;
        op.instance = it->second;
        op.send = send;
        op.step = step;
        prog.push_back(op);
      };
      auto kernels = [&](int count) {
        for (int i = 0; i < count; ++i) {
          ParallelOp op;
          op.kind = ParallelOpKind::kCompute;
          op.ns = std::max<int64_t>(
              kNsPerUs, o.kernel_ns + ParallelJitter(rng, o.kernel_jitter_ns));
          op.step = step;
          prog.push_back(op);
        }
      };
      ParallelStepOps& at = plan.step_ops[r][step];
      prog.push_back({ParallelOpKind::kStepBegin, 0, true, -1, false, step});
      at.loader = prog.size();
      prog.push_back(
          {ParallelOpKind::kLoader,
           std::max<int64_t>(
               kNsPerUs, o.loader_ns + ParallelJitter(rng, o.loader_jitter_ns)),
           true, -1, false, step});
      collective(plan.prev_group[r], o.send_recv_ns, false);
      at.first_kernel = prog.size();
      kernels(k - k / 2);
      at.sync = prog.size();
      prog.push_back({ParallelOpKind::kSync, 0, false, -1, false, step});
      kernels(k / 2);
      collective(plan.tensor_group[r], o.all_gather_ns, false);
      kernels(k);
      if (p + 1 < o.pp) {
        collective(plan.next_group[r], o.send_recv_ns, true);
        collective(plan.next_group[r], o.send_recv_ns, false);
      }
      kernels(k);
      collective(plan.prev_group[r], o.send_recv_ns, true);
      collective(plan.data_group[r], o.all_reduce_ns, false);
      prog.push_back({ParallelOpKind::kStepEnd, 0, true, -1, false, step});
    }
  }
  return plan;
}

// The program of every rank with `roots` applied.
std::vector<std::vector<ParallelOp>> ProgramsWithRoots(
    const ParallelPlan& plan, const std::vector<PlantedRoot>& roots) {
  std::vector<std::vector<ParallelOp>> programs = plan.programs;
  for (const PlantedRoot& root : roots) {
    for (int step = root.step; step < root.step + std::max(1, root.steps);
         ++step) {
      const ParallelStepOps& at = plan.step_ops[root.rank][step];
      std::vector<ParallelOp>& prog = programs[root.rank];
      switch (root.cause) {
        case StragglerCause::kCompute:
          prog[at.first_kernel].ns += root.extra_ns;
          break;
        case StragglerCause::kDataLoading:
          prog[at.loader].ns += root.extra_ns;
          break;
        case StragglerCause::kHostSync:
          prog[at.sync].active = true;
          prog[at.sync].ns += root.extra_ns;
          break;
      }
    }
  }
  return programs;
}

}  // namespace bubblewatch
