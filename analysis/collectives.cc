#include "analysis/collectives.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "analysis/clock_graph.h"
#include "analysis/interval_set.h"
#include "analysis/rank_digest.h"
#include "schemas/time_types.h"

namespace bubblewatch {
namespace {

// The ten categories a rank's time between two sync points falls into:
// compute, comm, then the bubble causes in BubbleCause order.
constexpr int kCompute = 0;
constexpr int kComm = 1;
constexpr int kCategories = 2 + kNumBubbleCauses;
using Categories = std::array<int64_t, kCategories>;

// "[0, 1, 5]" -> {0, 1, 5}; nullopt when it does not parse.
std::optional<absl::flat_hash_set<int32_t>> ParseRankList(
    absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (!absl::ConsumePrefix(&text, "[") || !absl::ConsumeSuffix(&text, "]")) {
    return std::nullopt;
  }
  absl::flat_hash_set<int32_t> ranks;
  if (absl::StripAsciiWhitespace(text).empty()) return ranks;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int32_t r = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &r)) {
      return std::nullopt;
    }
    ranks.insert(r);
  }
  return ranks;
}

// Median of `v` (reordered); for an even count the mean of the two middle
// values, rounded toward minus infinity. REQUIRES: !v.empty().
int64_t Median(std::vector<int64_t>& v) {
  const size_t mid = v.size() / 2;
  int64_t upper = 0;
  int64_t lower = 0;
  if (v.size() <= 16) {
    // The straggler attribution takes a median over the other ranks of each
    // instance, per category: an insertion sort of a few values beats
    // nth_element's setup. Same values, so the same median.
    for (size_t i = 1; i < v.size(); ++i) {
      const int64_t x = v[i];
      size_t j = i;
      for (; j > 0 && v[j - 1] > x; --j) v[j] = v[j - 1];
      v[j] = x;
    }
    upper = v[mid];
    if (v.size() % 2 == 1) return upper;
    lower = v[mid - 1];
  } else {
    std::nth_element(v.begin(), v.begin() + mid, v.end());
    upper = v[mid];
    if (v.size() % 2 == 1) return upper;
    lower = *std::max_element(v.begin(), v.begin() + mid);
  }
  // No overflow: event times are within +-2^62 (CheckEventTimes).
  const int64_t sum = lower + upper;
  return sum >= 0 ? sum / 2 : -((-sum + 1) / 2);
}

// One rank while it is being analyzed.
struct RankState {
  const RankDigest* input = nullptr;
  int domain = 0;
  // Its collective kernels on its device, by (start, end, stream), with
  // Seq-backwards ones removed.
  std::vector<const DigestKernel*> kernels;
  // Where the last query of input->compute_in_kernels was: instances come
  // in time order within a group, so each query starts its search near the
  // previous one.
  size_t compute_cursor = 0;
};

// A matched instance while it is being analyzed: one kernel per rank slot.
struct Instance {
  int group = 0;
  int64_t key = 0;
  // A point-to-point pair (docs/semantics.md#point-to-point-pairs): its
  // two ends' rank slots; a slot is -1 where that rank is not an input.
  bool pair = false;
  std::array<int, 2> pair_slots{-1, -1};
  // (rank slot, kernel), by rank slot.
  std::vector<std::pair<int, const DigestKernel*>> parts;
  bool matched = false;
  bool synchronized = false;
  int late = -1;  // Rank slot.
  int64_t arrival_ns = 0;
  std::vector<int64_t> wait_ns;  // Per part.
  int previous = -1;             // Previous used instance of its group.
  // Per part: its rank's kernel in the previous instance, or null.
  std::vector<const DigestKernel*> before;
};

// A pair of the same stages in another pipeline replica: its group, and
// which of its rank slots stands for each end of the pair it replicates.
struct Replica {
  int group = 0;
  std::array<int, 2> slot_of_end{};
};

class CollectiveAnalyzer {
 public:
  CollectiveAnalyzer(absl::Span<const RankDigest> inputs,
                     const CollectiveOptions& options)
      : inputs_(inputs), options_(options) {}

  absl::StatusOr<CollectiveAnalysis> Run();

 private:
  absl::Status CheckInputs();
  void CollectKernels();
  absl::Status CheckGroupSizes() const;
  void ChooseKey();
  void BuildInstances();
  void EstimateClocks();
  void MeasureInstances();
  void MeasureWaits();
  void FindReplicas();
  // The instance of (group, key) in instances_, or -1.
  int FindInstance(int group, int64_t key) const;
  void Attribute();
  // The least wait caused that names a straggler: max(min_straggler_wait_ns,
  // min_straggler_share × the ranks' collective time, summed).
  int64_t StragglerThresholdNs() const;
  void WhatIf();
  void Summarize();

  // "" for kNoDigestName (a digest from elsewhere may name no kernel type).
  absl::string_view Name(const RankState& r, int32_t id) const {
    return id == kNoDigestName ? absl::string_view() : r.input->names[id];
  }
  // Time `t` of rank slot `slot`, on the reference clock, and back.
  int64_t Corrected(size_t slot, int64_t t) const {
    return clock_.ToReference(ranks_[slot].domain, t);
  }
  int64_t Local(size_t slot, int64_t reference_t) const {
    return clock_.FromReference(ranks_[slot].domain, reference_t);
  }
  // A send or recv: one end of a point-to-point pair. Its Seq is the
  // group's next collective's in PyTorch, not a count of its own.
  bool IsPointToPoint(const RankState& r, const DigestKernel& c) const {
    if (c.collective == kNoDigestName) return false;
    return IsPointToPointName(Name(r, c.collective));
  }
  // The other end's global rank: `Dst Rank`/`Src Rank`, else the other rank
  // of a group that lists exactly two; -1 when unknown.
  int32_t PeerOf(const RankState& r, const DigestKernel& c) const;

  absl::Span<const RankDigest> inputs_;
  const CollectiveOptions& options_;
  std::vector<RankState> ranks_;  // By rank.
  std::vector<std::string> group_names_;
  std::vector<Instance> instances_;  // Matched ones, by (group, key).
  // Per group id: a pair group's two rank slots (ascending; -1 otherwise)
  // and its replica pairs (docs/semantics.md#pipeline-waits).
  std::vector<std::array<int, 2>> pair_ends_;
  std::vector<std::vector<Replica>> replicas_;
  ClockSolution clock_;  // Every clock domain's, by EstimateClocks.
  CollectiveAnalysis out_;
};

// The checks on the ranks that AnalyzeCollectives and AnalyzeDigests share,
// over RankInputs or RankDigests: `job_of` gives a rank's job, or null when
// it has no trace.
template <typename Rank, typename JobOf>
absl::Status CheckRanks(absl::Span<const Rank> inputs, JobOf job_of) {
  if (inputs.empty()) {
    return absl::InvalidArgumentError("no rank to analyze");
  }
  absl::flat_hash_map<int32_t, size_t> seen;
  const Rank* with_job = nullptr;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Rank& in = inputs[i];
    const std::string* job = job_of(in);
    if (job == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", in.rank, " has no trace"));
    }
    auto [it, inserted] = seen.try_emplace(in.rank, i);
    if (!inserted) {
      const Rank& first = inputs[it->second];
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", in.rank,
          " appears twice: ", first.file.empty() ? "?" : first.file,
          " (device ", first.device, ") and ", in.file.empty() ? "?" : in.file,
          " (device ", in.device, ")"));
    }
    if (!job->empty()) {
      if (with_job != nullptr && *job_of(*with_job) != *job) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the files hold different jobs: '", *job_of(*with_job), "' (",
            with_job->file, ") and '", *job, "' (", in.file, ")"));
      }
      with_job = &in;
    }
  }
  return absl::OkStatus();
}

