#include "analysis/clock_graph.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "absl/container/flat_hash_map.h"

namespace bubblewatch {
namespace {

constexpr double kNsPerS = 1e9;

// Solves m·x = rhs for a symmetric positive definite n×n `m` (row-major) by
// Cholesky, in place: `rhs` becomes x. False when `m` is not positive
// definite. The systems here have two unknowns per domain, so a dense
// solve is small next to the edges.
bool CholeskySolve(std::vector<double>& m, std::vector<double>& rhs, int n) {
  for (int j = 0; j < n; ++j) {
    double d = m[j * n + j];
    for (int k = 0; k < j; ++k) d -= m[j * n + k] * m[j * n + k];
    if (!(d > 0)) return false;
    const double l = std::sqrt(d);
    m[j * n + j] = l;
    for (int i = j + 1; i < n; ++i) {
      double s = m[i * n + j];
      for (int k = 0; k < j; ++k) s -= m[i * n + k] * m[j * n + k];
      m[i * n + j] = s / l;
    }
  }
  for (int i = 0; i < n; ++i) {
    double s = rhs[i];
    for (int k = 0; k < i; ++k) s -= m[i * n + k] * rhs[k];
    rhs[i] = s / m[i * n + i];
  }
  for (int i = n - 1; i >= 0; --i) {
    double s = rhs[i];
    for (int k = i + 1; k < n; ++k) s -= m[k * n + i] * rhs[k];
    rhs[i] = s / m[i * n + i];
  }
  return true;
}

// One equation of the fit: to's offset at x_to minus from's offset at
// x_from is y (times in seconds since the origin), with weight w.
struct Row {
  int from = 0;
  int to = 0;
  double x_from = 0;
  double x_to = 0;
  double y = 0;
  double w = 1;
};

// The clocks being solved: offset_d(x) = a[d] + b[d]·(x − center[d]) for a
// solved domain, 0 otherwise (and for the reference). Centering each
// domain's slope on its own edges keeps a and b uncorrelated, so the normal
// equations are well conditioned however long the trace.
struct Clocks {
  std::vector<double> a;
  std::vector<double> b;
  std::vector<double> center;
  std::vector<char> solved;

