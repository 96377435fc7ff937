#include "schemas/trace.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/text_escape.h"

namespace bubblewatch {
namespace {

absl::Status CheckInterval(const Trace& trace, absl::string_view what,
                           size_t index, NameId name, int64_t start_ns,
                           int64_t end_ns) {
  const bool start_ok = IsAcceptedEventTime(start_ns);
  if (start_ok && IsAcceptedEventTime(end_ns) && end_ns >= start_ns) {
    return absl::OkStatus();
  }
  const std::string label = absl::StrCat(
      what, " #", index, " '",
      absl::CHexEscape(name < trace.names.size()
                           ? absl::string_view(trace.names[name]).substr(0, 80)
                           : absl::string_view("?")),
      "'");
  if (start_ok && IsAcceptedEventTime(end_ns)) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, " ends (", end_ns, " ns) before it starts (", start_ns, " ns)"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      label, " ", start_ok ? "ends" : "starts", " at ",
      start_ok ? end_ns : start_ns,
      " ns, outside the accepted times (within +-", kMaxEventTimeNs,
      " ns, about 146 years, of the clock's epoch)"));
}

// True if every element's [start, end] is accepted: one branch-free pass, so
// that checking every event costs little beside analyzing it (the readers,
// the analyzer and the collectives matching each check). Only a trace that
// fails it pays for finding and naming the first bad event.
template <typename T, typename Start, typename End>
bool AllIntervalsAccepted(const std::vector<T>& events, Start start, End end) {
  // Every event accepted and ending at or after its start: then the least
  // start and the greatest end are within bounds, and the other bound of
  // each time follows (-max <= s <= t <= max). A minimum, a maximum and one
  // comparison per event, instead of range checks of both times.
  bool ordered = true;
  int64_t min_start = 0;
  int64_t max_end = 0;
  for (const T& e : events) {
    const int64_t s = start(e);
    const int64_t t = end(e);
    ordered &= t >= s;
    min_start = std::min(min_start, s);
    max_end = std::max(max_end, t);
  }
  return ordered && min_start >= -kMaxEventTimeNs && max_end <= kMaxEventTimeNs;
}

}  // namespace

bool IsCollectiveKernelName(absl::string_view name) {
  absl::ConsumePrefix(&name, "void ");
  if (name.size() < 4) return false;
  absl::string_view head = name.substr(0, 4);
  return absl::EqualsIgnoreCase(head, "nccl") ||
         absl::EqualsIgnoreCase(head, "rccl");
}

bool IsPointToPointName(absl::string_view collective) {
  return collective == "send" || collective == "recv";
}

std::vector<int32_t> ParseGroupRanks(absl::string_view text) {
  std::vector<int32_t> ranks;
  text = absl::StripAsciiWhitespace(text);
  if (!absl::ConsumePrefix(&text, "[") || !absl::ConsumeSuffix(&text, "]")) {
    return ranks;
  }
  if (absl::StripAsciiWhitespace(text).empty()) return ranks;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int32_t r = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &r)) return {};
    ranks.push_back(r);
  }
  return ranks;
}

