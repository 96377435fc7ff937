// AlertEvent: one firing, repeat or resolution of an on-call rule, what the
// evaluator emits and what goes to the `bubblewatch.alerts` topic (as the
// JSON of AlertEventToJson, schema in docs/alerts.md) and to Alertmanager.
#ifndef BUBBLEWATCH_ALERTS_ALERT_EVENT_H_
#define BUBBLEWATCH_ALERTS_ALERT_EVENT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "alerts/alert_rules.h"
#include "schemas/analysis.h"
#include "schemas/bubble_cause.h"

namespace bubblewatch {

enum class AlertStatus : uint8_t { kFiring = 0, kRepeat = 1, kResolved = 2 };

// "firing", "repeat", "resolved".
absl::string_view AlertStatusName(AlertStatus status);

struct AlertEvent {
  AlertStatus status = AlertStatus::kFiring;
  std::string rule;
  RuleKind kind = RuleKind::kUtilizationBelow;
  std::string severity;
  std::string summary;            // The rule's, or a generated one.
  std::string job;                // Empty for a fleet alert.
  std::vector<std::string> jobs;  // Fleet alerts: the jobs firing `rule`.
  // The alert's cause, fixed for its lifetime (Alertmanager's `cause`
  // label): the rule's cause for cause_share_above, else the dominant cause
  // of the window that fired it; empty when none.
  std::string cause;
  absl::Time starts_at = absl::UnixEpoch();  // When it first fired (wall).
  // When it resolved; InfiniteFuture while firing.
  absl::Time ends_at = absl::InfiniteFuture();
  absl::Time sent_at = absl::UnixEpoch();  // When this event was emitted.

  // What was measured: `measure` names the value ("utilization",
  // "host_sync_share", "largest_bubble_s", "silent_s", "jobs_firing").
  std::string measure;
  double value = 0.0;
  double threshold = 0.0;
  // The window the value comes from (0, 0 when none: silence, fleet).
  int64_t window_start_ns = 0;
  int64_t window_end_ns = 0;
  double utilization = 0.0;  // Of that window.

  // The cause holding most of the window's bubble time, its share of it and
  // the advice for it (schemas/bubble_cause.h).
  std::optional<BubbleCause> dominant_cause;
  double dominant_share = 0.0;
  // The window's largest bubble: the kernels around it and what was blamed.
  std::optional<BubbleReport> largest_bubble;
  // straggler alerts: the window's root straggler (the first: the rank the
  // most wait was blamed on at its root, docs/semantics.md#root-cause, never
  // a rank that only waited), its host ("" when unknown) and what made it
  // late: the
  // largest part of its split, "compute", "comm" or a cause name
  // (docs/semantics.md#stragglers). Absent for other kinds, and for a
  // straggler alert's window without a straggler (while it resolves).
  std::optional<int32_t> straggler_rank;
  std::string straggler_host;
  std::string straggler_cause;
  // What the straggler cost its job in the window
  // (docs/semantics.md#what-it-cost): its saved_ns, else the window's
  // what-if saving; -1 when the window says none. Over straggler_of_ns: the
  // window's length.
  int64_t straggler_cost_ns = -1;
  int64_t straggler_of_ns = 0;
  // The root straggler's host, fixed for the alert's lifetime like `cause`
  // (Alertmanager's `host` label, so alerts route per machine); empty for
  // other kinds and when unknown.
  std::string host;
  std::string dashboard_url;

  // rule + "/" + job: one alert's identity across its events.
  std::string key() const { return rule + "/" + job; }
};

// The topic's JSON value (docs/alerts.md, "Alert events").
std::string AlertEventToJson(const AlertEvent& event);

// Parses what AlertEventToJson wrote. Errors: kInvalidArgument naming the
// missing or malformed field.
absl::StatusOr<AlertEvent> ParseAlertEventJson(absl::string_view json);

// The alert texts people read (Alertmanager annotations, the topic's
// `description`): event times as RFC 3339 UTC ("2026-01-01T00:00:10Z"),
// durations in words (base/human_duration.h), shares as percentages.
//
// What was measured against what: "host_sync 16.2% of GPU time (threshold
// 10%)", "rank 3 on host node-b caused waits of 23.1% of GPU time
// (threshold 10%), mostly data_loading", "largest bubble 6.2 seconds (threshold
// 5 seconds)", "silent for 5 minutes 12 seconds (threshold 5 minutes)", "12
// jobs firing (threshold 10)".
std::string AlertMeasureText(const AlertEvent& event);
// AlertMeasureText, then the window it comes from ("in the window of 10
// seconds from 2026-01-01T00:00:10Z, utilization 62.1%") and a fleet
// alert's jobs.
std::string AlertDescription(const AlertEvent& event);
// "rank 3 on host node-b, mostly data_loading" (straggler_rank set).
std::string AlertStragglerText(const AlertEvent& event);
// "6.2 seconds on device 3 at 2026-01-01T00:00:12.5Z, cause host_sync,
// blamed on cudaStreamSynchronize; after kernel gemm; before kernel relu".
std::string AlertLargestBubbleText(const BubbleReport& bubble);

// One line for logs and the demo: "FIRING host-sync-stall job-a: host_sync
// 41% > 30% (...)".
std::string DescribeAlertEvent(const AlertEvent& event);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ALERTS_ALERT_EVENT_H_
