#include "processor/window_fit.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "schemas/window_summary_codec.h"

namespace bubblewatch {
namespace {

// Cuts `name` to at most `bytes` bytes, not inside a UTF-8 sequence (names
// are shown and written as JSON). Returns true when it was cut.
bool CutName(std::string& name, size_t bytes) {
  if (name.size() <= bytes) return false;
  size_t end = bytes;
  // Back up over continuation bytes (10xxxxxx) to a character's first byte.
  while (end > 0 && (static_cast<unsigned char>(name[end]) & 0xC0) == 0x80) {
    --end;
  }
  name.resize(end);
  return true;
}

int64_t CutKernel(std::optional<KernelRef>& kernel) {
  return kernel && CutName(kernel->name, kFitNameBytes) ? 1 : 0;
}

// Step 2 of the rule: every name but the job's. Returns how many were cut.
int64_t CutNames(WindowSummary& w) {
  int64_t cut = CutKernel(w.window.job.culprit_before_bubble);
  for (DeviceWindow& d : w.window.devices) {
    cut += CutKernel(d.stats.culprit_before_bubble);
  }
  for (BubbleReport& b : w.window.top_bubbles) {
    cut += CutKernel(b.before) + CutKernel(b.after);
    if (CutName(b.blamed, kFitNameBytes)) ++cut;
  }
  if (w.collectives) {
    for (RankWindow& r : w.collectives->ranks) {
      if (r.host.size() > kFitNameBytes) {
        std::string host(r.host.str());
        CutName(host, kFitNameBytes);
        r.host = SharedString(host);
        ++cut;
      }
    }
    for (StragglerWindow& s : w.collectives->stragglers) {
      if (CutName(s.host, kFitNameBytes)) ++cut;
    }
  }
  return cut;
}

// Keeps the first `keep` entries of `list` in `better` order, in their
// original order. Returns how many were left out.
template <typename T, typename Better>
int64_t KeepBest(std::vector<T>& list, size_t keep, Better better) {
  if (list.size() <= keep) return 0;
  const int64_t dropped = static_cast<int64_t>(list.size() - keep);
  std::vector<size_t> order(list.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return better(list[a], list[b]);
  });
  order.resize(keep);
  std::sort(order.begin(), order.end());
  std::vector<T> kept;
  kept.reserve(keep);
  for (size_t i : order) kept.push_back(std::move(list[i]));
  list = std::move(kept);
  return dropped;
}

// Step 3 of the rule with K = `keep`: adds what it left out to `trim`.
void KeepAtMost(WindowSummary& w, size_t keep, WindowTrim& trim) {
  trim.devices += KeepBest(w.window.devices, keep,
                           [](const DeviceWindow& a, const DeviceWindow& b) {
                             if (a.stats.bubble_ns != b.stats.bubble_ns) {
                               return a.stats.bubble_ns > b.stats.bubble_ns;
                             }
                             return a.device < b.device;
                           });
  // Already longest first: the tail goes.
  if (w.window.top_bubbles.size() > keep) {
    trim.top_bubbles +=
        static_cast<int64_t>(w.window.top_bubbles.size() - keep);
    w.window.top_bubbles.resize(keep);
  }
  if (!w.collectives) return;
  trim.ranks += KeepBest(w.collectives->ranks, keep,
                         [](const RankWindow& a, const RankWindow& b) {
                           if (a.wait_caused_ns != b.wait_caused_ns) {
                             return a.wait_caused_ns > b.wait_caused_ns;
                           }
                           if (a.comm_wait_ns != b.comm_wait_ns) {
                             return a.comm_wait_ns > b.comm_wait_ns;
                           }
                           return a.rank < b.rank;
                         });
  // By wait caused, descending: the tail goes.
  std::vector<StragglerWindow>& stragglers = w.collectives->stragglers;
  if (stragglers.size() > keep) {
    trim.stragglers += static_cast<int64_t>(stragglers.size() - keep);
    stragglers.resize(keep);
  }
  // Each kept straggler's via, by wait descending: the tail goes.
  for (StragglerWindow& s : stragglers) {
    if (s.via.size() > keep) {
      trim.via += static_cast<int64_t>(s.via.size() - keep);
      s.via.resize(keep);
    }
  }
}

size_t LongestList(const WindowSummary& w) {
  size_t n = std::max(w.window.devices.size(), w.window.top_bubbles.size());
  if (w.collectives) {
    n = std::max(
        {n, w.collectives->ranks.size(), w.collectives->stragglers.size()});
    for (const StragglerWindow& s : w.collectives->stragglers) {
      n = std::max(n, s.via.size());
    }
  }
  return n;
}

}  // namespace

absl::StatusOr<std::string> FitWindow(WindowSummary& window, size_t max_bytes) {
  std::string bytes = EncodeWindowSummary(window);
  if (bytes.size() <= max_bytes) return bytes;

  // The counts of an earlier trim carry on: what it left out is gone.
  WindowTrim trim = window.trimmed.value_or(
      WindowTrim{.original_bytes = static_cast<int64_t>(bytes.size())});
  trim.limit_bytes = static_cast<int64_t>(max_bytes);
  WindowSummary cut = window;
  // First the ranks' timelines, all of them: a picture, which no figure
  // rests on (docs/state.md#rank-timelines).
  if (cut.collectives && !cut.collectives->timelines.empty()) {
    trim.timelines += static_cast<int64_t>(cut.collectives->timelines.size());
    cut.collectives->timelines.clear();
    cut.trimmed = trim;
    bytes = EncodeWindowSummary(cut);
    if (bytes.size() <= max_bytes) {
      window = std::move(cut);
      return bytes;
    }
  }
  trim.names_cut += CutNames(cut);
  cut.trimmed = trim;
  bytes = EncodeWindowSummary(cut);
  if (bytes.size() <= max_bytes) {
    window = std::move(cut);
    return bytes;
  }

  // The largest K that fits, by bisection: each candidate is encoded whole,
  // which is what decides (a window this large is rare; ~10 encodings).
  auto with_at_most = [&](size_t keep) {
    WindowSummary candidate = cut;
    WindowTrim counted = trim;
    KeepAtMost(candidate, keep, counted);
    candidate.trimmed = counted;
    return candidate;
  };
  size_t fits = 0;                      // Known to fit once checked below.
  size_t too_large = LongestList(cut);  // Known not to fit.
  while (too_large - fits > 1) {
    const size_t mid = fits + (too_large - fits) / 2;
    if (EncodeWindowSummary(with_at_most(mid)).size() <= max_bytes) {
      fits = mid;
    } else {
      too_large = mid;
    }
  }
  WindowSummary fitted = with_at_most(fits);
  bytes = EncodeWindowSummary(fitted);
  if (bytes.size() > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "window of ", window.job, " at ", window.window.start_ns, ": ",
        bytes.size(), " bytes with names cut and every list empty, over the ",
        max_bytes, " bytes the windows topic takes"));
  }
  window = std::move(fitted);
  return bytes;
}

size_t WindowValueBudget(int64_t limit_bytes, size_t key_bytes) {
  // Record batch header (61 bytes) and one record's framing (at most ~40),
  // rounded up; compression of incompressible bytes adds 1/255 (LZ4).
  const int64_t reserve =
      256 + static_cast<int64_t>(key_bytes) + limit_bytes / 255 + 16;
  return limit_bytes > reserve ? static_cast<size_t>(limit_bytes - reserve) : 0;
}

}  // namespace bubblewatch