absl::Status CollectiveAnalyzer::CheckInputs() {
  for (const RankDigest& d : inputs_) {
    if (d.times.size() != d.kernels.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the digest of rank ", d.rank, " has ", d.kernels.size(),
                       " kernels but ", d.times.size(), " kernel times"));
    }
  }
  return CheckRanks(inputs_, [](const RankDigest& d) { return &d.job; });
}

void CollectiveAnalyzer::CollectKernels() {
  std::vector<const RankDigest*> sorted;
  for (const RankDigest& in : inputs_) sorted.push_back(&in);
  std::sort(sorted.begin(), sorted.end(),
            [](const RankDigest* a, const RankDigest* b) {
              return a->rank < b->rank;
            });
  absl::flat_hash_map<std::string, int> domains;
  for (const RankDigest* in : sorted) {
    RankState r;
    r.input = in;
    r.domain =
        domains.try_emplace(in->clock_domain, domains.size()).first->second;
    r.kernels.reserve(in->kernels.size());
    for (const DigestKernel& c : in->kernels) r.kernels.push_back(&c);
    // DigestTrace gives them in order, so the sort is skipped. Equal
    // kernels keep the digest's order (the pointers' order): a total order,
    // so skipping the sort and sorting agree.
    auto before = [](const DigestKernel* a, const DigestKernel* b) {
      return std::tie(a->start_ns, a->end_ns, a->stream) <
                 std::tie(b->start_ns, b->end_ns, b->stream) ||
             (std::tie(a->start_ns, a->end_ns, a->stream) ==
                  std::tie(b->start_ns, b->end_ns, b->stream) &&
              a < b);
    };
    if (!std::is_sorted(r.kernels.begin(), r.kernels.end(), before)) {
      std::sort(r.kernels.begin(), r.kernels.end(), before);
    }
    out_.collective_kernels += static_cast<int64_t>(r.kernels.size());
    if (in->world_size > out_.world_size) out_.world_size = in->world_size;
    ranks_.push_back(std::move(r));
  }
}

// Every kernel of a process group that states its group size must state
// the same one, on every rank: a process group has one size. Two ranks
// that disagree describe different groups under one name (a profiler bug,
// or input put together from different runs), so nothing of theirs can be
// matched with confidence.
absl::Status CollectiveAnalyzer::CheckGroupSizes() const {
  struct Stated {
    int32_t size;
    int32_t rank;
    int64_t seq;
  };
  std::vector<Stated> stated;  // The first statement per group.
  absl::flat_hash_map<std::string, size_t> by_group;
  for (const RankState& r : ranks_) {
    // The group's statement per name of this trace: a string per kernel
    // was most of this check's cost.
    absl::flat_hash_map<int32_t, size_t> by_name;
    for (const DigestKernel* c : r.kernels) {
      if (c->process_group == kNoDigestName || c->group_size < 0) continue;
      auto [named, new_name] = by_name.try_emplace(c->process_group, 0);
      if (new_name) {
        auto [it, inserted] =
            by_group.try_emplace(Name(r, c->process_group), stated.size());
        if (inserted) {
          stated.push_back(Stated{c->group_size, r.input->rank, c->seq});
        }
        named->second = it->second;
      }
      const Stated& first = stated[named->second];
      if (first.size == c->group_size) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          "group size disagrees in process group '", Name(r, c->process_group),
          "': rank ", first.rank, " says ", first.size, " (Seq ", first.seq,
          "), rank ", r.input->rank, " says ", c->group_size, " (Seq ", c->seq,
          ")"));
    }
  }
  return absl::OkStatus();
}

int32_t CollectiveAnalyzer::PeerOf(const RankState& r,
                                   const DigestKernel& c) const {
  if (c.peer >= 0) return c.peer;
  if (c.group_ranks == kNoDigestName) return -1;
  const std::vector<int32_t> ranks = ParseGroupRanks(Name(r, c.group_ranks));
  if (ranks.size() != 2) return -1;
  if (ranks[0] == r.input->rank) return ranks[1];
  if (ranks[1] == r.input->rank) return ranks[0];
  return -1;
}

// Point-to-point kernels do not choose the key: they are paired by their
// own (docs/semantics.md#point-to-point-pairs), and their Seq repeats.
void CollectiveAnalyzer::ChooseKey() {
  bool all_seq = true;
  bool all_group = true;
  for (const RankState& r : ranks_) {
    for (const DigestKernel* c : r.kernels) {
      if (IsPointToPoint(r, *c)) continue;
      if (c->process_group == kNoDigestName) all_group = false;
      if (c->process_group == kNoDigestName || c->seq < 0) all_seq = false;
    }
  }
  out_.key = all_seq     ? CollectiveKey::kProcessGroupSeq
             : all_group ? CollectiveKey::kProcessGroupOrder
                         : CollectiveKey::kStreamOrder;
}

