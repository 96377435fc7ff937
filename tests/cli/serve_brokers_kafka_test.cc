// `bubblewatch serve --brokers` against the real test broker (ctest label
// kafka; issue 21 item 1): a processor on a 4-partition events topic
// publishes its windows; a serve started before the windows topic exists
// (it waits for it) and a second replica started afterwards, each with a
// store of its own, answer /api/v1/fleet and every job's windows with the
// very bytes `serve --store` gives over the processor's own store. A serve
// killed with SIGKILL comes back with the same answers, re-applying
// nothing (its offsets are in its store).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "simdjson.h"
#include "tests/cli/cli_runner.h"
#include "tests/cli/serve_process.h"
#include "tests/testing/kafka_broker.h"
#include "tests/testing/poll.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::testing::RunBubblewatch;
using ::bubblewatch::testing::ServeProcess;
using ::testing::HasSubstr;

std::string Body(const ServeProcess& s, const std::string& path) {
  httplib::Client client(s.url());
  client.set_read_timeout(30);
  auto r = client.Get(path);
  if (!r) return "<no answer>";
  return std::to_string(r->status) + " " + r->body;
}

// The paths whose bodies must agree: the fleet (two periods and orders)
// and every job's windows and devices.
std::vector<std::string> Paths(const std::vector<std::string>& jobs) {
  std::vector<std::string> paths = {"/api/v1/fleet",
                                    "/api/v1/fleet?last=24h&top=100",
                                    "/api/v1/fleet?by=bubble_ratio&last=5m"};
  for (const std::string& j : jobs) {
    paths.push_back("/api/v1/jobs/" + j + "/windows?last=24h");
    paths.push_back("/api/v1/jobs/" + j + "/devices?last=1h");
  }
  return paths;
}

std::map<std::string, std::string> Bodies(
    const ServeProcess& s, const std::vector<std::string>& paths) {
  std::map<std::string, std::string> out;
  for (const std::string& p : paths) out[p] = Body(s, p);
  return out;
}

// Polls until `s` has applied everything on the topic (lag 0) and answers
// as `want`; returns whether it did.
bool CatchesUp(const ServeProcess& s,
               const std::map<std::string, std::string>& want) {
  std::vector<std::string> paths;
  for (const auto& [p, body] : want) paths.push_back(p);
  return testing::PollUntil(
      [&] {
        return Body(s, "/healthz").find("\"lag_messages\":0}") !=
                   std::string::npos &&
               Bodies(s, paths) == want;
      },
      absl::Seconds(90), absl::Milliseconds(200));
}

// One line per path that differs, for the failure message.
std::string Differences(const std::map<std::string, std::string>& want,
                        const std::map<std::string, std::string>& got) {
  std::string out;
  for (const auto& [p, body] : want) {
    auto it = got.find(p);
    const std::string other = it == got.end() ? "<missing>" : it->second;
    if (other != body) {
      out += p + "\n  want " + body.substr(0, 300) + "\n  got  " +
             other.substr(0, 300) + "\n";
    }
  }
  return out;
}

