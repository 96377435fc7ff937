#include "alerts/alert_hook.h"

#include <utility>

#include "absl/container/btree_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_status.h"
#include "spdlog/spdlog.h"

namespace bubblewatch {

void AlertHookDeliveryReport(rd_kafka_t*, const rd_kafka_message_t* message,
                             void* opaque) {
  auto* self = static_cast<AlertHook*>(opaque);
  --self->undelivered_;
  if (message->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    self->delivery_error_ = rd_kafka_err2str(message->err);
  }
}

AlertHook::AlertHook(AlertHookOptions options, AlertRuleSet rules,
                     AlertmanagerClient* alertmanager)
    : options_(std::move(options)),
      evaluator_(std::move(rules), options_.evaluator),
      alertmanager_(alertmanager) {}

AlertHook::~AlertHook() {
  if (producer_) rd_kafka_flush(producer_.get(), 5'000);
}

absl::StatusOr<std::unique_ptr<AlertHook>> AlertHook::Create(
    AlertHookOptions options, AlertRuleSet rules,
    const WindowStoreReader* store, AlertmanagerClient* alertmanager) {
  std::unique_ptr<AlertHook> hook(
      new AlertHook(std::move(options), std::move(rules), alertmanager));
  ASSIGN_OR_RETURN(auto stored, store->AlertStates());
  // Jobs' states wait for their partition's assignment (OnJobsAssigned):
  // this instance may no longer own them. Fleet rules' states are its own.
  std::vector<std::pair<std::string, std::string>> states;
  for (auto& [key, blob] : stored) {
    absl::string_view job = key;
    if (absl::ConsumePrefix(&job, "j/")) {
      hook->local_job_states_[job] = std::move(blob);
    } else {
      states.emplace_back(std::move(key), std::move(blob));
    }
  }
  if (absl::Status s = hook->evaluator_.Restore(states); !s.ok()) {
    // Losing one job's alert state must not stop the processor: its alerts
    // start from scratch (and may fire again).
    spdlog::error("{}", s.ToString());
  }
  // Alerts of rules the file no longer has resolve now (at the first commit)
  // instead of being re-posted forever.
  AlertRuleSet current = hook->evaluator_.rules();
  hook->pending_ = hook->evaluator_.SetRules(std::move(current), absl::Now());
  ASSIGN_OR_RETURN(std::vector<JobInfo> jobs, store->ListJobs());
  for (const JobInfo& j : jobs) hook->last_event_ns_[j.job] = j.last_event_ns;
  const std::vector<AlertEvent> to_deliver = hook->evaluator_.ToDeliver();
  spdlog::info(
      "alerts: {} rules from {}; {} fleet alerts active after restore, {} "
      "resolutions not yet delivered (jobs' alerts: on assignment)",
      hook->evaluator_.rules().rules.size(), hook->evaluator_.rules().source,
      hook->evaluator_.Active().size(),
      to_deliver.size() - hook->evaluator_.Active().size());
  if (alertmanager != nullptr) alertmanager->Send(to_deliver);
  if (!hook->options_.brokers.empty()) {
    KafkaConfig config(hook->options_.brokers);
    for (const std::string& p : hook->options_.kafka_properties) {
      // Consumer-only properties are the processor's business.
      const std::string key = std::string(p.substr(0, p.find('=')));
      if (absl::StartsWith(key, "group.") || key == "auto.offset.reset" ||
          absl::StartsWith(key, "enable.auto.") ||
          key == "partition.assignment.strategy" ||
          key == "max.poll.interval.ms" || key == "isolation.level" ||
          absl::StartsWith(key, "fetch.") || key == "session.timeout.ms" ||
          key == "heartbeat.interval.ms") {
        continue;
      }
      RETURN_IF_ERROR(config.SetAssignment(p));
    }
    config.SetDefault("enable.idempotence", "true");
    config.SetDefault("linger.ms", "5");
    ASSIGN_OR_RETURN(RdKafkaConfPtr conf, config.Build());
    rd_kafka_conf_set_dr_msg_cb(conf.get(), AlertHookDeliveryReport);
    rd_kafka_conf_set_opaque(conf.get(), hook.get());
    ASSIGN_OR_RETURN(hook->producer_,
                     NewKafkaClient(RD_KAFKA_PRODUCER, std::move(conf)));
  }
  return hook;
}

void AlertHook::Reload(absl::Time now) {
  const std::string path =
      options_.rules_path_on_reload
          ? options_.rules_path_on_reload(options_.rules_path)
          : options_.rules_path;
  absl::StatusOr<AlertRuleSet> rules = LoadAlertRulesFile(path);
  if (!rules.ok()) {
    spdlog::error("alerts: reloading {} failed; keeping the {} old rules{}:",
                  path, evaluator_.rules().rules.size(),
                  path == options_.rules_path
                      ? ""
                      : absl::StrCat(" from ", options_.rules_path));
    for (absl::string_view line :
         absl::StrSplit(rules.status().message(), '\n')) {
      spdlog::error("  {}", std::string(line));
    }
    return;
  }
  options_.rules_path = path;
  spdlog::info("alerts: reloaded {} rules from {}", rules->rules.size(),
               options_.rules_path);
  for (AlertEvent& e : evaluator_.SetRules(*std::move(rules), now)) {
    pending_.push_back(std::move(e));
  }
}

bool AlertHook::WantsCommit(absl::Time now) {
  if (reload_.exchange(false) && !options_.rules_path.empty()) Reload(now);
  if (now - last_tick_ >= options_.tick_interval) {
    last_tick_ = now;
    for (AlertEvent& e : evaluator_.OnTick(now))
      pending_.push_back(std::move(e));
  }
  if (alertmanager_ != nullptr) {
    for (const AlertEvent& e : alertmanager_->TakeDelivered()) {
      evaluator_.MarkDelivered(e);
    }
  }
  return !pending_.empty() || evaluator_.HasStateUpdates();
}

absl::Status AlertHook::BeforeCommit(absl::Time now, StoreBatch& batch) {
  // Lifecycle order: a job running again counts before its windows, a
  // job that ended after its last windows (whose alerts then resolve).
  auto lifecycle = [&](const JobUpdate& u) {
    for (AlertEvent& e : evaluator_.OnJobLifecycle(u.job, *u.lifecycle, now)) {
      pending_.push_back(std::move(e));
    }
  };
  for (const JobUpdate& u : batch.jobs) {
    if (u.lifecycle && !u.lifecycle->ended) lifecycle(u);
    std::optional<EventNs>& known = last_event_ns_[u.job];
    // Activity is a newer event than the job's last known one.
    if (!u.last_event_ns || (known && *u.last_event_ns <= *known)) continue;
    known = u.last_event_ns;
    for (AlertEvent& e : evaluator_.OnJobActivity(u.job, now)) {
      pending_.push_back(std::move(e));
    }
  }
  for (const WindowSummary& w : batch.windows) {
    for (AlertEvent& e : evaluator_.OnWindow(w, now)) {
      pending_.push_back(std::move(e));
    }
  }
  for (const JobUpdate& u : batch.jobs) {
    if (u.lifecycle && u.lifecycle->ended) lifecycle(u);
  }
  RETURN_IF_ERROR(Publish(pending_));
  // Without Alertmanager the acknowledged topic is the only target.
  if (alertmanager_ == nullptr) {
    for (const AlertEvent& e : pending_) evaluator_.MarkDelivered(e);
  }
  for (AlertStateUpdate& u : evaluator_.TakeStateUpdates()) {
    batch.alert_states.push_back(std::move(u));
  }
  committing_ = std::move(pending_);
  pending_.clear();
  return absl::OkStatus();
}

absl::Status AlertHook::Publish(const std::vector<AlertEvent>& events) {
  if (!producer_ || events.empty()) return absl::OkStatus();
  for (const AlertEvent& e : events) {
    const std::string key = e.job.empty() ? "fleet" : e.job;
    const std::string value = AlertEventToJson(e);
    ++undelivered_;
    rd_kafka_resp_err_t err = rd_kafka_producev(
        producer_.get(), RD_KAFKA_V_TOPIC(options_.topic.c_str()),
        RD_KAFKA_V_KEY(key.data(), key.size()),
        RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      --undelivered_;
      return KafkaErrorToStatus(err,
                                absl::StrCat("producing to ", options_.topic));
    }
  }
  rd_kafka_flush(producer_.get(), 30'000);
  if (undelivered_ > 0 || !delivery_error_.empty()) {
    std::string why = delivery_error_.empty()
                          ? absl::StrCat(undelivered_,
                                         " not acknowledged "
                                         "within 30 s")
                          : delivery_error_;
    undelivered_ = 0;
    delivery_error_.clear();
    return absl::UnavailableError(absl::StrCat("alert events to ",
                                               options_.topic, ": ", why,
                                               "; not committing past them"));
  }
  return absl::OkStatus();
}

void AlertHook::OnJobsAssigned(
    const std::vector<std::string>& jobs,
    const std::map<std::string, std::string>& job_states) {
  absl::btree_set<std::string> all(jobs.begin(), jobs.end());
  for (const auto& [job, unused] : job_states) all.insert(job);
  int adopted = 0;
  for (const std::string& job : all) {
    std::optional<absl::string_view> blob;
    if (auto it = job_states.find(job); it != job_states.end()) {
      blob = it->second;
    } else if (auto local = local_job_states_.find(job);
               local != local_job_states_.end()) {
      blob = local->second;
    }
    if (blob) ++adopted;
    if (absl::Status s = evaluator_.AdoptJob(job, blob); !s.ok()) {
      spdlog::error("{}", s.ToString());
    }
    local_job_states_.erase(job);
  }
  if (adopted == 0) return;
  // What the previous owner emitted and Alertmanager may not have (it
  // forgets an alert not re-posted within its resolve_timeout).
  std::vector<AlertEvent> to_deliver;
  for (AlertEvent& e : evaluator_.ToDeliver()) {
    if (!e.job.empty() && all.contains(e.job)) to_deliver.push_back(e);
  }
  spdlog::info("alerts: adopted the alert state of {} jobs, {} to deliver",
               adopted, to_deliver.size());
  if (alertmanager_ != nullptr) alertmanager_->Send(to_deliver);
  // Alerts of rules this instance does not have (a rules file changed
  // since the state was committed) resolve at the next commit, as at start.
  AlertRuleSet current = evaluator_.rules();
  for (AlertEvent& e : evaluator_.SetRules(std::move(current), absl::Now())) {
    pending_.push_back(std::move(e));
  }
}

void AlertHook::OnJobsRevoked(const std::vector<std::string>& jobs) {
  for (const std::string& job : jobs) evaluator_.DropJob(job);
  if (alertmanager_ != nullptr) alertmanager_->Forget(jobs);
}

void AlertHook::AfterCommit(absl::Time now) {
  if (committing_.empty()) return;
  for (const AlertEvent& e : committing_) {
    spdlog::info("alert {}", DescribeAlertEvent(e));
    if (options_.on_event) options_.on_event(e);
  }
  if (alertmanager_ != nullptr) alertmanager_->Send(committing_);
  committing_.clear();
}

}  // namespace bubblewatch