void CollectiveAnalyzer::BuildInstances() {
  absl::flat_hash_map<std::string, int> group_ids;
  auto group_id = [&](std::string name) {
    auto [it, inserted] = group_ids.try_emplace(name, group_names_.size());
    if (inserted) group_names_.push_back(std::move(name));
    return it->second;
  };
  // (group, key) -> instance index.
  absl::flat_hash_map<std::pair<int, int64_t>, size_t> index;
  std::vector<Instance> all;
  // A group's rank list ("[0, 1]"), parsed once per distinct name of a
  // digest rather than once per instance: which rank slots it names, and how
  // many of the ranks present it holds.
  struct Members {
    std::vector<bool> in;  // By rank slot.
    size_t present = 0;
  };
  std::vector<Members> members;
  absl::flat_hash_map<std::pair<const RankDigest*, int32_t>, int>
      members_of_list;
  auto members_of = [&](const RankState& r, int32_t list) {
    auto [it, inserted] = members_of_list.try_emplace({r.input, list}, -1);
    if (inserted) {
      std::optional<absl::flat_hash_set<int32_t>> ranks =
          ParseRankList(Name(r, list));
      if (ranks.has_value()) {
        Members m;
        m.in.resize(ranks_.size());
        for (size_t s = 0; s < ranks_.size(); ++s) {
          m.in[s] = ranks->contains(ranks_[s].input->rank);
          m.present += m.in[s] ? 1 : 0;
        }
        it->second = static_cast<int>(members.size());
        members.push_back(std::move(m));
      }
    }
    return it->second;
  };
  // Expected members per instance when the kernels name their group's
  // ranks (an index into `members`), else -1.
  std::vector<int> expected;
  absl::flat_hash_map<int32_t, int> slot_of_rank;
  for (size_t slot = 0; slot < ranks_.size(); ++slot) {
    slot_of_rank[ranks_[slot].input->rank] = static_cast<int>(slot);
  }
  // Per group, how many input ranks have kernels of it: its members when
  // the kernels do not list them (docs/semantics.md#matching-instances).
  absl::flat_hash_set<std::pair<int, int>> group_slots;
  std::vector<int> ranks_with_group;
  for (size_t slot = 0; slot < ranks_.size(); ++slot) {
    RankState& r = ranks_[slot];
    absl::flat_hash_map<int, int64_t> order;            // Per group: next k.
    absl::flat_hash_map<int, int64_t> last_seq;         // Per group.
    absl::flat_hash_map<int, int64_t> last_pair_index;  // Per pair group.
    // The group of a name of this digest (a process group's, or the kernel
    // name's type), found once per name.
    absl::flat_hash_map<int32_t, int> group_of_name;
    auto group_of = [&](int32_t name) {
      auto [it, inserted] = group_of_name.try_emplace(name, 0);
      if (inserted) it->second = group_id(std::string(Name(r, name)));
      return it->second;
    };
    // A point-to-point pair's group, (process group, the two ranks), found
    // once per such triple of this digest.
    absl::flat_hash_map<std::tuple<int32_t, int32_t, int32_t>, int> pair_groups;
    std::vector<const DigestKernel*> kept;
    kept.reserve(r.kernels.size());
    for (const DigestKernel* c : r.kernels) {
      int group = 0;
      int64_t key = 0;
      int32_t peer = -1;
      const bool pair = IsPointToPoint(r, *c);
      if (pair) {
        peer = PeerOf(r, *c);
        if (peer < 0 || peer == r.input->rank) {
          // Which transfer it is cannot be told: an instance of its own,
          // never matched.
          kept.push_back(c);
          ++out_.unmatched;
          ++out_.unpaired;
          continue;
        }
        const int32_t lo = std::min(peer, r.input->rank);
        const int32_t hi = std::max(peer, r.input->rank);
        auto [it, inserted] =
            pair_groups.try_emplace({c->process_group, lo, hi}, 0);
        if (inserted) {
          const std::string pg = c->process_group == kNoDigestName
                                     ? std::string("p2p")
                                     : std::string(Name(r, c->process_group));
          it->second = group_id(absl::StrCat(pg, " ", lo, "<->", hi));
        }
        group = it->second;
        if (c->pair_index < 0) {
          key = order[group]++;
        } else {
          // Numbered over the rank's whole trace (CollectiveKernel::
          // pair_index): it must grow, as Seq must.
          auto [last, first] =
              last_pair_index.try_emplace(group, c->pair_index);
          if (!first) {
            if (c->pair_index <= last->second) {
              ++out_.seq_backwards;
              continue;
            }
            last->second = c->pair_index;
          }
          key = c->pair_index;
        }
      }
      switch (pair ? CollectiveKey::kStreamOrder : out_.key) {
        case CollectiveKey::kProcessGroupSeq: {
          group = group_of(c->process_group);
          auto [it, first] = last_seq.try_emplace(group, c->seq);
          if (!first) {
            if (c->seq <= it->second) {
              ++out_.seq_backwards;
              continue;
            }
            // No overflow: it->second < c->seq.
            if (c->seq > it->second + 1) ++out_.seq_jumps;
            it->second = c->seq;
          }
          key = c->seq;
          break;
        }
        case CollectiveKey::kProcessGroupOrder:
          group = group_of(c->process_group);
          key = order[group]++;
          break;
        case CollectiveKey::kStreamOrder:
          if (pair) break;
          group = group_of(c->kernel_type);
          key = order[group]++;
          break;
      }
      kept.push_back(c);
      if (group_slots.insert({group, static_cast<int>(slot)}).second) {
        if (ranks_with_group.size() <= static_cast<size_t>(group)) {
          ranks_with_group.resize(group + 1, 0);
        }
        ++ranks_with_group[group];
      }
      auto [it, inserted] = index.try_emplace({group, key}, all.size());
      if (inserted) {
        all.emplace_back();
        all.back().group = group;
        all.back().key = key;
        if (pair) {
          auto peer_slot = slot_of_rank.find(peer);
          all.back().pair = true;
          all.back().pair_slots = {
              static_cast<int>(slot),
              peer_slot == slot_of_rank.end() ? -1 : peer_slot->second};
        }
        expected.push_back(!pair && c->group_ranks != kNoDigestName
                               ? members_of(r, c->group_ranks)
                               : -1);
        if (expected.back() >= 0) {
          all.back().parts.reserve(members[expected.back()].present);
        }
      }
      all[it->second].parts.emplace_back(static_cast<int>(slot), c);
    }
    r.kernels = std::move(kept);
  }
  for (size_t i = 0; i < all.size(); ++i) {
    Instance& inst = all[i];
    size_t want = 0;
    bool members_ok = true;
    if (inst.pair) {
      // Its two ends, each once: both ranks must be inputs.
      want = inst.pair_slots[1] >= 0 ? 2 : 1;
      for (const auto& [slot, c] : inst.parts) {
        if (slot != inst.pair_slots[0] && slot != inst.pair_slots[1]) {
          members_ok = false;
        }
      }
      if (inst.parts.size() == 2 &&
          inst.parts[0].first == inst.parts[1].first) {
        members_ok = false;
      }
    } else if (expected[i] < 0) {
      want = ranks_with_group[inst.group];
      out_.members_inferred = true;
    } else {
      const Members& m = members[expected[i]];
      want = m.present;
      for (const auto& [slot, c] : inst.parts) {
        if (!m.in[slot]) members_ok = false;
      }
    }
    inst.matched = members_ok && inst.parts.size() == want && want >= 2;
    if (inst.matched) {
      ++out_.matched;
    } else {
      ++out_.unmatched;
    }
  }
  std::erase_if(all, [](const Instance& inst) { return !inst.matched; });
  std::sort(all.begin(), all.end(), [](const Instance& a, const Instance& b) {
    return std::tie(a.group, a.key) < std::tie(b.group, b.key);
  });
  instances_ = std::move(all);
}

// docs/semantics.md#clocks: every matched instance that spans several
// domains ties their clocks together; ClockGraph solves all of them at once,
// so a domain that shares no instance with the reference is still
// corrected through the domains it does share instances with.
void CollectiveAnalyzer::EstimateClocks() {
  out_.ranks.resize(ranks_.size());
  int domains = 0;
  for (const RankState& r : ranks_) domains = std::max(domains, r.domain + 1);
  const int reference = ranks_.front().domain;  // The lowest rank's.
  ClockGraph graph(domains, reference);
  if (domains > 1) {
    // One end per (instance, domain): its lowest rank's, which comes first
    // among the parts.
    std::vector<int64_t> seen_in(domains, -1);
    std::vector<DomainEnd> ends;
    for (size_t i = 0; i < instances_.size(); ++i) {
      ends.clear();
      for (const auto& [slot, c] : instances_[i].parts) {
        const int d = ranks_[slot].domain;
        if (seen_in[d] == static_cast<int64_t>(i)) continue;
        seen_in[d] = static_cast<int64_t>(i);
        ends.push_back({d, c->end_ns});
      }
      graph.AddInstance(ends);
    }
  }
  ClockGraphOptions o;
  o.min_link_instances = options_.min_clock_instances;
  o.outlier_floor_ns = options_.sync_floor_ns;
  o.min_drift_instances = options_.min_drift_instances;
  o.min_drift_span_ns = options_.min_drift_span_ns;
  clock_ = graph.Solve(o);
  out_.clock_origin_ns = clock_.origin_ns;
  for (size_t slot = 0; slot < ranks_.size(); ++slot) {
    const int d = ranks_[slot].domain;
    const DomainClock& dc = clock_.domains[d];
    RankCollectiveStats& s = out_.ranks[slot];
    s.clock_offset_ns = dc.offset_ns;
    s.clock_drift_ns_per_s = dc.drift_ns_per_s;
    s.clock_instances = dc.instances;
    s.clock_residual_ns = dc.residual_ns;
    s.clock_connected = dc.connected;
    s.clock_corrected = dc.connected && d != reference;
  }
}

