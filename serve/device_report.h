// The per-device view of a job and the alert state of the fleet, for the
// dashboard (serve/dashboard/) and anyone else reading the HTTP API:
//   GET /api/v1/jobs/{job}/devices?last=1h   RenderJobDevicesJson
//   GET /api/v1/alerts                       RenderAlertsJson
// Both read only what the store holds: the per-device figures every stored
// window carries (schemas/window_summary.fbs, DeviceWindow) and the alert
// state the processor commits with its windows (alerts/alert_evaluator.h).
// Neither has a `bubblewatch query` counterpart; the JSON is documented in
// docs/query.md.
#ifndef BUBBLEWATCH_SERVE_DEVICE_REPORT_H_
#define BUBBLEWATCH_SERVE_DEVICE_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "alerts/alert_evaluator.h"
#include "storage/window_queries.h"
#include "storage/window_store.h"

namespace bubblewatch {

// One device of a job over a period.
struct DeviceSeries {
  int32_t device = 0;
  // This device's GPU-time over the period's windows.
  PeriodStats total;
  // Per window of JobDeviceReport::window_starts_ns: compute / span of this
  // device; nullopt where the window has no span for it (absent, or idle).
  std::vector<std::optional<double>> utilization;
};

// The windows of a period, device by device.
struct JobDeviceReport {
  std::string job;
  int64_t from_ns = 0;  // As JobReport: windows starting in [from, to).
  int64_t to_ns = 0;
  std::vector<int64_t> window_starts_ns;  // Start order.
  std::vector<int64_t> window_ends_ns;
  std::vector<DeviceSeries> devices;  // By device id.
};

// The windows of `job` that QueryJob reports for `period` (the same ones,
// and the same errors), with each window's per-device figures.
absl::StatusOr<JobDeviceReport> QueryJobDevices(const WindowStoreReader& store,
                                                absl::string_view job,
                                                const JobPeriod& period);

// {"job", "from_ns", "to_ns", "window_starts_ns": [...],
//  "window_ends_ns": [...], "devices": [{"device", "span_us", "compute_us",
//  "bubble_us", "utilization", "windows": [u | null, ...]}]}; per-window
// utilizations are rounded to 4 decimals (0.01 %) to keep a day of many
// devices small.
std::string RenderJobDevicesJson(const JobDeviceReport& report, bool pretty);

// {"evaluated_jobs": [...], "firing": [ALERT EVENT, ...],
//  "unreadable_keys": [...]}: each firing alert as its latest event, in the
// JSON of the bubblewatch.alerts topic (docs/alerts.md).
std::string RenderAlertsJson(const StoredAlerts& alerts, bool pretty);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_SERVE_DEVICE_REPORT_H_