TEST(ServeBrokers, ReplicasAnswerAsTheProcessorsStoreAndSurviveSigkill) {
  const std::string brokers = testing::Brokers();
  ASSERT_FALSE(HasFailure());
  const std::string topic = testing::Unique("it-serve-brokers");
  const std::string windows = topic + ".windows";
  ASSERT_NO_FATAL_FAILURE(testing::CreateTopic(topic, 4, brokers));
  testing::TempDir dir;

  // Replica 1 starts first: the windows topic does not exist yet.
  const std::string serve_args = " --brokers " + brokers + " --windows-topic " +
                                 windows +
                                 " --listen 127.0.0.1:0 --log-level info";
  auto first = ServeProcess::StartCommand("serve --store '" +
                                          dir.Sub("serve1") + "'" + serve_args);
  ASSERT_NE(first, nullptr);

  auto produce = RunBubblewatch(
      "produce --brokers " + brokers + " --topic " + topic +
      " --synthetic --jobs 8 --gpus-per-job 2 --duration 40s --rate 400"
      " --log-level error");
  ASSERT_EQ(produce.exit_code, 0) << produce.err;
  auto process = RunBubblewatch(
      "process --brokers " + brokers + " --topic " + topic + " --group " +
          topic + " --windows-topic " + windows + " --state-topic " + topic +
          ".state --dlq-topic " + topic +
          ".dlq --idle-timeout 1s --exit-when-idle 3s --log-level info"
          " --store '" +
          dir.Sub("processor") + "'",
      ".", /*kill_after_s=*/300);
  ASSERT_EQ(process.exit_code, 0) << process.err;
  EXPECT_THAT(process.err,
              HasSubstr("created windows topic " + windows + ": 4 partitions"));

  // The oracle: `serve --store` over the processor's own store.
  auto oracle = ServeProcess::Start(dir.Sub("processor"));
  ASSERT_NE(oracle, nullptr);
  simdjson::dom::parser parser;
  const std::string jobs_body = Body(*oracle, "/api/v1/jobs");
  ASSERT_EQ(jobs_body.substr(0, 4), "200 ") << jobs_body;
  std::vector<std::string> jobs;
  for (simdjson::dom::element j :
       parser.parse(jobs_body.substr(4))["jobs"].get_array()) {
    jobs.emplace_back(std::string_view(j["job"]));
  }
  ASSERT_EQ(jobs.size(), 8u) << jobs_body;
  const std::map<std::string, std::string> want = Bodies(*oracle, Paths(jobs));
  for (const auto& [p, body] : want) {
    ASSERT_EQ(body.substr(0, 4), "200 ") << p << ": " << body;
  }

  EXPECT_TRUE(CatchesUp(*first, want))
      << Differences(want, Bodies(*first, Paths(jobs))) << first->Log();
  EXPECT_EQ(Bodies(*first, Paths(jobs)), want);
  // The same jobs, each with the processor's window count.
  auto first_jobs = Body(*first, "/api/v1/jobs");
  for (simdjson::dom::element j :
       parser.parse(jobs_body.substr(4))["jobs"].get_array()) {
    EXPECT_THAT(first_jobs,
                HasSubstr("\"job\":\"" +
                          std::string(std::string_view(j["job"])) + "\""));
  }
  EXPECT_THAT(first->Log(), HasSubstr("does not exist (yet)"));

  // A second replica, started after the fact, from the topic alone.
  auto second = ServeProcess::StartCommand(
      "serve --store '" + dir.Sub("serve2") + "'" + serve_args);
  ASSERT_NE(second, nullptr);
  EXPECT_TRUE(CatchesUp(*second, want))
      << Differences(want, Bodies(*second, Paths(jobs))) << second->Log();
  EXPECT_EQ(Body(*second, "/api/v1/fleet"), Body(*first, "/api/v1/fleet"));
  EXPECT_EQ(Body(*second, "/api/v1/fleet?last=24h&top=100"),
            Body(*first, "/api/v1/fleet?last=24h&top=100"));

  // kill -9 and restart on the same store: the same answers, and nothing
  // applied again (it resumes at the offsets stored with the windows).
  first->Kill();
  auto restarted = ServeProcess::StartCommand(
      "serve --store '" + dir.Sub("serve1") + "'" + serve_args);
  ASSERT_NE(restarted, nullptr);
  EXPECT_TRUE(CatchesUp(*restarted, want))
      << Differences(want, Bodies(*restarted, Paths(jobs))) << restarted->Log();
  const std::string metrics = Body(*restarted, "/metrics");
  EXPECT_THAT(metrics, HasSubstr("\nbubblewatch_serve_windows_applied_total{"
                                 "topic=\"" +
                                 windows + "\"} 0\n"));
  EXPECT_THAT(metrics, HasSubstr("\nbubblewatch_serve_lag_messages{topic=\"" +
                                 windows + "\"} 0\n"));
  EXPECT_THAT(restarted->Log(), HasSubstr("from the store"));
}

TEST(ServeBrokers, UsageErrors) {
  EXPECT_EQ(RunBubblewatch("serve").exit_code, 2);
  EXPECT_EQ(RunBubblewatch("serve --store x --windows-topic t").exit_code, 2);
  EXPECT_EQ(RunBubblewatch("serve --brokers embedded").exit_code, 2);
  auto twice = RunBubblewatch("serve --brokers a:1 --brokers b:1 --store x");
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_THAT(twice.err, HasSubstr("'--brokers' given more than once"));
}

}  // namespace
}  // namespace bubblewatch