void CollectiveAnalyzer::MeasureInstances() {
  std::vector<int> last_used(group_names_.size(), -1);
  for (size_t i = 0; i < instances_.size(); ++i) {
    Instance& inst = instances_[i];
    // Identities of min and max: an instance has at least one part.
    int64_t min_end = INT64_MAX;
    int64_t max_end = INT64_MIN;
    int64_t shortest = INT64_MAX;
    for (const auto& [slot, c] : inst.parts) {
      const int64_t end = Corrected(slot, c->end_ns);
      min_end = std::min(min_end, end);
      max_end = std::max(max_end, end);
      shortest = std::min(shortest, c->end_ns - c->start_ns);
    }
    const int64_t tolerance = std::max<int64_t>(
        options_.sync_floor_ns,
        static_cast<int64_t>(options_.sync_fraction * shortest));
    inst.synchronized = max_end - min_end <= tolerance;
    if (!inst.synchronized) {
      ++out_.unsynchronized;
      continue;
    }
    ++out_.used;
    // Arrival: the latest corrected start; ties go to the lowest rank,
    // which comes first among the parts.
    std::optional<EventNs> arrival;
    for (const auto& [slot, c] : inst.parts) {
      const int64_t start = Corrected(slot, c->start_ns);
      if (!arrival || start > *arrival) {
        arrival = start;
        inst.late = slot;
      }
    }
    inst.arrival_ns = *arrival;  // An instance has at least one part.
    inst.previous = last_used[inst.group];
    last_used[inst.group] = static_cast<int>(i);
    // The previous common sync point, per rank: its kernel there.
    inst.before.assign(inst.parts.size(), nullptr);
    if (inst.previous < 0) continue;
    const Instance& prev = instances_[inst.previous];
    for (size_t p = 0; p < inst.parts.size(); ++p) {
      const int slot = inst.parts[p].first;
      for (const auto& [prev_slot, prev_c] : prev.parts) {
        if (prev_slot == slot) inst.before[p] = prev_c;
      }
    }
  }
}

// Waits need each rank's compute kernels inside its collective kernels,
// which its digest keeps.
void CollectiveAnalyzer::MeasureWaits() {
  for (Instance& inst : instances_) {
    if (!inst.synchronized) continue;
    inst.wait_ns.resize(inst.parts.size());
    for (size_t p = 0; p < inst.parts.size(); ++p) {
      const auto& [slot, c] = inst.parts[p];
      RankState& r = ranks_[slot];
      const int64_t local_arrival = Local(slot, inst.arrival_ns);
      const int64_t wait_end = std::min(c->end_ns, local_arrival);
      if (wait_end > c->start_ns) {
        inst.wait_ns[p] = (wait_end - c->start_ns) -
                          r.input->compute_in_kernels.CoveredLength(
                              c->start_ns, wait_end, &r.compute_cursor);
      }
    }
  }
}

int CollectiveAnalyzer::FindInstance(int group, int64_t key) const {
  auto it = std::lower_bound(
      instances_.begin(), instances_.end(), std::make_pair(group, key),
      [](const Instance& inst, const std::pair<int, int64_t>& k) {
        return std::tie(inst.group, inst.key) < std::tie(k.first, k.second);
      });
  if (it == instances_.end() || it->group != group || it->key != key) {
    return -1;
  }
  return static_cast<int>(it - instances_.begin());
}

// Two ranks that share a used collective other than a pair are of one
// pipeline stage (its tensor- or data-parallel peers). A pair's replicas
// are the other pairs whose ends are such peers of its ends, end for end:
// the same transfer between the same two stages in another replica.
void CollectiveAnalyzer::FindReplicas() {
  pair_ends_.assign(group_names_.size(), {-1, -1});
  replicas_.assign(group_names_.size(), {});
  std::vector<absl::flat_hash_set<int>> mates(ranks_.size());
  std::vector<int> pair_groups;
  int last_group = -1;
  for (const Instance& inst : instances_) {
    if (!inst.synchronized || inst.group == last_group) continue;
    last_group = inst.group;
    if (inst.pair) {
      pair_ends_[inst.group] = {
          std::min(inst.parts[0].first, inst.parts[1].first),
          std::max(inst.parts[0].first, inst.parts[1].first)};
      pair_groups.push_back(inst.group);
      continue;
    }
    // A group's members once (its first used instance), not per instance.
    for (const auto& [a, ca] : inst.parts) {
      for (const auto& [b, cb] : inst.parts) {
        if (a != b) mates[a].insert(b);
      }
    }
  }
  for (int g : pair_groups) {
    const std::array<int, 2>& x = pair_ends_[g];
    for (int h : pair_groups) {
      if (h == g) continue;
      const std::array<int, 2>& y = pair_ends_[h];
      if (mates[x[0]].contains(y[0]) && mates[x[1]].contains(y[1])) {
        replicas_[g].push_back({h, {y[0], y[1]}});
      } else if (mates[x[0]].contains(y[1]) && mates[x[1]].contains(y[0])) {
        replicas_[g].push_back({h, {y[1], y[0]}});
      }
    }
  }
}

// One share of an instance's blame: the root rank (slot) it lands on and
// the category of the root's own time that made it late (kCategories:
// unattributed), as a fraction of the instance's wait.
struct BlameShare {
  int root = 0;
  int category = 0;
  double weight = 0;
};
constexpr int kUnattributed = kCategories;
// An instance's blame keeps its largest shares; the rest is folded into
// the largest, so a long chain of waits cannot grow it without bound.
constexpr size_t kMaxShares = 8;

// Adds `weight` of (root, category) to `shares`.
// Most instances have one or two shares: kept inline, no allocation.
using BlameShares = absl::InlinedVector<BlameShare, 4>;

void AddShare(BlameShares& shares, int root, int category, double weight) {
  if (weight <= 0) return;
  for (BlameShare& b : shares) {
    if (b.root == root && b.category == category) {
      b.weight += weight;
      return;
    }
  }
  shares.push_back({root, category, weight});
}

// Keeps the kMaxShares largest shares (the others' weight goes to the
// largest), in a deterministic order.
void Compact(BlameShares& shares) {
  std::sort(shares.begin(), shares.end(),
            [](const BlameShare& a, const BlameShare& b) {
              if (a.weight != b.weight) return a.weight > b.weight;
              return std::tie(a.root, a.category) <
                     std::tie(b.root, b.category);
            });
  if (shares.size() <= kMaxShares) return;
  double rest = 0;
  for (size_t k = kMaxShares; k < shares.size(); ++k) rest += shares[k].weight;
  shares.resize(kMaxShares);
  shares.front().weight += rest;
}

int64_t CollectiveAnalyzer::StragglerThresholdNs() const {
  int64_t comm_ns = 0;
  for (const RankState& r : ranks_) comm_ns += r.input->comm_ns;
  const double share = std::max(0.0, options_.min_straggler_share) *
                       static_cast<double>(comm_ns);
  return std::max<int64_t>(options_.min_straggler_wait_ns,
                           static_cast<int64_t>(std::ceil(share)));
}

