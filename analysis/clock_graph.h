// ClockGraph puts every clock domain (host, else file) of a multi-rank job on
// one clock, the reference domain's (docs/semantics.md#clocks).
//
// Nodes are clock domains. Each matched collective instance that spans
// several domains says that their ends coincide in true time, so it gives an
// edge from its first domain (its lowest rank's) to each other one: the
// difference of their end times, each on its own clock. Every domain's
// offset is then solved from all edges together, by least squares, as a
// function of time: offset(t) = a + b·(t − origin), so that clocks that drift
// apart over a long trace are followed. Two domains need not share an
// instance: A–B and B–C determine A–C. Edges of instances that did not end
// together (a wrong match, a point-to-point pair) are rejected as outliers
// and do not pull the solution.
//
// Pure: values in, values out. Cost: O(E) per round in the edges (at most a
// few rounds) plus a dense solve of O(D³) in the domains.
#ifndef BUBBLEWATCH_ANALYSIS_CLOCK_GRAPH_H_
#define BUBBLEWATCH_ANALYSIS_CLOCK_GRAPH_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace bubblewatch {

struct ClockGraphOptions {
  // Two domains are linked when at least this many of their shared instances
  // fit the solution; a domain is solved only when linked to the reference
  // through such links (directly or not). A pair of domains gives the fit a
  // start only when this many of its end differences agree within
  // outlier_floor_ns.
  int min_link_instances = 3;
  // An edge is an outlier when its residual exceeds the limit: the first of
  // outlier_floor_ns · 2^k (k ≤ outlier_doublings) at which doubling it
  // would keep at most outlier_growth more edges.
  int64_t outlier_floor_ns = 50'000;
  double outlier_growth = 0.05;
  int outlier_doublings = 10;
  // A domain's drift is fitted only when it rests on at least this many
  // edges spanning at least min_drift_span_ns; else its offset is constant
  // (a slope from a few close instances would be noise, and extrapolated).
  int min_drift_instances = 10;
  int64_t min_drift_span_ns = 1'000'000'000;
  // Fit and reject at most this many times.
  int max_rounds = 10;
};

// One domain's end of an instance, on the domain's own clock.
struct DomainEnd {
  int domain = 0;
  int64_t end_ns = 0;
};

// One domain's clock relative to the reference's.
struct DomainClock {
  // The reference, or linked to it: only then is the offset solved.
  bool connected = false;
  // offset(t) = offset_ns + drift_ns_per_s × (t − origin) / 1 s, for t on
  // this domain's clock; subtract it for the reference clock.
  int64_t offset_ns = 0;
  double drift_ns_per_s = 0;
  // Distinct instances with an edge of this domain that fits (not an
  // outlier), between connected domains.
  int64_t instances = 0;
  // Root mean square of the residuals of those edges.
  int64_t residual_ns = 0;
};

struct ClockSolution {
  // Where offset_ns applies: the earliest end time of any edge (any
  // domain's clock; clocks milliseconds apart change offsets by
  // nanoseconds at most at realistic drifts).
  int64_t origin_ns = 0;
  int reference = 0;
  std::vector<DomainClock> domains;
  int64_t edges = 0;     // All edges.
  int64_t outliers = 0;  // Edges rejected (among connected domains).
  int rounds = 0;        // Fits made.

  // Domain `d`'s offset at `t` on its own clock (0 if not connected).
  // Inline: the analysis corrects every collective kernel's times.
  int64_t OffsetAt(int d, int64_t t) const {
    const DomainClock& c = domains[d];
    if (c.drift_ns_per_s == 0) return c.offset_ns;  // 0 if not connected.
    // No overflow: event times are within ±2^62 (CheckEventTimes).
    const double drift =
        c.drift_ns_per_s * 1e-9 * static_cast<double>(t - origin_ns);
    // Rounded half away from zero, as llround, without the library call.
    return c.offset_ns +
           static_cast<int64_t>(drift < 0 ? drift - 0.5 : drift + 0.5);
  }
  // `t` on domain `d`'s clock, on the reference clock: t − OffsetAt(d, t).
  int64_t ToReference(int d, int64_t t) const { return t - OffsetAt(d, t); }
  // The inverse: the earliest time on `d`'s clock whose reference time is
  // at least `t`.
  int64_t FromReference(int d, int64_t t) const;
};

class ClockGraph {
 public:
  // Domains are 0 .. domains-1; `reference` has offset 0.
  ClockGraph(int domains, int reference);

  // One matched instance: one end per domain it spans (distinct domains;
  // the first is the instance's own first domain). Fewer than two ends give
  // no edge.
  void AddInstance(absl::Span<const DomainEnd> ends);

  // Solves every domain's clock from all edges (see the file comment).
  ClockSolution Solve(const ClockGraphOptions& options = {}) const;

  int64_t edges() const { return static_cast<int64_t>(edges_.size()); }

 private:
  struct Edge {
    int32_t from = 0;
    int32_t to = 0;
    int64_t instance = 0;
    int64_t from_ns = 0;  // End on `from`'s clock.
    int64_t to_ns = 0;    // End on `to`'s clock.
  };
  int domains_ = 0;
  int reference_ = 0;
  int64_t instances_ = 0;
  std::vector<Edge> edges_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ANALYSIS_CLOCK_GRAPH_H_
