#include "serve/device_report.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "alerts/alert_event.h"
#include "base/json_writer.h"
#include "base/status_macros.h"

namespace bubblewatch {
namespace {}  // namespace

absl::StatusOr<JobDeviceReport> QueryJobDevices(const WindowStoreReader& store,
                                                absl::string_view job,
                                                const JobPeriod& period) {
  // QueryJob decides which windows the period holds (and validates it), so
  // that this view and the job report always show the same windows; its
  // scan decodes job-level figures only, so the per-device ones are read
  // again here.
  ASSIGN_OR_RETURN(JobReport report,
                   QueryJob(store, job, period, /*top_bubbles=*/0));
  JobDeviceReport out;
  out.job = report.job;
  out.from_ns = report.from_ns;
  out.to_ns = report.to_ns;
  if (report.windows.empty()) return out;
  absl::flat_hash_map<int64_t, size_t> index;  // Window start -> column.
  for (const WindowPoint& w : report.windows) {
    index[w.start_ns] = out.window_starts_ns.size();
    out.window_starts_ns.push_back(w.start_ns);
    out.window_ends_ns.push_back(w.end_ns);
  }
  ASSIGN_OR_RETURN(
      std::vector<WindowSummary> windows,
      store.Scan(job, absl::FromUnixNanos(out.window_starts_ns.front()),
                 absl::FromUnixNanos(out.window_starts_ns.back()) +
                     absl::Nanoseconds(1),
                 WindowDetail::kFull));
  absl::flat_hash_map<int32_t, size_t> series;  // Device -> out.devices.
  for (const WindowSummary& w : windows) {
    auto column = index.find(w.window.start_ns);
    if (column == index.end()) continue;
    for (const DeviceWindow& d : w.window.devices) {
      auto [it, added] = series.try_emplace(d.device, out.devices.size());
      if (added) {
        out.devices.push_back(
            DeviceSeries{.device = d.device,
                         .total = {},
                         .utilization = std::vector<std::optional<double>>(
                             out.window_starts_ns.size(), std::nullopt)});
      }
      DeviceSeries& s = out.devices[it->second];
      s.total.Add(d.stats);
      if (d.stats.span_ns > 0)
        s.utilization[column->second] = d.stats.utilization();
    }
  }
  std::sort(out.devices.begin(), out.devices.end(),
            [](const DeviceSeries& a, const DeviceSeries& b) {
              return a.device < b.device;
            });
  return out;
}

std::string RenderJobDevicesJson(const JobDeviceReport& r, bool pretty) {
  JsonWriter w(pretty ? 2 : 0);
  w.BeginObject();
  w.Key("job").String(r.job);
  w.Key("from_ns").Int(r.from_ns);
  w.Key("to_ns").Int(r.to_ns);
  w.Key("window_starts_ns").BeginArray();
  for (int64_t t : r.window_starts_ns) w.Int(t);
  w.EndArray();
  w.Key("window_ends_ns").BeginArray();
  for (int64_t t : r.window_ends_ns) w.Int(t);
  w.EndArray();
  w.Key("devices").BeginArray();
  for (const DeviceSeries& s : r.devices) {
    w.BeginObject();
    w.Key("device").Int(s.device);
    w.Key("span_us").Double(JsonUs(s.total.span_ns));
    w.Key("compute_us").Double(JsonUs(s.total.compute_ns));
    w.Key("bubble_us").Double(JsonUs(s.total.bubble_ns));
    w.Key("utilization").Double(s.total.utilization());
    w.Key("windows").BeginArray();
    for (const std::optional<double>& u : s.utilization) {
      u.has_value() ? w.Double(std::round(*u * 1e4) / 1e4) : w.Null();
    }
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return std::move(w).Take();
}

std::string RenderAlertsJson(const StoredAlerts& alerts, bool pretty) {
  JsonWriter w(pretty ? 2 : 0);
  w.BeginObject();
  w.Key("evaluated_jobs").BeginArray();
  for (const std::string& job : alerts.evaluated_jobs) w.String(job);
  w.EndArray();
  w.Key("firing").BeginArray();
  for (const AlertEvent& e : alerts.firing) w.Raw(AlertEventToJson(e));
  w.EndArray();
  w.Key("unreadable_keys").BeginArray();
  for (const std::string& key : alerts.unreadable_keys) w.String(key);
  w.EndArray();
  w.EndObject();
  return std::move(w).Take();
}

}  // namespace bubblewatch