void CollectiveAnalyzer::Attribute() {
  std::vector<Straggler> by_slot(ranks_.size());
  std::vector<absl::flat_hash_map<int, int64_t>> via(ranks_.size());
  for (size_t slot = 0; slot < ranks_.size(); ++slot) {
    by_slot[slot].rank = ranks_[slot].input->rank;
    by_slot[slot].host = ranks_[slot].input->host;
    by_slot[slot].pid = ranks_[slot].input->pid;
  }
  // Each rank's waits, by its kernels' start (its own clock), with prefix
  // sums: the waits of a rank inside an interval between two sync points.
  struct RankWait {
    int64_t start_ns;
    int instance;
    int64_t wait_ns;
  };
  // The waits that blame can rest on: a pair's only beyond the least its
  // replicas waited at the same end (docs/semantics.md#pipeline-waits);
  // none where it has no replica.
  FindReplicas();
  std::vector<std::vector<int64_t>> blamable(instances_.size());
  for (size_t i = 0; i < instances_.size(); ++i) {
    const Instance& inst = instances_[i];
    if (!inst.synchronized) continue;
    blamable[i] = inst.wait_ns;
    if (!inst.pair) continue;
    for (size_t p = 0; p < inst.parts.size(); ++p) {
      const int end = inst.parts[p].first == pair_ends_[inst.group][0] ? 0 : 1;
      int64_t least = INT64_MAX;
      for (const Replica& rep : replicas_[inst.group]) {
        const int j = FindInstance(rep.group, inst.key);
        if (j < 0 || !instances_[j].synchronized) continue;
        const Instance& x = instances_[j];
        for (size_t q = 0; q < x.parts.size(); ++q) {
          if (x.parts[q].first == rep.slot_of_end[end]) {
            least = std::min(least, x.wait_ns[q]);
          }
        }
      }
      blamable[i][p] = least == INT64_MAX
                           ? 0
                           : std::max<int64_t>(0, inst.wait_ns[p] - least);
    }
  }
  std::vector<std::vector<RankWait>> rank_waits(ranks_.size());
  for (size_t i = 0; i < instances_.size(); ++i) {
    const Instance& inst = instances_[i];
    if (!inst.synchronized) continue;
    for (size_t p = 0; p < inst.parts.size(); ++p) {
      if (blamable[i][p] <= 0) continue;
      rank_waits[inst.parts[p].first].push_back({inst.parts[p].second->start_ns,
                                                 static_cast<int>(i),
                                                 blamable[i][p]});
    }
  }
  std::vector<std::vector<int64_t>> wait_prefix(ranks_.size());
  for (size_t slot = 0; slot < ranks_.size(); ++slot) {
    std::vector<RankWait>& w = rank_waits[slot];
    std::sort(w.begin(), w.end(), [](const RankWait& a, const RankWait& b) {
      return std::tie(a.start_ns, a.instance) <
             std::tie(b.start_ns, b.instance);
    });
    wait_prefix[slot].assign(w.size() + 1, 0);
    for (size_t k = 0; k < w.size(); ++k) {
      wait_prefix[slot][k + 1] = wait_prefix[slot][k] + w[k].wait_ns;
    }
  }
  // [first, last) of `slot`'s waits whose kernels start in [from, to).
  auto waits_in = [&](int slot, int64_t from, int64_t to) {
    const std::vector<RankWait>& w = rank_waits[slot];
    auto by_start = [](const RankWait& a, int64_t t) { return a.start_ns < t; };
    const size_t first =
        std::lower_bound(w.begin(), w.end(), from, by_start) - w.begin();
    const size_t last =
        std::lower_bound(w.begin(), w.end(), to, by_start) - w.begin();
    return std::pair<size_t, size_t>(first, std::max(first, last));
  };
  // Blame follows waits back in time (docs/semantics.md#root-cause): an
  // instance's shares use those of the instances its late rank waited in
  // before it, which end before it starts, so arrival order resolves every
  // instance after the ones it depends on, and no cycle can form.
  std::vector<int> order;
  for (size_t i = 0; i < instances_.size(); ++i) {
    if (instances_[i].synchronized) order.push_back(static_cast<int>(i));
  }
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return std::tie(instances_[a].arrival_ns, a) <
           std::tie(instances_[b].arrival_ns, b);
  });
  // Part p of `in`: its rank's time since the previous sync point of the
  // group by category, and its waits in that interval (their index range
  // in rank_waits); false without a previous sync point.
  // The waits themselves are looked up only when the late rank has a comm
  // excess to explain (WaitsOf): most instances have none.
  struct Measured {
    int slot = 0;
    int64_t from = 0;
    int64_t to = 0;
  };
  auto measure = [&](const Instance& in, size_t p, Categories* spent,
                     Measured* where) {
    if (in.previous < 0 || in.before[p] == nullptr) return false;
    const DigestKernel& before = *in.before[p];
    const DigestKernel& c = *in.parts[p].second;
    // [before's end, c's start), empty when they overlap: a difference of
    // the digest's prefixes
    // (docs/architecture.md#same-answers-by-construction).
    const int64_t from = before.end_ns;
    const int64_t to = std::max(before.end_ns, c.start_ns);
    spent->fill(0);
    if (to > from) {
      const RankDigest& digest = *ranks_[in.parts[p].first].input;
      const LatenessBreakdown& a =
          digest.times[&before - digest.kernels.data()].at_end;
      const LatenessBreakdown& b =
          digest.times[&c - digest.kernels.data()].at_start;
      (*spent)[kCompute] = b.compute_ns - a.compute_ns;
      (*spent)[kComm] = b.comm_ns - a.comm_ns;
      for (int k = 0; k < kNumBubbleCauses; ++k) {
        (*spent)[2 + k] = b.bubble[k] - a.bubble[k];
      }
    }
    *where = {in.parts[p].first, from, to};
    return true;
  };
  // The waits of a measured interval: their index range in rank_waits and
  // their sum.
  auto waits_of = [&](const Measured& m, std::pair<size_t, size_t>* range) {
    *range = waits_in(m.slot, m.from, m.to);
    return wait_prefix[m.slot][range->second] -
           wait_prefix[m.slot][range->first];
  };
  std::vector<Categories> cmp_spent;
  std::vector<Measured> cmp_where;
  std::vector<BlameShares> shares_of(instances_.size());
  // Kept instances by index, so that they come out in (group, key) order.
  std::vector<std::optional<CollectiveInstance>> kept(
      options_.keep_instances ? instances_.size() : 0);
  for (int index : order) {
    Instance& inst = instances_[index];
    int64_t wait = 0;
    size_t late_part = 0;
    for (size_t p = 0; p < inst.parts.size(); ++p) {
      if (inst.parts[p].first == inst.late) {
        late_part = p;
      } else {
        wait += blamable[index][p];
      }
    }
    Straggler& s = by_slot[inst.late];
    ++s.arrived_last;
    // The late rank's time since the previous sync point, by category, and
    // the waits in it (in collectives of other groups), against the same
    // of the ranks it is compared with: the instance's other members, or
    // for a pair, the same end of its replica pairs.
    Categories late_spent{};
    Measured late_where;
    std::pair<size_t, size_t> late_waits{0, 0};
    cmp_spent.clear();
    cmp_where.clear();
    bool complete = measure(inst, late_part, &late_spent, &late_where);
    if (!inst.pair) {
      for (size_t p = 0; complete && p < inst.parts.size(); ++p) {
        if (p == late_part) continue;
        Categories c{};
        Measured m;
        complete = measure(inst, p, &c, &m);
        cmp_spent.push_back(c);
        cmp_where.push_back(m);
      }
    } else {
      // A pipeline's waits by construction are the same in its replicas:
      // only the excess over theirs is anyone's
      // (docs/semantics.md#pipeline-waits).
      const int end = inst.late == pair_ends_[inst.group][0] ? 0 : 1;
      bool replicated = false;
      for (const Replica& rep : replicas_[inst.group]) {
        const int j = FindInstance(rep.group, inst.key);
        if (j < 0 || !instances_[j].synchronized) continue;
        const Instance& x = instances_[j];
        replicated = true;
        for (size_t q = 0; q < x.parts.size(); ++q) {
          if (x.parts[q].first != rep.slot_of_end[end]) continue;
          Categories c{};
          Measured m;
          if (measure(x, q, &c, &m)) {
            cmp_spent.push_back(c);
            cmp_where.push_back(m);
          }
        }
      }
      if (!replicated) ++out_.pairs_without_replicas;
      if (cmp_spent.empty()) complete = false;
    }
    Categories excess{};
    int64_t total_excess = 0;
    int64_t passed_ns = 0;  // Of the comm excess: waiting for others.
    int64_t late_waited = 0;
    // What the late rank is measured against: the median other member; for
    // a pair, the replica that spent least, as its tensor-parallel peers'
    // pairs are replicas too but late with it (one pipeline replica).
    auto baseline = [&](std::vector<int64_t>& v) {
      return inst.pair ? *std::min_element(v.begin(), v.end()) : Median(v);
    };
    if (complete && !cmp_spent.empty()) {
      std::vector<int64_t> others;
      for (int k = 0; k < kCategories; ++k) {
        const int64_t late_ns = late_spent[k];
        // Most categories are 0 on every rank: when no other rank spent less
        // than the late one, the median is no less either and the excess is
        // 0, so the median (a sort per category) is not needed.
        bool any_below = false;
        for (const Categories& c : cmp_spent) any_below |= c[k] < late_ns;
        if (!any_below) continue;
        others.clear();
        for (const Categories& c : cmp_spent) others.push_back(c[k]);
        excess[k] = std::max<int64_t>(0, late_ns - baseline(others));
        total_excess += excess[k];
      }
      // The part of the late rank's comm excess that it spent waiting for
      // other ranks (beyond what the median rank waited) is not its own:
      // it passes to whoever it waited for.
      if (excess[kComm] > 0) {
        late_waited = waits_of(late_where, &late_waits);
        if (late_waited > 0) {
          others.clear();
          std::pair<size_t, size_t> unused;
          for (const Measured& m : cmp_where) {
            others.push_back(waits_of(m, &unused));
          }
          passed_ns = std::clamp<int64_t>(late_waited - baseline(others), 0,
                                          excess[kComm]);
        }
      }
    }
    // The instance's shares: the late rank's own excess by category, and
    // the passed part spread over the instances it waited in, in
    // proportion to its wait there, each by that instance's shares. With no
    // excess (no previous sync point on some rank, or the late rank spent
    // no category longer than the median rank), nothing explains the wait:
    // unattributed.
    BlameShares& shares = shares_of[index];
    BlameShares passed;
    if (total_excess > 0) {
      const double total = static_cast<double>(total_excess);
      for (int k = 0; k < kCategories; ++k) {
        const int64_t own = k == kComm ? excess[k] - passed_ns : excess[k];
        AddShare(shares, inst.late, k, own / total);
      }
      for (size_t k = late_waits.first; passed_ns > 0 && k < late_waits.second;
           ++k) {
        const RankWait& w = rank_waits[inst.late][k];
        const double weight = static_cast<double>(passed_ns) / total *
                              static_cast<double>(w.wait_ns) /
                              static_cast<double>(late_waited);
        for (const BlameShare& b : shares_of[w.instance]) {
          AddShare(passed, b.root, b.category, weight * b.weight);
        }
      }
    } else {
      AddShare(shares, inst.late, kUnattributed, 1.0);
    }
    // Shares that came back to the late rank are its own.
    for (const BlameShare& b : passed) {
      AddShare(shares, b.root, b.category, b.weight);
    }
    Compact(shares);
    // The wait in integer ns over the shares; the rounding remainder goes
    // to the largest, so they add up to the wait.
    int64_t given = 0;
    absl::InlinedVector<int64_t, 4> amounts(shares.size());
    for (size_t k = 0; k < shares.size(); ++k) {
      amounts[k] =
          static_cast<int64_t>(static_cast<double>(wait) * shares[k].weight);
      given += amounts[k];
    }
    if (!amounts.empty()) amounts[0] += wait - given;
    Categories direct_share{};
    int64_t direct_unattributed = 0;
    for (size_t k = 0; k < shares.size(); ++k) {
      const BlameShare& b = shares[k];
      Straggler& root = by_slot[b.root];
      const int64_t ns = amounts[k];
      root.wait_caused_ns += ns;
      if (b.category == kUnattributed) {
        root.unattributed_ns += ns;
      } else if (b.category == kCompute) {
        root.compute_ns += ns;
      } else if (b.category == kComm) {
        root.comm_ns += ns;
      } else {
        root.causes[b.category - 2] += ns;
      }
      if (b.root == inst.late) {
        root.direct_wait_caused_ns += ns;
        if (b.category == kUnattributed) {
          direct_unattributed += ns;
        } else {
          direct_share[b.category] += ns;
        }
      } else {
        via[b.root][inst.late] += ns;
      }
    }
    if (wait > 0 && total_excess == 0) ++out_.unattributed;
    if (options_.keep_instances) {
      CollectiveInstance out;
      out.group = group_names_[inst.group];
      out.key = inst.key;
      out.synchronized = true;
      out.pair = inst.pair;
      out.arrival_ns = inst.arrival_ns;
      out.late_rank = ranks_[inst.late].input->rank;
      out.root_rank = shares.empty() ? out.late_rank
                                     : ranks_[shares.front().root].input->rank;
      out.wait_caused_ns = wait;
      out.compute_ns = direct_share[kCompute];
      out.comm_ns = direct_share[kComm];
      for (int i = 0; i < kNumBubbleCauses; ++i) {
        out.causes[i] = direct_share[2 + i];
      }
      out.unattributed_ns = direct_unattributed;
      for (size_t p = 0; p < inst.parts.size(); ++p) {
        const auto& [slot, c] = inst.parts[p];
        out.parts.push_back({ranks_[slot].input->rank, c->start_ns, c->end_ns,
                             inst.wait_ns[p]});
      }
      kept[index] = std::move(out);
    }
  }
  for (std::optional<CollectiveInstance>& k : kept) {
    if (k) out_.instances.push_back(*std::move(k));
  }
  // docs/semantics.md#stragglers: jitter makes some rank arrive last at
  // every instance; only a rank whose caused wait is a visible part of the
  // ranks' time in collectives is named.
  const int64_t straggler_threshold = StragglerThresholdNs();
  for (size_t slot = 0; slot < ranks_.size(); ++slot) {
    Straggler& s = by_slot[slot];
    for (const auto& [through, ns] : via[slot]) {
      if (ns > 0) s.via.push_back({ranks_[through].input->rank, ns});
    }
    std::sort(s.via.begin(), s.via.end(),
              [](const Straggler::Via& a, const Straggler::Via& b) {
                if (a.wait_ns != b.wait_ns) return a.wait_ns > b.wait_ns;
                return a.rank < b.rank;
              });
    if (s.wait_caused_ns > 0 && s.wait_caused_ns >= straggler_threshold) {
      out_.stragglers.push_back(s);
    }
  }
  std::sort(out_.stragglers.begin(), out_.stragglers.end(),
            [](const Straggler& a, const Straggler& b) {
              if (a.wait_caused_ns != b.wait_caused_ns) {
                return a.wait_caused_ns > b.wait_caused_ns;
              }
              return a.rank < b.rank;
            });
  for (size_t slot = 0; slot < ranks_.size(); ++slot) {
    out_.ranks[slot].wait_caused_ns = by_slot[slot].wait_caused_ns;
    out_.ranks[slot].arrived_last = by_slot[slot].arrived_last;
  }
}

