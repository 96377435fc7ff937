#include "cli/collectives_report.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "analysis/interval_set.h"
#include "base/human_duration.h"
#include "base/json_writer.h"
#include "cli/text_style.h"
#include "schemas/analysis_json.h"

namespace bubblewatch {
namespace {

double Ratio(int64_t part, int64_t whole) {
  return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole)
                   : 0.0;
}

// A straggler's wait by category, largest first, for the text report.
struct Share {
  std::string category;
  int64_t ns;
  std::string advice;
};

std::vector<Share> Shares(const Straggler& s) {
  std::vector<Share> shares;
  shares.push_back({"compute", s.compute_ns,
                    "it computes longer than the others: balance the work "
                    "(uneven shards or sequence lengths) or check that GPU "
                    "for throttling"});
  shares.push_back({"comm", s.comm_ns,
                    "it spends longer in other collectives before this one: "
                    "look at its other process groups"});
  for (BubbleCause c : kAllBubbleCauses) {
    shares.push_back({std::string(BubbleCauseName(c)),
                      s.causes[static_cast<int>(c)],
                      std::string(BubbleCauseAdvice(c))});
  }
  if (s.unattributed_ns > 0) {
    shares.push_back({"unattributed", s.unattributed_ns,
                      "no previous sync point, or no excess over the median "
                      "rank"});
  }
  std::stable_sort(shares.begin(), shares.end(),
                   [](const Share& a, const Share& b) { return a.ns > b.ns; });
  std::erase_if(shares, [](const Share& s) { return s.ns <= 0; });
  return shares;
}

// One line on the clocks when the ranks have several
// (docs/semantics.md#clocks): how many were put on the reference clock, how
// well the solution fits and how far the clocks drift, and which ranks no
// chain of instances ties to it.
std::string ClocksLine(const CollectiveAnalysis& c) {
  int64_t corrected = 0;
  int64_t others = 0;  // Ranks not on the reference's clock.
  int64_t residual = 0;
  double drift = 0;
  std::vector<int32_t> apart;
  for (const RankCollectiveStats& r : c.ranks) {
    if (!r.clock_connected) apart.push_back(r.rank);
    if (!r.clock_connected || r.clock_corrected) ++others;
    if (r.clock_connected) residual = std::max(residual, r.clock_residual_ns);
    if (!r.clock_corrected) continue;
    ++corrected;
    drift = std::max(drift, std::abs(r.clock_drift_ns_per_s));
  }
  if (corrected == 0 && apart.empty()) return "";
  std::string out = absl::StrCat("  Clocks: ", corrected, " of ", others,
                                 " ranks on other clocks put on rank ",
                                 c.ranks.front().rank, "'s clock");
  if (corrected > 0) {
    absl::StrAppend(&out, absl::StrFormat(", residual <= %.1f us RMS, drift <= "
                                          "%.3f us/s",
                                          JsonUs(residual), drift / 1e3));
  }
  if (!apart.empty()) {
    absl::StrAppend(&out, "; not connected (uncorrected): rank",
                    apart.size() == 1 ? " " : "s ", absl::StrJoin(apart, ", "));
  }
  return out + "\n";
}

}  // namespace

std::string RenderCollectivesText(const CollectiveAnalysis& c, bool color) {
  Styler st(color);
  std::string out;
  const size_t n = c.ranks.size();
  std::string of = absl::StrCat(n, " rank", n == 1 ? "" : "s");
  if (c.world_size > static_cast<int32_t>(n)) {
    absl::StrAppend(&of, " of ", c.world_size,
                    " (sampled: waits among these only)");
  }
  absl::StrAppend(&out, "\n", st.Bold("Ranks"), "  ", of, "\n");
  absl::StrAppend(
      &out,
      absl::StrFormat("  %4s %6s %8s %8s %10s %10s %10s %10s %6s "
                      "%10s  %s\n",
                      "rank", "device", "util", "useful", "comm", "exposed",
                      "waited", "caused", "last", "clock", "file"));
  for (const RankCollectiveStats& r : c.ranks) {
    std::string clock = "-";
    if (r.clock_corrected) {
      clock = absl::StrFormat("%+.0f us", JsonUs(r.clock_offset_ns));
    }
    absl::StrAppend(
        &out,
        absl::StrFormat(
            "  %4d %6d %8s %8s %10s %10s %10s %10s %6d %10s  %s\n", r.rank,
            r.device, Percent(r.stats.utilization()),
            Percent(r.busy_useful_utilization()), HumanDuration(r.comm_ns),
            HumanDuration(r.comm_exposed_ns), HumanDuration(r.comm_wait_ns),
            HumanDuration(r.wait_caused_ns), r.arrived_last, clock,
            Shorten(r.file, 40)));
  }

  absl::StrAppend(&out, ClocksLine(c));
  return out + RenderCollectivesSummaryText(c, color);
}