void NumberPointToPointPairs(Trace& trace) {
  std::vector<CollectiveKernel>& all = trace.collectives;
  for (const CollectiveKernel& c : all) {
    if (c.pair_index >= 0) return;
  }
  // Which rank lists name exactly two ranks, parsed once per name.
  absl::flat_hash_map<NameId, bool> two_ranks;
  // (device, process group, 0 and the list's name, or 1 and the peer).
  using PairKey = std::tuple<int32_t, NameId, int, int64_t>;
  std::vector<std::pair<PairKey, size_t>> sends;
  for (size_t i = 0; i < all.size(); ++i) {
    const CollectiveKernel& c = all[i];
    if (c.collective == kNoName ||
        !IsPointToPointName(trace.Name(c.collective))) {
      continue;
    }
    bool listed = false;
    if (c.group_ranks != kNoName) {
      auto [it, inserted] = two_ranks.try_emplace(c.group_ranks, false);
      if (inserted) {
        it->second = ParseGroupRanks(trace.Name(c.group_ranks)).size() == 2;
      }
      listed = it->second;
    }
    if (listed) {
      sends.push_back({{c.device, c.process_group, 0, c.group_ranks}, i});
    } else if (c.peer >= 0) {
      sends.push_back({{c.device, c.process_group, 1, c.peer}, i});
    }
  }
  // By pair, then in the order the analysis takes a rank's kernels.
  std::sort(sends.begin(), sends.end(), [&](const auto& a, const auto& b) {
    const CollectiveKernel& x = all[a.second];
    const CollectiveKernel& y = all[b.second];
    return std::tie(a.first, x.start_ns, x.end_ns, x.stream, a.second) <
           std::tie(b.first, y.start_ns, y.end_ns, y.stream, b.second);
  });
  int64_t k = 0;
  for (size_t j = 0; j < sends.size(); ++j) {
    if (j > 0 && sends[j].first != sends[j - 1].first) k = 0;
    all[sends[j].second].pair_index = k++;
  }
}

void EscapeUnprintableNames(Trace* trace) {
  auto escape = [](std::string& name) {
    if (!IsPrintableUtf8(name)) name = EscapeForLog(name);
  };
  for (std::string& name : trace->names) escape(name);
  escape(trace->job);
  escape(trace->host);
}

absl::Status CheckEventTimes(const Trace& trace) {
  const bool gpu_ok = AllIntervalsAccepted(
      trace.gpu, [](const GpuActivity& a) { return a.start_ns; },
      [](const GpuActivity& a) { return a.end_ns; });
  const bool cpu_ok = AllIntervalsAccepted(
      trace.cpu, [](const CpuEvent& e) { return e.start_ns; },
      [](const CpuEvent& e) { return e.end_ns; });
  for (size_t i = 0; !gpu_ok && i < trace.gpu.size(); ++i) {
    const GpuActivity& a = trace.gpu[i];
    if (absl::Status s = CheckInterval(trace, "GPU activity", i, a.name,
                                       a.start_ns, a.end_ns);
        !s.ok()) {
      return s;
    }
  }
  for (size_t i = 0; !cpu_ok && i < trace.cpu.size(); ++i) {
    const CpuEvent& e = trace.cpu[i];
    if (absl::Status s =
            CheckInterval(trace, "CPU event", i, e.name, e.start_ns, e.end_ns);
        !s.ok()) {
      return s;
    }
  }
  const NameId names = static_cast<NameId>(trace.names.size());
  for (size_t i = 0; i < trace.collectives.size(); ++i) {
    const CollectiveKernel& c = trace.collectives[i];
    if (absl::Status s = CheckInterval(trace, "collective kernel", i,
                                       c.kernel_name, c.start_ns, c.end_ns);
        !s.ok()) {
      return s;
    }
    for (NameId id : {c.collective, c.process_group, c.group_ranks, c.dtype}) {
      if (id != kNoName && id >= names) {
        return absl::InvalidArgumentError(absl::StrCat(
            "collective kernel #", i, " names string #", id, " of ", names));
      }
    }
  }
  return absl::OkStatus();
}

NameInterner::NameInterner(Trace* trace) : trace_(trace) {
  ids_.reserve(trace_->names.size());
  for (NameId i = 0; i < trace_->names.size(); ++i) {
    ids_.emplace(trace_->names[i], i);
  }
}

NameId NameInterner::Intern(absl::string_view name) {
  auto it = ids_.find(name);
  if (it != ids_.end()) return it->second;
  NameId id = static_cast<NameId>(trace_->names.size());
  trace_->names.emplace_back(name);
  ids_.emplace(std::string(name), id);
  return id;
}

}  // namespace bubblewatch