// The replay of docs/semantics.md#what-it-cost. Each rank's used
// collective kernels in start order split its timeline into its own time
// (from the end of one to the start of the next) and the collectives. A
// collective starts when its last member is ready (the end of its previous
// collective plus its own time) and lasts its transfer (the observed end
// less the observed arrival); the job ends with its last collective.
void CollectiveAnalyzer::WhatIf() {
  struct Part {
    int slot = 0;
    int predecessor = -1;  // Instance of the rank's previous used kernel.
    int64_t own_ns = 0;    // Its own time before this kernel.
  };
  std::vector<std::vector<Part>> parts(instances_.size());
  std::vector<int64_t> transfer(instances_.size(), 0);
  std::vector<int64_t> first_ready(ranks_.size(), INT64_MAX);
  // Per rank its used kernels: (start, instance, part).
  std::vector<std::vector<std::tuple<int64_t, int, int>>> kernels(
      ranks_.size());
  for (size_t i = 0; i < instances_.size(); ++i) {
    const Instance& inst = instances_[i];
    if (!inst.synchronized) continue;
    int64_t first_end = INT64_MAX;
    parts[i].resize(inst.parts.size());
    for (size_t p = 0; p < inst.parts.size(); ++p) {
      const auto& [slot, c] = inst.parts[p];
      parts[i][p].slot = slot;
      first_end = std::min(first_end, Corrected(slot, c->end_ns));
      kernels[slot].emplace_back(c->start_ns, static_cast<int>(i),
                                 static_cast<int>(p));
    }
    transfer[i] = std::max<int64_t>(0, first_end - inst.arrival_ns);
  }
  int64_t job_start = INT64_MAX;
  for (size_t slot = 0; slot < ranks_.size(); ++slot) {
    auto& ks = kernels[slot];
    // Usually in order already (instances come by group, then key).
    if (!std::is_sorted(ks.begin(), ks.end())) std::sort(ks.begin(), ks.end());
    for (size_t k = 0; k < ks.size(); ++k) {
      const auto& [start, i, p] = ks[k];
      Part& part = parts[i][p];
      if (k == 0) {
        first_ready[slot] = Corrected(slot, start);
        job_start = std::min(job_start, first_ready[slot]);
        continue;
      }
      const auto& [prev_start, prev_i, prev_p] = ks[k - 1];
      const int64_t prev_end = instances_[prev_i].parts[prev_p].second->end_ns;
      part.predecessor = prev_i;
      // Overlapping collectives (two streams) run as if one after the other.
      part.own_ns = std::max<int64_t>(0, start - prev_end);
    }
  }
  std::vector<int> order;
  for (size_t i = 0; i < instances_.size(); ++i) {
    if (instances_[i].synchronized) order.push_back(static_cast<int>(i));
  }
  if (order.empty()) return;
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return std::tie(instances_[a].arrival_ns, a) <
           std::tie(instances_[b].arrival_ns, b);
  });
  // A straggler's own time before each of its kernels, cut to the median of
  // the other members' own time before the same instance; computed for the
  // parts of the ranks a replay cuts only (-1: not yet).
  std::vector<std::vector<int64_t>> cut(instances_.size());
  for (int i : order) cut[i].assign(parts[i].size(), -1);
  std::vector<int64_t> others;
  auto cut_of = [&](int i, size_t p) {
    int64_t& c = cut[i][p];
    if (c >= 0) return c;
    others.clear();
    for (size_t q = 0; q < parts[i].size(); ++q) {
      if (q != p) others.push_back(parts[i][q].own_ns);
    }
    c = others.empty() ? parts[i][p].own_ns
                       : std::min(parts[i][p].own_ns, Median(others));
    return c;
  };
  std::vector<int64_t> end(instances_.size(), 0);
  // The job's end with the own time of the ranks in `cut_slots` cut.
  auto replay = [&](const std::vector<bool>& cut_slots) {
    std::optional<EventNs> last;  // `order` is not empty.
    std::vector<bool> done(instances_.size(), false);
    for (int i : order) {
      std::optional<EventNs> arrival;  // Of the parts so far (at least one).
      for (size_t p = 0; p < parts[i].size(); ++p) {
        const Part& part = parts[i][p];
        // A predecessor not replayed yet (kernels whose order differs
        // between ranks) counts with its observed end.
        const int64_t ready = part.predecessor < 0 ? first_ready[part.slot]
                              : done[part.predecessor]
                                  ? end[part.predecessor]
                                  : instances_[part.predecessor].arrival_ns +
                                        transfer[part.predecessor];
        const int64_t own = cut_slots[part.slot] ? cut_of(i, p) : part.own_ns;
        RaiseTo(arrival, ready + own);
      }
      end[i] = *arrival + transfer[i];
      done[i] = true;
      RaiseTo(last, end[i]);
    }
    return *last - job_start;
  };
  std::vector<bool> none(ranks_.size(), false);
  out_.job_ns = replay(none);
  absl::flat_hash_map<int32_t, int> slot_by_rank;
  for (size_t slot = 0; slot < ranks_.size(); ++slot) {
    slot_by_rank[ranks_[slot].input->rank] = static_cast<int>(slot);
  }
  std::vector<bool> all = none;
  int replays = 0;
  int64_t total_caused = 0;
  for (const Straggler& s : out_.stragglers) total_caused += s.wait_caused_ns;
  for (Straggler& s : out_.stragglers) {
    const int slot = slot_by_rank.at(s.rank);
    // Only ranks late for their own time are roots to cut.
    if (s.direct_wait_caused_ns <= 0) continue;
    // A rank that caused a sliver of the wait (jitter) is no root worth a
    // replay of its own.
    if (s.wait_caused_ns * 100 < total_caused) continue;
    all[slot] = true;
    if (replays++ >= options_.max_what_if_stragglers) continue;
    std::vector<bool> one = none;
    one[slot] = true;
    s.saved_ns = std::max<int64_t>(0, out_.job_ns - replay(one));
  }
  out_.job_ns_without_stragglers = replay(all);
}