std::string RenderCollectivesSummaryText(const CollectiveAnalysis& c,
                                         bool color,
                                         const CollectivesTextOptions& o) {
  Styler st(color);
  std::string out;
  absl::StrAppend(&out, "\n", st.Bold("Collectives and stragglers"), "\n");
  absl::StrAppend(
      &out, "  ", c.collective_kernels, " collective kernels; instances by ",
      CollectiveKeyName(c.key), ": ", c.matched, " matched, ", c.unmatched,
      " unmatched (not on every rank), ", c.unsynchronized,
      " unsynchronized (ends disagree), ", c.used, " used\n");
  if (c.seq_backwards > 0) {
    absl::StrAppend(&out, "  ", c.seq_backwards,
                    " kernels skipped: their Seq went backwards\n");
  }
  if (c.seq_jumps > 0) {
    absl::StrAppend(&out, "  ", c.seq_jumps,
                    " kernels whose Seq jumped ahead (the instances skipped "
                    "over are missing on their rank)\n");
  }
  if (c.members_inferred) {
    absl::StrAppend(&out,
                    "  Group members inferred: the kernels do not list "
                    "`Process Group Ranks`, so a group's members are the "
                    "input ranks with kernels of it\n");
  }
  if (c.unpaired > 0) {
    absl::StrAppend(&out, "  ", c.unpaired,
                    " sends/recvs whose other end is unknown (unmatched)\n");
  }
  if (c.pairs_without_replicas > 0) {
    absl::StrAppend(&out, "  ", c.pairs_without_replicas,
                    " point-to-point pairs with no replica pipeline to "
                    "compare with: their waits blame no one\n");
  }
  if (c.used == 0) {
    absl::StrAppend(&out,
                    "  No instance ended together on every rank: waits are "
                    "unknown, not zero.\n");
    return out;
  }
  int64_t waited = 0;
  int64_t span = 0;
  for (const RankCollectiveStats& r : c.ranks) {
    waited += r.comm_wait_ns;
    span += r.stats.span_ns;
  }
  if (o.timeline_from_exec_times) {
    absl::StrAppend(&out, "  Processes waited in collectives ",
                    HumanDuration(waited), "\n");
  } else {
    absl::StrAppend(&out, "  GPUs waited in collectives ",
                    HumanDuration(waited), " (", Percent(Ratio(waited, span)),
                    " of the ranks' GPU time)\n");
  }
  if (c.stragglers.empty()) {
    absl::StrAppend(&out, "  No rank made the others wait.\n");
    return out;
  }
  int shown = 0;
  for (const Straggler& s : c.stragglers) {
    if (++shown > 3) break;
    std::vector<Share> shares = Shares(s);
    if (o.own_time_unknown) {
      // Only collectives are known: whatever kept it out of them (compute,
      // data loading, the host) is one category.
      int64_t own = s.compute_ns;
      for (int64_t ns : s.causes) own += ns;
      shares.clear();
      shares.push_back(
          {"own time", own,
           "it spends longer outside collectives than its peers; the logs "
           "cannot say on what: profile this process (a profiler snapshot) "
           "for the cause"});
      shares.push_back({"comm", s.comm_ns,
                        "it spends longer in other collectives before this "
                        "one: look at its other communicators"});
      shares.push_back({"unattributed", s.unattributed_ns,
                        "no previous sync point, or no excess over the "
                        "median rank"});
      std::stable_sort(
          shares.begin(), shares.end(),
          [](const Share& a, const Share& b) { return a.ns > b.ns; });
      std::erase_if(shares, [](const Share& sh) { return sh.ns <= 0; });
    }
    // The one line an on-call engineer needs: who, where, why, what it
    // cost (docs/semantics.md#root-cause, #what-it-cost).
    std::string who = absl::StrCat("rank ", s.rank);
    if (!s.host.empty()) absl::StrAppend(&who, " on ", s.host);
    if (s.pid >= 0) absl::StrAppend(&who, " pid ", s.pid);
    std::string line =
        absl::StrCat(st.Bold(who), ": ",
                     shares.empty() ? "unexplained" : shares[0].category);
    if (s.saved_ns >= 0 && c.job_ns > 0) {
      if (o.timeline_from_exec_times) {
        // The job's length is not known from exec times, what it cost is.
        absl::StrAppend(&line, ", cost the job ", HumanDuration(s.saved_ns));
      } else {
        absl::StrAppend(&line, ", ", HumanDuration(s.saved_ns),
                        " of the job's ", HumanDuration(c.job_ns));
      }
    }
    absl::StrAppend(&out, "  ", line, "\n");
    absl::StrAppend(&out, "    caused ", HumanDuration(s.wait_caused_ns),
                    " of waits (", Percent(Ratio(s.wait_caused_ns, waited)),
                    "), last in ", s.arrived_last, " of ", c.used,
                    " instances");
    if (!s.via.empty()) {
      std::vector<std::string> through;
      for (size_t i = 0; i < s.via.size() && i < 4; ++i) {
        through.push_back(absl::StrCat("rank ", s.via[i].rank, " ",
                                       HumanDuration(s.via[i].wait_ns)));
      }
      if (s.via.size() > 4) {
        through.push_back(absl::StrCat(s.via.size() - 4, " more"));
      }
      absl::StrAppend(&out, "; ",
                      HumanDuration(s.wait_caused_ns - s.direct_wait_caused_ns),
                      " of it through ranks that waited for it (",
                      absl::StrJoin(through, ", "), ")");
    }
    absl::StrAppend(&out, "\n");
    for (size_t i = 0; i < shares.size() && i < 3; ++i) {
      absl::StrAppend(
          &out,
          absl::StrFormat("    %-16s %6s\n", shares[i].category,
                          Percent(Ratio(shares[i].ns, s.wait_caused_ns))));
    }
    if (!shares.empty()) {
      absl::StrAppend(&out, "    ", st.Dim("fix: "), shares[0].advice, "\n");
    }
  }
  if (c.unattributed > 0) {
    absl::StrAppend(&out, "  ", c.unattributed,
                    " instances caused waits nothing explains (no previous "
                    "sync point or no excess): unattributed\n");
  }
  return out;
}

