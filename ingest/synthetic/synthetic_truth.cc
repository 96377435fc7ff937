#include "ingest/synthetic/synthetic_truth.h"

#include <algorithm>
#include <map>

#include "base/json_writer.h"

namespace bubblewatch {
namespace {

PlantedCause HostCause(PlantedHostClass host_class, bool sync_overlaps) {
  switch (host_class) {
    case PlantedHostClass::kSync:
      return PlantedCause::kHostSync;
    case PlantedHostClass::kAllocator:
      return PlantedCause::kAllocator;
    case PlantedHostClass::kDataLoading:
      return PlantedCause::kDataLoading;
    case PlantedHostClass::kLaunch:
      return PlantedCause::kLaunchOverhead;
    case PlantedHostClass::kUncovered:
      break;
  }
  // The host waited for the GPU to drain, then had nothing queued.
  return sync_overlaps ? PlantedCause::kHostSync : PlantedCause::kHostCompute;
}

int64_t FloorTo(int64_t t, int64_t step) {
  int64_t q = t / step;
  if (t % step != 0 && t < 0) --q;
  return q * step;
}

}  // namespace

PlantedGap PaintGap(int32_t device, int64_t g0, int64_t g1,
                    int64_t launch_start,
                    const std::deque<TimeInterval>& copies,
                    const std::deque<HostBlock>& host) {
  const int64_t host_end = std::clamp(launch_start, g0, g1);
  std::vector<int64_t> cuts = {g0, g1, host_end};
  for (const TimeInterval& c : copies) {
    if (c.end_ns <= g0 || c.start_ns >= g1) continue;
    cuts.push_back(std::max(c.start_ns, g0));
    cuts.push_back(std::min(c.end_ns, g1));
  }
  bool sync_overlaps = false;
  for (const HostBlock& b : host) {
    // Blocks are in time order and the simulator drops those that end
    // before the busy set does, so this stops after the few that matter.
    if (b.start_ns >= host_end) break;
    if (b.end_ns <= g0) continue;
    cuts.push_back(std::max(b.start_ns, g0));
    cuts.push_back(std::min(b.end_ns, host_end));
    if (b.host_class == PlantedHostClass::kSync) sync_overlaps = true;
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());

  PlantedGap gap{
      .device = device, .start_ns = g0, .end_ns = g1, .segments = {}};
  auto block = host.begin();
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    const int64_t a = cuts[i];
    const int64_t b = cuts[i + 1];
    PlantedCause cause;
    const bool copied = std::any_of(copies.begin(), copies.end(), [&](auto& c) {
      return c.start_ns <= a && c.end_ns >= b;
    });
    if (copied) {
      cause = PlantedCause::kMemcpy;
    } else if (launch_start < g0) {
      cause = PlantedCause::kGpuDependency;
    } else if (a >= launch_start) {
      cause = PlantedCause::kLaunchOverhead;
    } else {
      while (block != host.end() && block->end_ns <= a) ++block;
      // By construction the host timeline covers [g0, launch_start); a hole
      // would be a generator bug, and Python time is the honest fallback.
      const PlantedHostClass c = (block != host.end() && block->start_ns <= a)
                                     ? block->host_class
                                     : PlantedHostClass::kUncovered;
      cause = HostCause(c, sync_overlaps);
    }
    if (!gap.segments.empty() && gap.segments.back().cause == cause &&
        gap.segments.back().end_ns == a) {
      gap.segments.back().end_ns = b;
    } else {
      gap.segments.push_back({a, b, cause});
    }
  }
  return gap;
}