void CollectiveAnalyzer::Summarize() {
  // Waits per rank as intervals, so that waits of overlapping collectives
  // (two streams) count once.
  std::vector<std::vector<Interval>> waits(ranks_.size());
  for (const Instance& inst : instances_) {
    if (!inst.synchronized) continue;
    for (const auto& [slot, c] : inst.parts) {
      const int64_t local_arrival = Local(slot, inst.arrival_ns);
      const int64_t wait_end = std::min(c->end_ns, local_arrival);
      if (wait_end > c->start_ns)
        waits[slot].push_back({c->start_ns, wait_end});
    }
  }
  for (size_t slot = 0; slot < ranks_.size(); ++slot) {
    RankState& r = ranks_[slot];
    RankCollectiveStats& s = out_.ranks[slot];
    s.rank = r.input->rank;
    s.device = r.input->device;
    s.host = r.input->host;
    s.file = r.input->file;
    s.pid = r.input->pid;
    s.stats = r.input->stats;
    s.comm_ns = r.input->comm_ns;
    s.comm_exposed_ns = r.input->comm_exposed_ns;
    // The waits lie inside the rank's collective kernels, where the digest
    // keeps the compute busy time.
    const IntervalSet& compute = r.input->compute_in_kernels;
    IntervalSet wait = IntervalSet::FromIntervals(std::move(waits[slot]));
    for (const Interval& i : wait.intervals()) {
      s.comm_wait_ns +=
          (i.end - i.start) -
          compute.CoveredLength(i.start, i.end, &r.compute_cursor);
    }
    if (options_.keep_rank_time) {
      // Its waits; AnalyzeCollectives adds the trace's sets (a digest keeps
      // only the compute inside its collective kernels).
      out_.rank_time.resize(ranks_.size());
      out_.rank_time[slot].waits = std::move(wait);
    }
  }
}