void WriteCollectivesJson(JsonWriter& w, const CollectiveAnalysis& c) {
  w.Key("ranks").BeginArray();
  for (const RankCollectiveStats& r : c.ranks) {
    w.BeginObject();
    w.Key("rank").Int(r.rank);
    w.Key("device").Int(r.device);
    w.Key("host");
    if (r.host.empty()) {
      w.Null();
    } else {
      w.String(r.host);
    }
    if (r.pid >= 0) w.Key("pid").Int(r.pid);
    w.Key("file").String(r.file);
    w.Key("utilization").Double(r.stats.utilization());
    w.Key("busy_useful_utilization").Double(r.busy_useful_utilization());
    w.Key("comm_us").Double(JsonUs(r.comm_ns));
    w.Key("comm_exposed_us").Double(JsonUs(r.comm_exposed_ns));
    w.Key("comm_wait_us").Double(JsonUs(r.comm_wait_ns));
    w.Key("wait_caused_us").Double(JsonUs(r.wait_caused_ns));
    w.Key("arrived_last").Int(r.arrived_last);
    w.Key("clock_offset_us");
    if (r.clock_corrected) {
      w.Double(JsonUs(r.clock_offset_ns));
    } else {
      w.Null();
    }
    w.Key("clock_instances").Int(r.clock_instances);
    // Drift and residual exist where the clock was solved: null otherwise,
    // like the offset; the reference has a residual but no drift.
    w.Key("clock_drift_us_per_s");
    if (r.clock_corrected) {
      w.Double(r.clock_drift_ns_per_s / 1e3);
    } else {
      w.Null();
    }
    w.Key("clock_residual_us");
    if (r.clock_connected && r.clock_instances > 0) {
      w.Double(JsonUs(r.clock_residual_ns));
    } else {
      w.Null();
    }
    w.Key("clock_connected").Bool(r.clock_connected);
    w.EndObject();
  }
  w.EndArray();
  w.Key("collectives").BeginObject();
  w.Key("kernels").Int(c.collective_kernels);
  w.Key("matched").Int(c.matched);
  w.Key("unmatched").Int(c.unmatched);
  w.Key("unsynchronized").Int(c.unsynchronized);
  w.Key("used").Int(c.used);
  w.Key("unattributed").Int(c.unattributed);
  w.Key("seq_backwards").Int(c.seq_backwards);
  w.Key("seq_jumps").Int(c.seq_jumps);
  w.Key("unpaired").Int(c.unpaired);
  w.Key("pairs_without_replicas").Int(c.pairs_without_replicas);
  w.Key("members_inferred").Bool(c.members_inferred);
  w.Key("key").String(CollectiveKeyName(c.key));
  w.Key("world_size");
  if (c.world_size >= 0) {
    w.Int(c.world_size);
  } else {
    w.Null();
  }
  w.EndObject();
  w.Key("stragglers").BeginArray();
  for (const Straggler& s : c.stragglers) WriteStragglerJson(w, s);
  w.EndArray();
  w.Key("what_if");
  WriteWhatIfJson(w, c.job_ns, c.job_ns_without_stragglers);
}

std::string RenderSingleRankCollectivesText(const Trace& trace,
                                            const Analysis& analysis) {
  if (trace.collectives.empty()) return "";
  // The union per device, summed: collective kernels of one device may
  // overlap on several streams.
  absl::flat_hash_map<int32_t, std::vector<Interval>> by_device;
  for (const CollectiveKernel& c : trace.collectives) {
    by_device[c.device].push_back({c.start_ns, c.end_ns});
  }
  int64_t comm = 0;
  for (auto& [device, intervals] : by_device) {
    comm += IntervalSet::FromIntervals(std::move(intervals)).TotalLength();
  }
  return absl::StrCat(
      "\nCollectives\n  ", trace.collectives.size(), " collective kernels, ",
      HumanDuration(comm), " (", Percent(Ratio(comm, analysis.job.compute_ns)),
      " of busy time). How much of it was waiting for another rank is "
      "unknown from one rank:\n  give every rank's trace "
      "(bubblewatch analyze RANK0 RANK1 ... or a directory).\n");
}

}  // namespace bubblewatch
