#include "schemas/window_summary.h"

#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "schemas/bubble_cause.h"

namespace bubblewatch {
namespace {

// Walks two values in step and stops at the first difference, remembering
// the path to it ("window.devices[1].kernels").
class Differ {
 public:
  explicit Differ(std::string* diff) : diff_(diff) {}

  bool found() const { return found_; }

  template <typename T>
  void Field(const std::string& path, const T& a, const T& b) {
    if (found_ || a == b) return;
    Report(path, absl::StrCat(a, " vs ", b));
  }

  void Field(const std::string& path, const std::string& a,
             const std::string& b) {
    if (found_ || a == b) return;
    Report(path, absl::StrCat("\"", a, "\" vs \"", b, "\""));
  }

  void Kernel(const std::string& path, const std::optional<KernelRef>& a,
              const std::optional<KernelRef>& b) {
    if (found_) return;
    if (a.has_value() != b.has_value()) {
      Report(path,
             absl::StrCat(a ? "set" : "none", " vs ", b ? "set" : "none"));
      return;
    }
    if (!a) return;
    Field(path + ".name", a->name, b->name);
    Field(path + ".start_ns", a->start_ns, b->start_ns);
    Field(path + ".end_ns", a->end_ns, b->end_ns);
    Field(path + ".stream", a->stream, b->stream);
  }

  void Causes(const std::string& path, const Attribution& a,
              const Attribution& b) {
    for (BubbleCause cause : kAllBubbleCauses) {
      const int i = static_cast<int>(cause);
      Field(absl::StrCat(path, "[", BubbleCauseName(cause), "]"), a[i], b[i]);
    }
  }

  void Stats(const std::string& path, const UtilizationStats& a,
             const UtilizationStats& b) {
    Field(path + ".span_ns", a.span_ns, b.span_ns);
    Field(path + ".compute_ns", a.compute_ns, b.compute_ns);
    Field(path + ".bubble_ns", a.bubble_ns, b.bubble_ns);
    Field(path + ".largest_bubble_ns", a.largest_bubble_ns,
          b.largest_bubble_ns);
    Field(path + ".largest_bubble_start_ns", a.largest_bubble_start_ns,
          b.largest_bubble_start_ns);
    Kernel(path + ".culprit_before_bubble", a.culprit_before_bubble,
           b.culprit_before_bubble);
    Causes(path + ".attribution", a.attribution, b.attribution);
  }

  void Device(const std::string& path, const DeviceWindow& a,
              const DeviceWindow& b) {
    Field(path + ".device", a.device, b.device);
    Stats(path + ".stats", a.stats, b.stats);
    Field(path + ".kernels", a.kernels, b.kernels);
  }

  void Bubble(const std::string& path, const BubbleReport& a,
              const BubbleReport& b) {
    Field(path + ".device", a.device, b.device);
    Field(path + ".start_ns", a.start_ns, b.start_ns);
    Field(path + ".end_ns", a.end_ns, b.end_ns);
    Kernel(path + ".before", a.before, b.before);
    Kernel(path + ".after", a.after, b.after);
    Causes(path + ".attribution", a.attribution, b.attribution);
    if (!found_ && a.cause != b.cause) {
      Report(path + ".cause", absl::StrCat(BubbleCauseName(a.cause), " vs ",
                                           BubbleCauseName(b.cause)));
    }
    Field(path + ".blamed", a.blamed, b.blamed);
  }

  void Rank(const std::string& path, const RankWindow& a, const RankWindow& b) {
    Field(path + ".rank", a.rank, b.rank);
    Field(path + ".host", a.host.str(), b.host.str());
    Field(path + ".pid", a.pid, b.pid);
    Field(path + ".device", a.device, b.device);
    Field(path + ".span_ns", a.span_ns, b.span_ns);
    Field(path + ".compute_ns", a.compute_ns, b.compute_ns);
    Field(path + ".comm_ns", a.comm_ns, b.comm_ns);
    Field(path + ".comm_exposed_ns", a.comm_exposed_ns, b.comm_exposed_ns);
    Field(path + ".comm_wait_ns", a.comm_wait_ns, b.comm_wait_ns);
    Field(path + ".wait_caused_ns", a.wait_caused_ns, b.wait_caused_ns);
    Field(path + ".arrived_last", a.arrived_last, b.arrived_last);
    Field(path + ".clock_offset_ns", a.clock_offset_ns, b.clock_offset_ns);
    Field(path + ".clock_drift_ns_per_s", a.clock_drift_ns_per_s,
          b.clock_drift_ns_per_s);
    Field(path + ".clock_instances", a.clock_instances, b.clock_instances);
    Field(path + ".clock_residual_ns", a.clock_residual_ns,
          b.clock_residual_ns);
    Field(path + ".clock_connected", int{a.clock_connected},
          int{b.clock_connected});
    Field(path + ".clock_corrected", int{a.clock_corrected},
          int{b.clock_corrected});
  }