absl::StatusOr<CollectiveAnalysis> CollectiveAnalyzer::Run() {
  if (absl::Status s = CheckInputs(); !s.ok()) return s;
  CollectKernels();
  if (absl::Status s = CheckGroupSizes(); !s.ok()) return s;
  ChooseKey();
  BuildInstances();
  EstimateClocks();
  MeasureInstances();
  MeasureWaits();
  Attribute();
  WhatIf();
  Summarize();
  return std::move(out_);
}

// The devices of `trace` that ran kernels, by number.
std::vector<int32_t> KernelDevices(const Trace& trace) {
  absl::flat_hash_set<int32_t> seen;
  for (const GpuActivity& a : trace.gpu) {
    if (a.kind == GpuActivityKind::kKernel) seen.insert(a.device);
  }
  std::vector<int32_t> devices(seen.begin(), seen.end());
  std::sort(devices.begin(), devices.end());
  return devices;
}

}  // namespace

// One rank per device of each trace (docs/semantics.md#collective-kernels):
// a single trace's devices are its ranks; single-device traces that all say
// their rank keep it; otherwise ranks are numbered in input order.
std::vector<RankInput> RanksOfTraces(absl::Span<const Trace> traces,
                                     absl::Span<const std::string> files) {
  std::vector<std::vector<int32_t>> devices;
  bool all_single_with_rank = true;
  for (const Trace& t : traces) {
    devices.push_back(KernelDevices(t));
    if (devices.back().empty()) devices.back().push_back(0);
    all_single_with_rank &= devices.back().size() == 1 && t.rank >= 0;
  }
  std::vector<RankInput> ranks;
  int32_t next = 0;
  for (size_t i = 0; i < traces.size(); ++i) {
    for (int32_t device : devices[i]) {
      RankInput in;
      in.trace = &traces[i];
      in.device = device;
      in.rank = all_single_with_rank ? traces[i].rank
                : traces.size() == 1 ? device
                                     : next;
      ++next;
      in.host = traces[i].host;
      in.pid = traces[i].pid;
      in.clock_domain = traces[i].host.empty()
                            ? absl::StrCat("file:", files[i])
                            : absl::StrCat("host:", traces[i].host);
      in.file = files[i];
      ranks.push_back(std::move(in));
    }
  }
  return ranks;
}

const char* CollectiveKeyName(CollectiveKey key) {
  switch (key) {
    case CollectiveKey::kProcessGroupSeq:
      return "pg_seq";
    case CollectiveKey::kProcessGroupOrder:
      return "pg_order";
    case CollectiveKey::kStreamOrder:
      return "stream_order";
  }
  return "stream_order";
}

int64_t LatenessBreakdown::total_ns() const {
  return compute_ns + comm_ns + AttributionTotal(bubble);
}

double RankCollectiveStats::busy_useful_utilization() const {
  if (stats.span_ns <= 0) return 0.0;
  return static_cast<double>(stats.compute_ns - comm_wait_ns) /
         static_cast<double>(stats.span_ns);
}

absl::StatusOr<CollectiveAnalysis> AnalyzeDigests(
    absl::Span<const RankDigest> digests, const CollectiveOptions& options) {
  return CollectiveAnalyzer(digests, options).Run();
}

// The single-stage path of docs/architecture.md#the-split: each distinct
// trace digested once, then the digests analyzed together.
absl::StatusOr<CollectiveAnalysis> AnalyzeCollectives(
    absl::Span<const RankInput> ranks, const CollectiveOptions& options,
    const AnalyzerOptions& analyzer_options) {
  if (absl::Status s = CheckRanks(ranks,
                                  [](const RankInput& in) {
                                    return in.trace == nullptr ? nullptr
                                                               : &in.trace->job;
                                  });
      !s.ok()) {
    return s;
  }
  // The distinct traces in order of first appearance, and the inputs of
  // each; every trace's times are checked before any is analyzed.
  std::vector<const Trace*> traces;
  std::vector<std::vector<size_t>> of_trace;
  absl::flat_hash_map<const Trace*, size_t> slot;
  for (size_t i = 0; i < ranks.size(); ++i) {
    auto [it, inserted] = slot.try_emplace(ranks[i].trace, traces.size());
    if (inserted) {
      if (absl::Status s = CheckEventTimes(*ranks[i].trace); !s.ok()) return s;
      traces.push_back(ranks[i].trace);
      of_trace.emplace_back();
    }
    of_trace[it->second].push_back(i);
  }
  std::vector<RankDigest> digests(ranks.size());
  std::vector<Analysis> analyses;
  analyses.reserve(traces.size());
  // With keep_rank_time: each trace's kernel sets, and its gaps kept.
  std::vector<std::vector<DeviceKernelSets>> kernel_sets(traces.size());
  AnalyzerOptions digest_options = analyzer_options;
  if (options.keep_rank_time) digest_options.keep_gaps = true;
  std::vector<RankInput> mine;
  for (size_t t = 0; t < traces.size(); ++t) {
    mine.clear();
    for (size_t i : of_trace[t]) mine.push_back(ranks[i]);
    absl::StatusOr<TraceDigests> d =
        digest_internal::DigestCheckedTrace(mine, digest_options);
    if (!d.ok()) return d.status();
    for (size_t k = 0; k < of_trace[t].size(); ++k) {
      digests[of_trace[t][k]] = std::move(d->digests[k]);
    }
    analyses.push_back(std::move(d->analysis));
    if (options.keep_rank_time) kernel_sets[t] = std::move(d->kernel_sets);
  }
  absl::StatusOr<CollectiveAnalysis> out = AnalyzeDigests(digests, options);
  if (!out.ok()) return out.status();
  if (options.keep_rank_time) {
    // A rank's timeline is drawn from its whole device (its trace's kernel
    // sets), beside the waits the cross-rank analysis measured.
    absl::flat_hash_map<int32_t, size_t> trace_of_rank;
    for (size_t t = 0; t < of_trace.size(); ++t) {
      for (size_t i : of_trace[t]) trace_of_rank[ranks[i].rank] = t;
    }
    for (size_t slot = 0; slot < out->ranks.size(); ++slot) {
      CollectiveAnalysis::RankTime& time = out->rank_time[slot];
      const RankCollectiveStats& rank = out->ranks[slot];
      time.trace = static_cast<int>(trace_of_rank.at(rank.rank));
      for (const DeviceKernelSets& k : kernel_sets[time.trace]) {
        if (k.device != rank.device) continue;
        time.compute = k.compute;
        time.collective = k.collective;
      }
    }
  }
  out->traces = std::move(traces);
  out->analyses = std::move(analyses);
  return out;
}

}  // namespace bubblewatch
