#include "alerts/alertmanager_client.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/json_writer.h"
#include "httplib.h"
#include "spdlog/spdlog.h"

namespace bubblewatch {
namespace {

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%d%ET%H:%M:%E*SZ", t, absl::UTCTimeZone());
}

}  // namespace

std::string AlertmanagerClient::ToAlertmanagerJson(
    const std::vector<AlertEvent>& events) {
  JsonWriter w;
  w.BeginArray();
  for (const AlertEvent& e : events) {
    w.BeginObject();
    w.Key("labels").BeginObject();
    w.Key("alertname").String(e.rule);
    if (!e.job.empty()) w.Key("job").String(e.job);
    w.Key("severity").String(e.severity);
    if (!e.cause.empty()) w.Key("cause").String(e.cause);
    // Straggler alerts: the root's machine, so Alertmanager routes per host.
    if (!e.host.empty()) w.Key("host").String(e.host);
    w.Key("rule_kind").String(RuleKindName(e.kind));
    w.Key("source").String("bubblewatch");
    w.EndObject();
    w.Key("annotations").BeginObject();
    w.Key("summary").String(e.summary);
    w.Key("description").String(AlertDescription(e));
    if (e.dominant_cause) {
      w.Key("dominant_cause")
          .String(absl::StrFormat("%s (%.0f%% of bubble time)",
                                  BubbleCauseName(*e.dominant_cause),
                                  100 * e.dominant_share));
      w.Key("advice").String(BubbleCauseAdvice(*e.dominant_cause));
    }
    if (e.largest_bubble) {
      w.Key("largest_bubble").String(AlertLargestBubbleText(*e.largest_bubble));
    }
    if (e.straggler_rank) {
      w.Key("straggler").String(AlertStragglerText(e));
    }
    if (!e.dashboard_url.empty()) w.Key("dashboard").String(e.dashboard_url);
    w.EndObject();
    w.Key("startsAt").String(Rfc3339(e.starts_at));
    if (e.status == AlertStatus::kResolved) {
      w.Key("endsAt").String(Rfc3339(e.ends_at));
    }
    if (!e.dashboard_url.empty()) w.Key("generatorURL").String(e.dashboard_url);
    w.EndObject();
  }
  w.EndArray();
  return std::move(w).Take();
}

absl::StatusOr<std::unique_ptr<AlertmanagerClient>> AlertmanagerClient::Create(
    const AlertmanagerOptions& options) {
  absl::string_view rest = options.url;
  std::string scheme;
  if (absl::ConsumePrefix(&rest, "http://")) {
    scheme = "http://";
  } else if (absl::ConsumePrefix(&rest, "https://")) {
    scheme = "https://";
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--alertmanager ", options.url,
        ": expected http://HOST[:PORT][/PREFIX], e.g. http://127.0.0.1:9093"));
  }
  const size_t slash = rest.find('/');
  absl::string_view host = rest.substr(0, slash);
  std::string prefix(slash == absl::string_view::npos ? ""
                                                      : rest.substr(slash));
  while (absl::EndsWith(prefix, "/")) prefix.pop_back();
  if (host.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--alertmanager ", options.url, ": no host"));
  }
  return std::unique_ptr<AlertmanagerClient>(
      new AlertmanagerClient(options, absl::StrCat(scheme, host), prefix));
}

AlertmanagerClient::AlertmanagerClient(const AlertmanagerOptions& options,
                                       std::string host,
                                       std::string path_prefix)
    : options_(options),
      host_(std::move(host)),
      path_prefix_(std::move(path_prefix)) {
  thread_ = std::thread([this] { Loop(); });
}

AlertmanagerClient::~AlertmanagerClient() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void AlertmanagerClient::Send(const std::vector<AlertEvent>& events) {
  if (events.empty()) return;
  absl::MutexLock lock(&mu_);
  for (const AlertEvent& e : events) alerts_[e.key()] = e;
  changed_ = true;
}

