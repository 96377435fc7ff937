#include "tests/alerts/alert_kafka_fixture.h"

#include <cstdlib>
#include <string_view>

#include "gtest/gtest.h"
#include "httplib.h"
#include "simdjson.h"
#include "tests/testing/child_process.h"
#include "tests/testing/command_flags.h"
#include "tests/testing/test_time.h"

namespace bubblewatch::testing {

std::string RequiredEnv(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    ADD_FAILURE() << name << " is not set: run through ops/test, which "
                  << "starts a real broker and Alertmanager";
    return "";
  }
  return v;
}

std::vector<ListedAlert> ListAlertmanagerAlerts(const std::string& url,
                                                const std::string& alertname) {
  std::vector<ListedAlert> out;
  httplib::Client client(url);
  client.set_connection_timeout(2, 0);
  client.set_read_timeout(2, 0);
  httplib::Result res = client.Get("/api/v2/alerts");
  if (!res || res->status != 200) return out;
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(res->body).get(root) != simdjson::SUCCESS) return out;
  simdjson::dom::array alerts;
  if (root.get_array().get(alerts) != simdjson::SUCCESS) return out;
  for (simdjson::dom::element a : alerts) {
    auto label = [&](const char* key) {
      std::string_view v;
      return a["labels"][key].get_string().get(v) == simdjson::SUCCESS
                 ? std::string(v)
                 : std::string();
    };
    if (label("alertname") != alertname) continue;
    std::string_view state;
    if (a["status"]["state"].get_string().get(state) != simdjson::SUCCESS) {
      state = "?";
    }
    out.push_back({label("alertname"), label("job"), label("severity"),
                   label("cause"), std::string(state), label("host")});
  }
  return out;
}

int RunBubblewatch(const std::vector<std::string>& args) {
  return WaitChild(SpawnChild(BUBBLEWATCH_BINARY, args));
}

std::vector<std::string> AlertingProcessArgs(const std::string& brokers,
                                             const std::string& topic,
                                             const std::string& store,
                                             const std::string& rules,
                                             const std::string& alertmanager,
                                             std::vector<std::string> extra) {
  std::vector<std::string> args = {
      "process",
      "--brokers",
      brokers,
      "--topic",
      topic,
      "--group",
      topic + "-g",
      "--store",
      store,
      "--idle-timeout",
      "3s",
      "--rules",
      rules,
      "--alerts-topic",
      topic + ".alerts",
      "--windows-topic",
      "",
      "--log-level",
      "info",
      "-X",
      "session.timeout.ms=" + testing::GroupSessionMs(),
      "-X",
      "heartbeat.interval.ms=" + testing::GroupHeartbeatMs()};
  if (!alertmanager.empty()) {
    testing::SetFlags(
        args, {"--alertmanager", alertmanager, "--alertmanager-resend", "1s"});
  }
  testing::SetFlags(args, extra);
  return args;
}

}  // namespace bubblewatch::testing