  void Straggler(const std::string& path, const StragglerWindow& a,
                 const StragglerWindow& b) {
    Field(path + ".rank", a.rank, b.rank);
    Field(path + ".wait_caused_ns", a.wait_caused_ns, b.wait_caused_ns);
    Field(path + ".arrived_last", a.arrived_last, b.arrived_last);
    Field(path + ".compute_ns", a.compute_ns, b.compute_ns);
    Field(path + ".comm_ns", a.comm_ns, b.comm_ns);
    Causes(path + ".causes", a.causes, b.causes);
    Field(path + ".unattributed_ns", a.unattributed_ns, b.unattributed_ns);
    Field(path + ".host", a.host, b.host);
    Field(path + ".pid", a.pid, b.pid);
    Field(path + ".direct_wait_caused_ns", a.direct_wait_caused_ns,
          b.direct_wait_caused_ns);
    Field(path + ".via.size()", a.via.size(), b.via.size());
    for (size_t i = 0; i < a.via.size() && !found_; ++i) {
      const std::string at = absl::StrCat(path, ".via[", i, "]");
      Field(at + ".rank", a.via[i].rank, b.via[i].rank);
      Field(at + ".wait_ns", a.via[i].wait_ns, b.via[i].wait_ns);
    }
    Field(path + ".saved_ns", a.saved_ns, b.saved_ns);
  }

  void Collectives(const std::string& path,
                   const std::optional<WindowCollectives>& a,
                   const std::optional<WindowCollectives>& b) {
    if (found_) return;
    if (a.has_value() != b.has_value()) {
      Report(path,
             absl::StrCat(a ? "set" : "none", " vs ", b ? "set" : "none"));
      return;
    }
    if (!a) return;
    Field(path + ".key", int{a->key}, int{b->key});
    Field(path + ".kernels", a->kernels, b->kernels);
    Field(path + ".matched", a->matched, b->matched);
    Field(path + ".unmatched", a->unmatched, b->unmatched);
    Field(path + ".unsynchronized", a->unsynchronized, b->unsynchronized);
    Field(path + ".used", a->used, b->used);
    Field(path + ".unattributed", a->unattributed, b->unattributed);
    Field(path + ".seq_backwards", a->seq_backwards, b->seq_backwards);
    Field(path + ".seq_jumps", a->seq_jumps, b->seq_jumps);
    Field(path + ".job_ns", a->job_ns, b->job_ns);
    Field(path + ".job_ns_without_stragglers", a->job_ns_without_stragglers,
          b->job_ns_without_stragglers);
    List(path + ".ranks", a->ranks, b->ranks, &Differ::Rank);
    List(path + ".stragglers", a->stragglers, b->stragglers,
         &Differ::Straggler);
    List(path + ".timelines", a->timelines, b->timelines, &Differ::Timeline);
  }

  void Timeline(const std::string& path, const RankTimeline& a,
                const RankTimeline& b) {
    Field(path + ".start_us", a.start_us, b.start_us);
    Field(path + ".merged_us", a.merged_us, b.merged_us);
    Field(path + ".bin_us", a.bin_us, b.bin_us);
    Field(path + ".segments.size()", a.segments.size(), b.segments.size());
    for (size_t i = 0; i < a.segments.size() && !found_; ++i) {
      const std::string at = absl::StrCat(path, ".segments[", i, "]");
      Field(at + ".state", int{a.segments[i].state}, int{b.segments[i].state});
      Field(at + ".us", a.segments[i].us, b.segments[i].us);
    }
  }

  template <typename T, typename Fn>
  void List(const std::string& path, const std::vector<T>& a,
            const std::vector<T>& b, Fn each) {
    Field(path + ".size()", a.size(), b.size());
    for (size_t i = 0; i < a.size() && !found_; ++i) {
      (this->*each)(absl::StrCat(path, "[", i, "]"), a[i], b[i]);
    }
  }

 private:
  void Report(const std::string& path, const std::string& values) {
    found_ = true;
    if (diff_ != nullptr) *diff_ = absl::StrCat(path, ": ", values);
  }

