// What the alert tests against REAL servers share (ctest label `kafka`;
// ops/test starts the broker and an Alertmanager and passes their addresses
// in the environment): the required environment, Alertmanager's list of
// alerts, the `process` command line of an alerting processor, and
// `bubblewatch` run to its end.
#ifndef BUBBLEWATCH_TESTS_ALERTS_ALERT_KAFKA_FIXTURE_H_
#define BUBBLEWATCH_TESTS_ALERTS_ALERT_KAFKA_FIXTURE_H_

#include <string>
#include <vector>

namespace bubblewatch::testing {

// The value of the environment variable `name`. Unset or empty is a test
// failure (these tests fail, never skip, without their servers), and then
// returns "".
std::string RequiredEnv(const char* name);

// One alert as Alertmanager lists it: its labels and status.state.
struct ListedAlert {
  std::string alertname, job, severity, cause, state;
  std::string host;  // The `host` label (straggler alerts); "" when absent.
};

// GET `url`/api/v2/alerts (Alertmanager's default filter: active, silenced
// and inhibited, i.e. unresolved alerts), those whose `alertname` label is
// `alertname`. Empty when Alertmanager does not answer 200 with a JSON
// array (callers poll).
std::vector<ListedAlert> ListAlertmanagerAlerts(const std::string& url,
                                                const std::string& alertname);

// `process` of TOPIC into STORE with RULES, alerts sent to ALERTMANAGER (when
// not empty, resent every second) and to TOPIC.alerts, no windows topic;
// short session timeouts so that a restarted processor gets its partitions
// back quickly. `extra` replaces or adds flags (testing::SetFlags).
std::vector<std::string> AlertingProcessArgs(
    const std::string& brokers, const std::string& topic,
    const std::string& store, const std::string& rules,
    const std::string& alertmanager, std::vector<std::string> extra = {});

// Runs the `bubblewatch` binary under test with `args` and returns its exit
// status.
int RunBubblewatch(const std::vector<std::string>& args);

}  // namespace bubblewatch::testing

#endif  // BUBBLEWATCH_TESTS_ALERTS_ALERT_KAFKA_FIXTURE_H_
