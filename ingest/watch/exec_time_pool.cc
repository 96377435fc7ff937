#include "ingest/watch/exec_time_pool.h"

#include <algorithm>
#include <iterator>
#include <optional>

#include "absl/time/time.h"
#include "ingest/inspector/inspector_job.h"
#include "schemas/time_types.h"
#include "schemas/trace.h"

namespace bubblewatch {
namespace {

// Dump markers this close together are one dump (the plugin writes each
// communicator's marker of one dump at nearly the same time).
constexpr int64_t kDumpRoundUs = 1'000;
// A log's first dump: its records are spread over the second before it
// (its interval is not known; a longer spread than the floor's lag would
// lift the timeline inside the first dump, stretching it with idle time).
constexpr int64_t kFirstIntervalUs = 1'000'000;

constexpr char kGivenUp[] =
    "exec-time only: instance never complete (a member's ring dropped it or "
    "its process stopped; not sent)";
constexpr char kLate[] =
    "exec-time only: record after its instance was placed or given up (not "
    "sent)";
constexpr char kClaimed[] =
    "exec-time only: records of a communicator rank claimed by two logs (not "
    "sent)";
constexpr char kDuplicate[] =
    "exec-time only: duplicate (communicator, coll_sn) in one log (not sent)";
constexpr char kRange[] =
    "exec-time only: exec times past the accepted time range (not sent)";

}  // namespace

int64_t ExecTimePool::TimeOf(const Proc& p, int64_t dump_us, int32_t pos,
                             int32_t size) const {
  if (dump_us < 0) dump_us = p.dumps.empty() ? 0 : *p.dumps.rbegin();
  // Timestamps the reader accepts are far inside this; garbage stays
  // ordered.
  dump_us = std::clamp<int64_t>(dump_us, 0, kMaxEventTimeNs / 1000);
  if (pos < 0 || size <= 0 || pos >= size) return dump_us * 1000;
  // The previous dump: the latest one at least a round before.
  auto it = p.dumps.upper_bound(dump_us - kDumpRoundUs);
  const int64_t prev =
      it == p.dumps.begin() ? dump_us - kFirstIntervalUs : *std::prev(it);
  const __int128 span = static_cast<__int128>(dump_us - prev) * 1000;
  return static_cast<int64_t>(static_cast<__int128>(prev) * 1000 +
                              span * (pos + 1) / size);
}

void ExecTimePool::Add(const std::string& name, const InspectorLog& log,
                       int64_t pos_offset) {
  Proc& p = procs_[name];
  for (int64_t ts : log.dump_timestamps_us) p.dumps.insert(ts);
  for (const InspectorComm& c : log.comms) {
    if (c.rank < 0 || p.rank_in.contains(c.id)) continue;
    Comm& cm = comms_[c.id];
    cm.n_ranks = std::max(cm.n_ranks, c.n_ranks);
    auto [it, fresh] = cm.members.emplace(c.rank, name);
    if (!fresh && it->second != name) continue;  // Counted per record.
    p.rank_in[c.id] = c.rank;
  }
  for (const InspectorOp& op : log.ops) {
    if (op.p2p || op.kernel_start_us >= 0) continue;
    const std::string& id = log.comms[op.comm].id;
    if (!p.rank_in.contains(id)) {
      ++counts_[kClaimed];
      continue;
    }
    Comm& cm = comms_[id];
    auto found = insts_.find({id, op.sn});
    if (found == insts_.end() && cm.max_decided && op.sn <= *cm.max_decided) {
      ++counts_[kLate];
      continue;
    }
    int32_t pos = op.dump_pos;
    if (pos >= 0 && op.dump_marker == 1 && pos_offset > 0) {
      pos =
          static_cast<int32_t>(std::min<int64_t>(pos + pos_offset, INT32_MAX));
    }
    const int64_t t = TimeOf(p, op.dump_us, pos, op.dump_size);
    Inst& in = found != insts_.end() ? found->second : insts_[{id, op.sn}];
    if (in.parts.contains(name)) {
      ++counts_[kDuplicate];
      continue;
    }
    const bool first_part = in.parts.empty();
    if (!first_part) pending_.erase({in.key_ns, id, op.sn});
    if (in.coll.empty()) in.coll = log.op_names[op.name];
    in.parts[name] = {op.exec_us, t};
    in.key_ns = first_part ? t : std::max(in.key_ns, t);
    pending_.insert({in.key_ns, id, op.sn});
    ++held_;
  }
}

bool ExecTimePool::Whole() const {
  const auto [seen, size] = WholeProgress();
  return size > 0 && seen == size;
}

std::pair<int64_t, int64_t> ExecTimePool::WholeProgress() const {
  const Comm* largest = nullptr;
  for (const auto& [id, c] : comms_) {  // By id: ties keep the lower.
    if (largest == nullptr || c.n_ranks > largest->n_ranks) largest = &c;
  }
  if (largest == nullptr) return {0, 0};
  return {static_cast<int64_t>(largest->members.size()), largest->n_ranks};
}

int64_t ExecTimePool::SeenUs() const {
  std::optional<int64_t> first, newest;  // None: no dump yet.
  for (const auto& [name, p] : procs_) {
    if (p.dumps.empty()) continue;
    LowerTo(first, *p.dumps.begin());
    RaiseTo(newest, *p.dumps.rbegin());
  }
  return first ? *newest - *first : 0;
}

std::optional<EventNs> ExecTimePool::SafeBound() const {
  std::optional<int64_t> newest_dump;
  for (const auto& [name, p] : procs_) {
    if (!p.dumps.empty()) RaiseTo(newest_dump, *p.dumps.rbegin());
  }
  if (!newest_dump) return std::nullopt;
  const int64_t newest = *newest_dump;
  const int64_t expire_us = absl::ToInt64Microseconds(options_.expire);
  std::optional<int64_t> bound;  // None: no process waited for.
  for (const auto& [name, p] : procs_) {
    if (p.dumps.empty()) continue;
    const int64_t last = *p.dumps.rbegin();
    if (last < newest - expire_us) continue;  // Stopped: not waited for.
    // Its next records lie after the previous dump of its next dump, which
    // is no earlier than this.
    auto it = p.dumps.upper_bound(last - kDumpRoundUs);
    const int64_t low =
        it == p.dumps.begin() ? last - kFirstIntervalUs : *std::prev(it);
    LowerTo(bound, low);
  }
  if (!bound) return std::nullopt;
  return std::clamp<int64_t>(*bound, -kMaxEventTimeNs / 1000,
                             kMaxEventTimeNs / 1000) *
         1000;
}

bool ExecTimePool::Complete(const std::string& comm, const Inst& in) const {
  auto it = comms_.find(comm);
  if (it == comms_.end()) return false;
  const Comm& c = it->second;
  if (c.n_ranks <= 0 || static_cast<int32_t>(in.parts.size()) != c.n_ranks ||
      static_cast<int32_t>(c.members.size()) != c.n_ranks) {
    return false;
  }
  for (const auto& [rank, log] : c.members) {
    if (!in.parts.contains(log)) return false;
  }
  return true;
}

std::vector<PlacedInstance> ExecTimePool::Advance(int64_t limit, bool flush) {
  std::vector<PlacedInstance> out;
  if (!Whole()) return out;
  // A flush places below the largest int64: everything.
  const std::optional<EventNs> bound =
      flush ? std::optional<EventNs>(INT64_MAX) : SafeBound();
  if (!bound) return out;  // Nothing is safe yet.
  const int64_t expire_ns = absl::ToInt64Nanoseconds(options_.expire);
  const int64_t lag_ns = absl::ToInt64Nanoseconds(options_.lag);
  std::vector<ExecTimeMember> members;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (limit >= 0 && static_cast<int64_t>(out.size()) >= limit) break;
    const auto [key, comm, sn] = *it;
    if (key > *bound) break;
    auto found = insts_.find({comm, sn});
    Inst& in = found->second;
    Comm& c = comms_[comm];
    if (Complete(comm, in)) {
      // Members by rank; every one ready at least at the job-wide floor.
      auto ready_of = [&](const std::string& log) {
        return std::max(procs_[log].ready_ns, floor_ns_);
      };
      int64_t longest = 0;
      members.clear();
      for (const auto& [rank, log] : c.members) {
        members.push_back({ready_of(log), in.parts[log].exec_us * 1000});
        longest = std::max(longest, members.back().exec_ns);
      }
      int64_t end = ExecTimeInstanceEnd(members);
      if (end >= 0 && end < key - lag_ns && key - longest > floor_ns_) {
        // Behind wall time by more than the lag: lift every process.
        floor_ns_ = key - longest;
        members.clear();
        for (const auto& [rank, log] : c.members) {
          members.push_back({ready_of(log), in.parts[log].exec_us * 1000});
        }
        end = ExecTimeInstanceEnd(members);
      }
      if (end < 0) {
        ++counts_[kRange];
      } else {
        PlacedInstance placed;
        placed.comm = comm;
        placed.sn = sn;
        placed.coll = in.coll;
        placed.n_ranks = c.n_ranks;
        placed.end_ns = end;
        for (const auto& [rank, log] : c.members) {
          placed.members.push_back({log, end - in.parts[log].exec_us * 1000});
          procs_[log].ready_ns = end;
        }
        out.push_back(std::move(placed));
        ++placed_;
      }
    } else if (const std::optional<EventNs> cutoff =
                   EarlierBy(*bound, expire_ns);
               !flush && cutoff && key <= *cutoff) {
      ++counts_[kGivenUp];
    } else {
      ++it;
      continue;
    }
    held_ -= static_cast<int64_t>(in.parts.size());
    RaiseTo(c.max_decided, sn);
    insts_.erase(found);
    it = pending_.erase(it);
  }
  return out;
}

}  // namespace bubblewatch