void AlertmanagerClient::Forget(const std::vector<std::string>& jobs) {
  if (jobs.empty()) return;
  const absl::flat_hash_set<std::string> gone(jobs.begin(), jobs.end());
  absl::MutexLock lock(&mu_);
  absl::erase_if(alerts_, [&](const auto& kv) {
    return !kv.second.job.empty() && gone.contains(kv.second.job);
  });
  absl::erase_if(delivered_, [&](const auto& kv) {
    return !kv.second.job.empty() && gone.contains(kv.second.job);
  });
}

AlertmanagerStats AlertmanagerClient::stats() const {
  absl::MutexLock lock(&mu_);
  AlertmanagerStats s = stats_;
  for (const auto& [key, e] : alerts_) {
    (e.status == AlertStatus::kResolved ? s.pending_resolved : s.active) += 1;
  }
  return s;
}

std::vector<AlertEvent> AlertmanagerClient::TakeDelivered() {
  absl::MutexLock lock(&mu_);
  std::vector<AlertEvent> out;
  out.reserve(delivered_.size());
  for (auto& [key, e] : delivered_) out.push_back(std::move(e));
  delivered_.clear();
  return out;
}

bool AlertmanagerClient::Post(const std::string& body, std::string* error) {
  httplib::Client client(host_);
  const int64_t timeout_ms =
      absl::ToInt64Milliseconds(options_.request_timeout);
  client.set_connection_timeout(timeout_ms / 1000, (timeout_ms % 1000) * 1000);
  client.set_read_timeout(timeout_ms / 1000, (timeout_ms % 1000) * 1000);
  client.set_write_timeout(timeout_ms / 1000, (timeout_ms % 1000) * 1000);
  httplib::Result res = client.Post(
      absl::StrCat(path_prefix_, "/api/v2/alerts"), body, "application/json");
  if (!res) {
    *error = absl::StrCat("POST ", host_, path_prefix_,
                          "/api/v2/alerts: ", httplib::to_string(res.error()));
    return false;
  }
  if (res->status != 200) {
    *error = absl::StrCat("POST ", host_, path_prefix_, "/api/v2/alerts: HTTP ",
                          res->status, ": ", res->body.substr(0, 200));
    return false;
  }
  return true;
}

void AlertmanagerClient::Loop() {
  absl::Duration backoff = options_.initial_backoff;
  absl::Time next_attempt = absl::InfiniteFuture();
  bool failing = false;
  while (true) {
    std::vector<AlertEvent> snapshot;
    bool stopping = false;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this, &failing]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || (changed_ && !failing);
      };
      mu_.AwaitWithDeadline(absl::Condition(&ready), next_attempt);
      stopping = stop_;
      if (stopping && alerts_.empty()) return;
      changed_ = false;
      for (const auto& [key, e] : alerts_) snapshot.push_back(e);
    }
    if (snapshot.empty()) {
      next_attempt = absl::InfiniteFuture();
      continue;
    }
    std::string error;
    const bool ok = Post(ToAlertmanagerJson(snapshot), &error);
    absl::MutexLock lock(&mu_);
    if (ok) {
      ++stats_.posts_ok;
      if (failing)
        spdlog::info("alertmanager reachable again: delivered {} alerts",
                     snapshot.size());
      failing = false;
      backoff = options_.initial_backoff;
      for (const AlertEvent& e : snapshot) delivered_[e.key()] = e;
      // Delivered resolutions are done, unless the alert changed meanwhile.
      for (const AlertEvent& e : snapshot) {
        if (e.status != AlertStatus::kResolved) continue;
        auto it = alerts_.find(e.key());
        if (it != alerts_.end() &&
            it->second.status == AlertStatus::kResolved &&
            it->second.sent_at == e.sent_at) {
          alerts_.erase(it);
        }
      }
      next_attempt = absl::Now() + options_.resend_interval;
    } else {
      ++stats_.posts_failed;
      stats_.last_error = error;
      if (!failing) {
        spdlog::warn("alertmanager: {}; retrying with backoff", error);
      }
      failing = true;
      changed_ = true;  // Everything is still to be delivered.
      next_attempt = absl::Now() + backoff;
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
    if (stopping) return;
  }
}

}  // namespace bubblewatch
