// AlertmanagerClient: delivers alert events to a real Alertmanager through
// its v2 API (POST /api/v2/alerts), on a background thread so that the
// processor's poll loop never waits for HTTP.
//
// Alertmanager expects firing alerts to be re-sent: one not re-posted within
// its resolve_timeout (default 5 m) is considered resolved. So the client
// keeps every active alert and re-posts all of them every `resend_interval`,
// and keeps every resolution until a POST carrying it succeeded. While
// Alertmanager is unreachable, POSTs are retried with exponential backoff
// (`initial_backoff` doubling up to `max_backoff`); nothing is dropped, and
// the first successful POST carries the current state of every alert.
//
// Labels (what Alertmanager groups, routes and silences on): alertname (the
// rule), job (absent for fleet alerts), severity, cause (the rule's cause, or
// the dominant cause when the alert fired), rule_kind. Annotations: summary,
// description (measured values), advice, largest_bubble, dashboard.
// startsAt is when it first fired; endsAt is set on resolution.
//
// Every event a successful POST carried is reported once by TakeDelivered,
// so the caller can record it as delivered durably (AlertHook commits that
// mark with its alert state).
//
// Thread safety: Send and the accessors may be called from any thread.
#ifndef BUBBLEWATCH_ALERTS_ALERTMANAGER_CLIENT_H_
#define BUBBLEWATCH_ALERTS_ALERTMANAGER_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "alerts/alert_event.h"

namespace bubblewatch {

struct AlertmanagerOptions {
  // Base URL, e.g. "http://127.0.0.1:9093" (a path prefix is kept).
  std::string url;
  absl::Duration resend_interval = absl::Minutes(1);
  absl::Duration initial_backoff = absl::Milliseconds(500);
  absl::Duration max_backoff = absl::Seconds(30);
  absl::Duration request_timeout = absl::Seconds(5);
};

struct AlertmanagerStats {
  int64_t posts_ok = 0;
  int64_t posts_failed = 0;
  int64_t active = 0;            // Firing alerts kept for re-posting.
  int64_t pending_resolved = 0;  // Resolutions not yet delivered.
  std::string last_error;
};

class AlertmanagerClient {
 public:
  // Starts the sender thread. Errors: kInvalidArgument for a URL that is not
  // http://HOST[:PORT][/PREFIX].
  static absl::StatusOr<std::unique_ptr<AlertmanagerClient>> Create(
      const AlertmanagerOptions& options);
  // Stops the thread after one last attempt to deliver what is pending.
  ~AlertmanagerClient();

  // Queues events (firing and repeats replace the alert's latest state;
  // a resolution replaces it until delivered). Never blocks on the network.
  void Send(const std::vector<AlertEvent>& events);

  // Stops re-posting the alerts of `jobs` and drops their undelivered
  // resolutions: another processor owns those jobs now and delivers them
  // (it restored their undelivered events with their state).
  void Forget(const std::vector<std::string>& jobs);

  AlertmanagerStats stats() const;

  // The events carried by successful POSTs since the last call (the latest
  // per alert).
  std::vector<AlertEvent> TakeDelivered();

  // The JSON array POSTed for `events` (exposed for tests).
  static std::string ToAlertmanagerJson(const std::vector<AlertEvent>& events);

 private:
  AlertmanagerClient(const AlertmanagerOptions& options, std::string host,
                     std::string path_prefix);
  void Loop();
  bool Post(const std::string& body, std::string* error);

  const AlertmanagerOptions options_;
  const std::string host_;         // scheme://host:port for httplib.
  const std::string path_prefix_;  // "" or "/prefix".

  mutable absl::Mutex mu_;
  // By AlertEvent::key(); resolved ones until delivered.
  absl::btree_map<std::string, AlertEvent> alerts_ ABSL_GUARDED_BY(mu_);
  // Delivered since the last TakeDelivered, by AlertEvent::key().
  absl::btree_map<std::string, AlertEvent> delivered_ ABSL_GUARDED_BY(mu_);
  bool changed_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  AlertmanagerStats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_ALERTS_ALERTMANAGER_CLIENT_H_