TruthWindow& TruthAccumulator::At(int32_t device, int64_t window_start_ns) {
  if (static_cast<size_t>(device) >= devices_.size()) {
    devices_.resize(device + 1);
  }
  DeviceWindows& d = devices_[device];
  if (d.windows.empty()) d.first_window_start_ns = window_start_ns;
  const int64_t index =
      (window_start_ns - d.first_window_start_ns) / window_ns_;
  // Intervals arrive in time order per device, so index >= 0.
  while (static_cast<int64_t>(d.windows.size()) <= index) {
    TruthWindow w;
    w.device = device;
    w.window_start_ns = d.first_window_start_ns +
                        static_cast<int64_t>(d.windows.size()) * window_ns_;
    d.windows.push_back(w);
  }
  return d.windows[index];
}

void TruthAccumulator::AddBusy(int32_t device, int64_t start_ns,
                               int64_t end_ns) {
  while (start_ns < end_ns) {
    const int64_t w = FloorTo(start_ns, window_ns_);
    const int64_t piece_end = std::min(end_ns, w + window_ns_);
    At(device, w).compute_ns += piece_end - start_ns;
    start_ns = piece_end;
  }
}

void TruthAccumulator::AddGap(const PlantedGap& gap) {
  for (const GapSegment& s : gap.segments) {
    int64_t start = s.start_ns;
    while (start < s.end_ns) {
      const int64_t w = FloorTo(start, window_ns_);
      const int64_t piece_end = std::min(s.end_ns, w + window_ns_);
      TruthWindow& tw = At(gap.device, w);
      tw.bubble_ns += piece_end - start;
      tw.cause_ns[static_cast<int>(s.cause)] += piece_end - start;
      start = piece_end;
    }
  }
}

std::vector<TruthWindow> TruthAccumulator::Windows() const {
  std::vector<TruthWindow> out;
  for (const DeviceWindows& d : devices_) {
    for (const TruthWindow& w : d.windows) {
      if (w.compute_ns > 0 || w.bubble_ns > 0) out.push_back(w);
    }
  }
  return out;
}

namespace {

void WriteLine(absl::string_view job, absl::string_view scenario,
               int64_t window_ns, const TruthWindow& w, bool job_scope,
               std::string* out) {
  JsonWriter j;
  j.BeginObject();
  j.Key("job").String(job);
  j.Key("scenario").String(scenario);
  j.Key("scope").String(job_scope ? "job" : "device");
  if (!job_scope) j.Key("device").Int(w.device);
  j.Key("window_start_ns").Int(w.window_start_ns);
  j.Key("window_end_ns").Int(w.window_start_ns + window_ns);
  j.Key("span_ns").Int(w.compute_ns + w.bubble_ns);
  j.Key("compute_ns").Int(w.compute_ns);
  j.Key("bubble_ns").Int(w.bubble_ns);
  j.Key("causes").BeginObject();
  for (int c = 0; c < kNumPlantedCauses; ++c) {
    j.Key(BubbleCauseName(static_cast<BubbleCause>(c))).Int(w.cause_ns[c]);
  }
  j.EndObject();
  j.EndObject();
  out->append(j.str());
  out->push_back('\n');
}

}  // namespace

void WriteTruthJsonLines(absl::string_view job, absl::string_view scenario,
                         int64_t window_ns,
                         const std::vector<TruthWindow>& windows,
                         std::string* out) {
  std::map<int64_t, std::vector<const TruthWindow*>> by_window;
  for (const TruthWindow& w : windows) {
    by_window[w.window_start_ns].push_back(&w);
  }
  for (auto& [start, devices] : by_window) {
    std::sort(devices.begin(), devices.end(),
              [](auto* a, auto* b) { return a->device < b->device; });
    TruthWindow total;
    total.window_start_ns = start;
    for (const TruthWindow* w : devices) {
      WriteLine(job, scenario, window_ns, *w, /*job_scope=*/false, out);
      total.compute_ns += w->compute_ns;
      total.bubble_ns += w->bubble_ns;
      for (int c = 0; c < kNumPlantedCauses; ++c) {
        total.cause_ns[c] += w->cause_ns[c];
      }
    }
    WriteLine(job, scenario, window_ns, total, /*job_scope=*/true, out);
  }
}

}  // namespace bubblewatch