  std::string* diff_;
  bool found_ = false;
};

}  // namespace

std::string StragglerCauseName(const Straggler& s) {
  std::string best;
  int64_t best_ns = 0;
  auto consider = [&](absl::string_view name, int64_t ns) {
    if (ns > best_ns) {
      best_ns = ns;
      best = std::string(name);
    }
  };
  consider("compute", s.compute_ns);
  consider("comm", s.comm_ns);
  for (BubbleCause c : kAllBubbleCauses) {
    int64_t ns = s.causes[static_cast<int>(c)];
    if (c == BubbleCause::kUnattributed) ns += s.unattributed_ns;
    consider(BubbleCauseName(c), ns);
  }
  return best;
}

int64_t StragglerCostNs(const WindowCollectives& c, int64_t ranks_left_out) {
  if (c.job_ns < 0 || c.job_ns_without_stragglers < 0) return 0;
  const int64_t saved = c.job_ns - c.job_ns_without_stragglers;
  if (saved <= 0) return 0;
  return saved * (static_cast<int64_t>(c.ranks.size()) + ranks_left_out);
}

bool SameWindow(const WindowSummary& a, const WindowSummary& b,
                std::string* diff) {
  Differ d(diff);
  d.Field("job", a.job, b.job);
  d.Field("window.start_ns", a.window.start_ns, b.window.start_ns);
  d.Field("window.end_ns", a.window.end_ns, b.window.end_ns);
  d.Stats("window.job", a.window.job, b.window.job);
  d.List("window.devices", a.window.devices, b.window.devices, &Differ::Device);
  d.List("window.top_bubbles", a.window.top_bubbles, b.window.top_bubbles,
         &Differ::Bubble);
  d.Field("gpu_events", a.gpu_events, b.gpu_events);
  d.Field("cpu_events", a.cpu_events, b.cpu_events);
  d.Field("late_events", a.late_events, b.late_events);
  d.Field("host_skew_ns", a.host_skew_ns, b.host_skew_ns);
  d.Collectives("collectives", a.collectives, b.collectives);
  d.Field("late_collectives", a.late_collectives, b.late_collectives);
  d.Field("observed_ns", a.observed_ns.value_or(-1),
          b.observed_ns.value_or(-1));
  d.Field("trimmed", std::string(a.trimmed ? "set" : "none"),
          std::string(b.trimmed ? "set" : "none"));
  if (a.trimmed && b.trimmed) {
    const WindowTrim& x = *a.trimmed;
    const WindowTrim& y = *b.trimmed;
    d.Field("trimmed.limit_bytes", x.limit_bytes, y.limit_bytes);
    d.Field("trimmed.original_bytes", x.original_bytes, y.original_bytes);
    d.Field("trimmed.names_cut", x.names_cut, y.names_cut);
    d.Field("trimmed.devices", x.devices, y.devices);
    d.Field("trimmed.top_bubbles", x.top_bubbles, y.top_bubbles);
    d.Field("trimmed.ranks", x.ranks, y.ranks);
    d.Field("trimmed.stragglers", x.stragglers, y.stragglers);
    d.Field("trimmed.via", x.via, y.via);
    d.Field("trimmed.timelines", x.timelines, y.timelines);
  }
  if (!d.found() && a.closed_by != b.closed_by) {
    d.Field("closed_by", std::string(ClosedByName(a.closed_by)),
            std::string(ClosedByName(b.closed_by)));
  }
  return !d.found();
}

std::string TimelineStateName(uint8_t state) {
  switch (state) {
    case static_cast<uint8_t>(TimelineState::kCompute):
      return "compute";
    case static_cast<uint8_t>(TimelineState::kWait):
      return "wait";
    case static_cast<uint8_t>(TimelineState::kTransfer):
      return "transfer";
    case static_cast<uint8_t>(TimelineState::kUnobserved):
      return "unobserved";
  }
  const int cause = state - static_cast<int>(TimelineState::kBubble);
  if (cause >= 0 && cause < kNumBubbleCauses) {
    return std::string(BubbleCauseName(static_cast<BubbleCause>(cause)));
  }
  return "unknown";
}

double RankWindow::busy_useful_utilization() const {
  if (span_ns <= 0) return 0.0;
  return static_cast<double>(compute_ns - comm_wait_ns) /
         static_cast<double>(span_ns);
}

absl::string_view WindowCollectiveKeyName(uint8_t key) {
  switch (key) {
    case 0:
      return "pg_seq";
    case 1:
      return "pg_order";
    case 2:
      return "stream_order";
  }
  return "?";
}

absl::string_view ClosedByName(WindowSummary::ClosedBy closed_by) {
  switch (closed_by) {
    case WindowSummary::ClosedBy::kWatermark:
      return "watermark";
    case WindowSummary::ClosedBy::kIdleTimeout:
      return "idle_timeout";
    case WindowSummary::ClosedBy::kEndMarker:
      return "end_marker";
    case WindowSummary::ClosedBy::kObservationEnd:
      return "observation_end";
    case WindowSummary::ClosedBy::kBufferFull:
      return "buffer_full";
  }
  return "unknown";
}

std::optional<WindowSummary::ClosedBy> ParseClosedBy(absl::string_view name) {
  for (WindowSummary::ClosedBy c : kAllClosedBy) {
    if (ClosedByName(c) == name) return c;
  }
  return std::nullopt;
}

}  // namespace bubblewatch
