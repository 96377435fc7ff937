// Every field of a CollectiveAnalysis as "path=value" lines, so that two
// analyses are compared field by field with a readable difference (the
// first line that differs names the field). `analyses` and `traces` are
// left out: they are AnalyzeTrace's figures, not the cross-rank analysis.
#ifndef BUBBLEWATCH_TESTS_ANALYSIS_COLLECTIVE_FIELDS_H_
#define BUBBLEWATCH_TESTS_ANALYSIS_COLLECTIVE_FIELDS_H_

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "analysis/collectives.h"

namespace bubblewatch::testing {

inline void AddAttribution(std::vector<std::string>& out,
                           const std::string& path, const Attribution& a) {
  for (size_t i = 0; i < a.size(); ++i) {
    out.push_back(absl::StrCat(path, "[", i, "]=", a[i]));
  }
}

inline void AddStats(std::vector<std::string>& out, const std::string& path,
                     const UtilizationStats& s) {
  out.push_back(absl::StrCat(path, ".span_ns=", s.span_ns));
  out.push_back(absl::StrCat(path, ".compute_ns=", s.compute_ns));
  out.push_back(absl::StrCat(path, ".bubble_ns=", s.bubble_ns));
  out.push_back(absl::StrCat(path, ".largest_bubble_ns=", s.largest_bubble_ns));
  out.push_back(absl::StrCat(
      path, ".largest_bubble_start_ns=", s.largest_bubble_start_ns));
  if (s.culprit_before_bubble.has_value()) {
    const KernelRef& k = *s.culprit_before_bubble;
    out.push_back(absl::StrCat(path, ".culprit=", k.name, "@", k.start_ns, "-",
                               k.end_ns, "/", k.stream));
  } else {
    out.push_back(absl::StrCat(path, ".culprit=none"));
  }
  AddAttribution(out, path + ".attribution", s.attribution);
}

inline std::vector<std::string> CollectiveFields(const CollectiveAnalysis& c) {
  std::vector<std::string> out;
  out.push_back(absl::StrCat("key=", CollectiveKeyName(c.key)));
  out.push_back(absl::StrCat("world_size=", c.world_size));
  out.push_back(absl::StrCat("collective_kernels=", c.collective_kernels));
  out.push_back(absl::StrCat("matched=", c.matched));
  out.push_back(absl::StrCat("unmatched=", c.unmatched));
  out.push_back(absl::StrCat("unsynchronized=", c.unsynchronized));
  out.push_back(absl::StrCat("used=", c.used));
  out.push_back(absl::StrCat("unattributed=", c.unattributed));
  out.push_back(absl::StrCat("unpaired=", c.unpaired));
  out.push_back(
      absl::StrCat("pairs_without_replicas=", c.pairs_without_replicas));
  out.push_back(absl::StrCat("members_inferred=", c.members_inferred));
  out.push_back(absl::StrCat("seq_backwards=", c.seq_backwards));
  out.push_back(absl::StrCat("seq_jumps=", c.seq_jumps));
  out.push_back(absl::StrCat("job_ns=", c.job_ns));
  out.push_back(
      absl::StrCat("job_ns_without_stragglers=", c.job_ns_without_stragglers));
  out.push_back(absl::StrCat("clock_origin_ns=", c.clock_origin_ns));
  out.push_back(absl::StrCat("ranks.size=", c.ranks.size()));
  for (size_t i = 0; i < c.ranks.size(); ++i) {
    const RankCollectiveStats& r = c.ranks[i];
    const std::string p = absl::StrCat("ranks[", i, "]");
    out.push_back(absl::StrCat(p, ".rank=", r.rank));
    out.push_back(absl::StrCat(p, ".device=", r.device));
    out.push_back(absl::StrCat(p, ".host=", r.host));
    out.push_back(absl::StrCat(p, ".file=", r.file));
    out.push_back(absl::StrCat(p, ".pid=", r.pid));
    AddStats(out, p + ".stats", r.stats);
    out.push_back(absl::StrCat(p, ".comm_ns=", r.comm_ns));
    out.push_back(absl::StrCat(p, ".comm_exposed_ns=", r.comm_exposed_ns));
    out.push_back(absl::StrCat(p, ".comm_wait_ns=", r.comm_wait_ns));
    out.push_back(absl::StrCat(p, ".wait_caused_ns=", r.wait_caused_ns));
    out.push_back(absl::StrCat(p, ".arrived_last=", r.arrived_last));
    out.push_back(absl::StrCat(p, ".clock_offset_ns=", r.clock_offset_ns));
    // Exact: the same arithmetic gives the same double.
    out.push_back(absl::StrCat(p, ".clock_drift_ns_per_s=",
                               absl::StrFormat("%a", r.clock_drift_ns_per_s)));
    out.push_back(absl::StrCat(p, ".clock_instances=", r.clock_instances));
    out.push_back(absl::StrCat(p, ".clock_residual_ns=", r.clock_residual_ns));
    out.push_back(absl::StrCat(p, ".clock_connected=", r.clock_connected));
    out.push_back(absl::StrCat(p, ".clock_corrected=", r.clock_corrected));
  }
  out.push_back(absl::StrCat("stragglers.size=", c.stragglers.size()));
  for (size_t i = 0; i < c.stragglers.size(); ++i) {
    const Straggler& s = c.stragglers[i];
    const std::string p = absl::StrCat("stragglers[", i, "]");
    out.push_back(absl::StrCat(p, ".rank=", s.rank));
    out.push_back(absl::StrCat(p, ".host=", s.host));
    out.push_back(absl::StrCat(p, ".pid=", s.pid));
    out.push_back(absl::StrCat(p, ".wait_caused_ns=", s.wait_caused_ns));
    out.push_back(
        absl::StrCat(p, ".direct_wait_caused_ns=", s.direct_wait_caused_ns));
    out.push_back(absl::StrCat(p, ".arrived_last=", s.arrived_last));
    out.push_back(absl::StrCat(p, ".compute_ns=", s.compute_ns));
    out.push_back(absl::StrCat(p, ".comm_ns=", s.comm_ns));
    AddAttribution(out, p + ".causes", s.causes);
    out.push_back(absl::StrCat(p, ".unattributed_ns=", s.unattributed_ns));
    for (size_t v = 0; v < s.via.size(); ++v) {
      out.push_back(absl::StrCat(p, ".via[", v, "]=", s.via[v].rank, ":",
                                 s.via[v].wait_ns));
    }
    out.push_back(absl::StrCat(p, ".saved_ns=", s.saved_ns));
  }
  out.push_back(absl::StrCat("instances.size=", c.instances.size()));
  for (size_t i = 0; i < c.instances.size(); ++i) {
    const CollectiveInstance& x = c.instances[i];
    const std::string p = absl::StrCat("instances[", i, "]");
    out.push_back(absl::StrCat(p, ".id=", x.group, "/", x.key, "/", x.type,
                               " pair=", x.pair,
                               " synchronized=", x.synchronized));
    for (size_t k = 0; k < x.parts.size(); ++k) {
      const CollectiveInstance::Part& part = x.parts[k];
      out.push_back(absl::StrCat(p, ".parts[", k, "]=", part.rank, " ",
                                 part.start_ns, "-", part.end_ns, " wait ",
                                 part.wait_ns));
    }
    out.push_back(absl::StrCat(p, ".arrival_ns=", x.arrival_ns,
                               " late=", x.late_rank, " root=", x.root_rank,
                               " wait_caused=", x.wait_caused_ns));
    out.push_back(absl::StrCat(p, ".split=", x.compute_ns, " ", x.comm_ns,
                               " unattributed ", x.unattributed_ns));
    AddAttribution(out, p + ".causes", x.causes);
  }
  return out;
}

}  // namespace bubblewatch::testing

#endif  // BUBBLEWATCH_TESTS_ANALYSIS_COLLECTIVE_FIELDS_H_