  double Offset(int d, double x) const {
    return solved[d] ? a[d] + b[d] * (x - center[d]) : 0.0;
  }
  double Residual(const Row& r) const {
    return r.y - (Offset(r.to, r.x_to) - Offset(r.from, r.x_from));
  }
};

// Weighted least squares over `rows` for the domains with `fit[d]` (offset,
// and slope where `slope[d]`); the others keep offset 0. Returns false if
// the system is singular (it is not when every fitted domain is linked to
// the reference and every slope rests on distinct times).
bool Fit(const std::vector<Row>& rows, const std::vector<char>& fit,
         const std::vector<char>& slope, int reference, Clocks& clocks) {
  const int domains = static_cast<int>(fit.size());
  std::vector<int> ia(domains, -1);
  std::vector<int> ib(domains, -1);
  int n = 0;
  for (int d = 0; d < domains; ++d) {
    if (d == reference || !fit[d]) continue;
    ia[d] = n++;
    if (slope[d]) ib[d] = n++;
  }
  std::vector<double> m(static_cast<size_t>(n) * n, 0.0);
  std::vector<double> rhs(n, 0.0);
  for (const Row& r : rows) {
    // The row's coefficients: +1, +(x − c) for `to`; −1, −(x − c) for
    // `from`.
    int idx[4];
    double coef[4];
    int k = 0;
    auto add = [&](int d, double x, double sign) {
      if (ia[d] >= 0) {
        idx[k] = ia[d];
        coef[k++] = sign;
      }
      if (ib[d] >= 0) {
        idx[k] = ib[d];
        coef[k++] = sign * (x - clocks.center[d]);
      }
    };
    add(r.to, r.x_to, 1.0);
    add(r.from, r.x_from, -1.0);
    for (int p = 0; p < k; ++p) {
      rhs[idx[p]] += r.w * coef[p] * r.y;
      for (int q = 0; q < k; ++q) {
        m[static_cast<size_t>(idx[p]) * n + idx[q]] += r.w * coef[p] * coef[q];
      }
    }
  }
  if (!CholeskySolve(m, rhs, n)) return false;
  for (int d = 0; d < domains; ++d) {
    clocks.solved[d] = ia[d] >= 0;
    clocks.a[d] = ia[d] >= 0 ? rhs[ia[d]] : 0.0;
    clocks.b[d] = ib[d] >= 0 ? rhs[ib[d]] : 0.0;
  }
  return true;
}

// The domains reachable from `reference` over `pairs` (domain pairs).
std::vector<char> Reachable(int domains, int reference,
                            const std::vector<std::pair<int, int>>& pairs) {
  std::vector<std::vector<int>> next(domains);
  for (const auto& [u, v] : pairs) {
    next[u].push_back(v);
    next[v].push_back(u);
  }
  std::vector<char> seen(domains, 0);
  std::vector<int> stack = {reference};
  seen[reference] = 1;
  while (!stack.empty()) {
    const int u = stack.back();
    stack.pop_back();
    for (int v : next[u]) {
      if (!seen[v]) {
        seen[v] = 1;
        stack.push_back(v);
      }
    }
  }
  return seen;
}

// The median of the largest cluster of `v` (reordered) whose values lie
// within `width` of each other (the first of equal clusters in ascending
// order), and the cluster's size. REQUIRES: !v.empty().
std::pair<double, size_t> ClusterMedian(std::vector<double>& v, double width) {
  std::sort(v.begin(), v.end());
  size_t best_lo = 0;
  size_t best_hi = 0;  // Exclusive.
  for (size_t lo = 0, hi = 0; lo < v.size(); ++lo) {
    while (hi < v.size() && v[hi] - v[lo] <= width) ++hi;
    if (hi - lo > best_hi - best_lo) {
      best_lo = lo;
      best_hi = hi;
    }
  }
  const size_t n = best_hi - best_lo;
  const size_t mid = best_lo + n / 2;
  return {n % 2 == 1 ? v[mid] : (v[mid - 1] + v[mid]) / 2, n};
}

// The outlier limit for residual magnitudes `v`: the first of floor,
// 2·floor, 4·floor, ... at which doubling it keeps at most `growth` more
// edges (at most `doublings` doublings). Edges that really ended together
// sit below a knee (their jitter, or a drift not yet fitted); wrong ones are
// spread thinly far above it, so they stay out even when they are most of
// the edges, which a multiple of the median would not give. O(n): a count
// per doubling, no sort (this runs every round over every edge).
double OutlierLimit(const std::vector<double>& v, double floor, double growth,
                    int doublings) {
  // within[k]: how many are at most floor · 2^k.
  std::vector<double> within(doublings + 2, 0.0);
  for (double x : v) {
    int k = 0;
    if (x > floor) {
      k = std::ilogb(x / floor);
      if (x > std::ldexp(floor, k)) ++k;
    }
    if (k <= doublings + 1) within[k] += 1;
  }
  for (int k = 1; k < doublings + 2; ++k) within[k] += within[k - 1];
  int k = 0;
  while (k < doublings &&
         !(within[k] > 0 && within[k + 1] - within[k] <= growth * within[k])) {
    ++k;
  }
  return std::ldexp(floor, k);
}

}  // namespace

int64_t ClockSolution::FromReference(int d, int64_t t) const {
  // t' − offset(t') = t: two fixed-point steps land within a nanosecond,
  // since the offset changes by parts per million of the step. Then the
  // earliest such t', so that a rank's own start, taken to the reference
  // clock and back, is that start again (the late rank waits for nothing).
  int64_t local = t + OffsetAt(d, t);
  local = t + OffsetAt(d, local);
  while (ToReference(d, local) < t) ++local;
  while (ToReference(d, local - 1) >= t) --local;
  return local;
}

ClockGraph::ClockGraph(int domains, int reference)
    : domains_(domains), reference_(reference) {}

void ClockGraph::AddInstance(absl::Span<const DomainEnd> ends) {
  for (size_t i = 1; i < ends.size(); ++i) {
    edges_.push_back({ends[0].domain, ends[i].domain, instances_,
                      ends[0].end_ns, ends[i].end_ns});
  }
  ++instances_;
}

ClockSolution ClockGraph::Solve(const ClockGraphOptions& options) const {
  ClockSolution out;
  out.reference = reference_;
  out.domains.resize(domains_);
  out.domains[reference_].connected = true;
  out.edges = static_cast<int64_t>(edges_.size());
  if (edges_.empty()) return out;

  const size_t m = edges_.size();
  int64_t origin = INT64_MAX;
  for (const Edge& e : edges_) {
    origin = std::min({origin, e.from_ns, e.to_ns});
  }
  out.origin_ns = origin;
  std::vector<Row> all(m);
  Clocks clocks;
  clocks.a.assign(domains_, 0.0);
  clocks.b.assign(domains_, 0.0);
  clocks.center.assign(domains_, 0.0);
  clocks.solved.assign(domains_, 0);
  std::vector<int64_t> degree(domains_, 0);
  for (size_t i = 0; i < m; ++i) {
    const Edge& e = edges_[i];
    Row& r = all[i];
    r.from = e.from;
    r.to = e.to;
    // No overflow: event times are within ±2^62 (CheckEventTimes).
    r.x_from = static_cast<double>(e.from_ns - origin) / kNsPerS;
    r.x_to = static_cast<double>(e.to_ns - origin) / kNsPerS;
    r.y = static_cast<double>(e.to_ns - e.from_ns);
    clocks.center[e.from] += r.x_from;
    clocks.center[e.to] += r.x_to;
    ++degree[e.from];
    ++degree[e.to];
  }
  for (int d = 0; d < domains_; ++d) {
    if (degree[d] > 0) clocks.center[d] /= static_cast<double>(degree[d]);
  }
  auto pair_of = [](const Row& r) {
    return std::make_pair(std::min(r.from, r.to), std::max(r.from, r.to));
  };

  // A robust start: per pair of domains the median of the largest cluster
  // of its end differences within outlier_floor_ns of each other (the
  // instances that really ended together), constant offsets fitted to
  // those. A least-squares start would let a few wildly wrong edges (a wrong
  // match, seconds off) drag every domain; the clusters ignore them even
  // when they are most of a pair's edges. Under drift the cluster is the
  // differences of one stretch of time: a start, which the rounds refine.
  // Pairs of domains in first-seen order, and each edge's.
  std::vector<std::pair<int, int>> pairs;
  std::vector<int> pair_of_edge(m);
  {
    absl::flat_hash_map<std::pair<int, int>, int> ids;
    for (size_t i = 0; i < m; ++i) {
      const auto p = pair_of(all[i]);
      auto [it, inserted] = ids.try_emplace(p, static_cast<int>(pairs.size()));
      if (inserted) pairs.push_back(p);
      pair_of_edge[i] = it->second;
    }
  }
  {
    std::vector<std::vector<double>> deltas(pairs.size());
    for (size_t i = 0; i < m; ++i) {
      const Row& r = all[i];
      deltas[pair_of_edge[i]].push_back(
          r.from == pairs[pair_of_edge[i]].first ? r.y : -r.y);
    }
    std::vector<Row> rows;
    std::vector<std::pair<int, int>> starts;
    for (size_t p = 0; p < pairs.size(); ++p) {
      Row r;
      r.from = pairs[p].first;
      r.to = pairs[p].second;
      r.w = static_cast<double>(deltas[p].size());
      const auto [median, size] = ClusterMedian(
          deltas[p], static_cast<double>(options.outlier_floor_ns));
      // Fewer instances than a link needs agree: no start from this pair
      // (the domains may still be reached through others).
      if (size < static_cast<size_t>(options.min_link_instances)) continue;
      r.y = median;
      rows.push_back(r);
      starts.push_back(pairs[p]);
    }
    const std::vector<char> reach = Reachable(domains_, reference_, starts);
    const std::vector<char> no_slope(domains_, 0);
    if (!Fit(rows, reach, no_slope, reference_, clocks)) return out;
  }

  // Fit, reject the edges far off the fit, fit again, until the kept edges
  // do not change.
  std::vector<char> used(m, 0);
  std::vector<char> kept(m, 0);
  std::vector<double> residual(m, 0.0);
  std::vector<double> magnitudes;
  std::vector<char> connected(domains_, 0);
  connected[reference_] = 1;
  std::vector<double> span(domains_, 0.0);  // Of the last fit's edges, in s.
  for (int round = 0; round < options.max_rounds; ++round) {
    magnitudes.clear();
    for (size_t i = 0; i < m; ++i) {
      const Row& r = all[i];
      const bool solvable = (r.from == reference_ || clocks.solved[r.from]) &&
                            (r.to == reference_ || clocks.solved[r.to]);
      residual[i] = solvable ? clocks.Residual(r) : HUGE_VAL;
      if (solvable) magnitudes.push_back(std::abs(residual[i]));
    }
    if (magnitudes.empty()) break;
    const double limit =
        OutlierLimit(magnitudes, static_cast<double>(options.outlier_floor_ns),
                     options.outlier_growth, options.outlier_doublings);
    for (size_t i = 0; i < m; ++i) kept[i] = std::abs(residual[i]) <= limit;
    // Links: pairs with enough edges that fit.
    std::vector<int> fits(pairs.size(), 0);
    for (size_t i = 0; i < m; ++i) fits[pair_of_edge[i]] += kept[i];
    std::vector<std::pair<int, int>> links;
    for (size_t p = 0; p < pairs.size(); ++p) {
      if (fits[p] >= options.min_link_instances) links.push_back(pairs[p]);
    }
    const std::vector<char> reach = Reachable(domains_, reference_, links);
    for (size_t i = 0; i < m; ++i) {
      kept[i] = kept[i] && reach[all[i].from] && reach[all[i].to];
    }
    if (round > 0 && kept == used) break;  // The last fit stands.
    used.swap(kept);
    connected = reach;
    // Which domains have drift: enough edges over a long enough time.
    std::vector<int64_t> count(domains_, 0);
    std::vector<double> first(domains_, HUGE_VAL);
    std::vector<double> last(domains_, -HUGE_VAL);
    std::vector<Row> rows;
    for (size_t i = 0; i < m; ++i) {
      if (!used[i]) continue;
      const Row& r = all[i];
      rows.push_back(r);
      for (auto [d, x] :
           {std::pair(r.from, r.x_from), std::pair(r.to, r.x_to)}) {
        ++count[d];
        first[d] = std::min(first[d], x);
        last[d] = std::max(last[d], x);
      }
    }
    std::vector<char> slope(domains_, 0);
    for (int d = 0; d < domains_; ++d) {
      span[d] = count[d] > 0 ? last[d] - first[d] : 0.0;
      slope[d] =
          connected[d] && count[d] >= options.min_drift_instances &&
          span[d] * kNsPerS >= static_cast<double>(options.min_drift_span_ns);
    }
    if (!Fit(rows, connected, slope, reference_, clocks)) break;
    ++out.rounds;
  }

  // The figures of the last fit, over the edges it used.
  std::vector<double> squares(domains_, 0.0);
  std::vector<int64_t> edges_of(domains_, 0);
  std::vector<int64_t> last_instance(domains_, -1);
  for (size_t i = 0; i < m; ++i) {
    const Row& r = all[i];
    if (!connected[r.from] || !connected[r.to]) continue;
    if (!used[i]) {
      ++out.outliers;
      continue;
    }
    const double res = clocks.Residual(r);
    for (int d : {r.from, r.to}) {
      squares[d] += res * res;
      ++edges_of[d];
      if (last_instance[d] != edges_[i].instance) {
        last_instance[d] = edges_[i].instance;
        ++out.domains[d].instances;
      }
    }
  }
  for (int d = 0; d < domains_; ++d) {
    DomainClock& c = out.domains[d];
    c.connected = connected[d] && (d == reference_ || clocks.solved[d]);
    if (edges_of[d] > 0) {
      c.residual_ns = std::llround(
          std::sqrt(squares[d] / static_cast<double>(edges_of[d])));
    }
    if (d == reference_ || !connected[d]) continue;
    // A drift that moves the offset by under half a nanosecond over the
    // domain's edges cannot be told from none (constant offsets fit to
    // rounding error): it is 0, and correcting is exact integer arithmetic.
    if (std::abs(clocks.b[d]) * span[d] < 0.5) {
      c.offset_ns = std::llround(clocks.a[d]);
      continue;
    }
    // The offset at the origin (x = 0).
    c.offset_ns = std::llround(clocks.a[d] - clocks.b[d] * clocks.center[d]);
    c.drift_ns_per_s = clocks.b[d];
  }
  return out;
}

}  // namespace bubblewatch
