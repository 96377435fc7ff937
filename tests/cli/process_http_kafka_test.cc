// `bubblewatch process --http` against a real Kafka broker (ctest label
// kafka; ops/test starts the broker and passes BUBBLEWATCH_KAFKA_BROKERS):
// while the processor runs, its HTTP server answers `bubblewatch query
// --server`, and /metrics carries the processor's counters next to the
// per-job gauges, accepted by promtool.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
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
using ::testing::Not;

TEST(ProcessHttp, ServesQueriesAndProcessorCountersWhileConsuming) {
  const std::string brokers = testing::Brokers();
  ASSERT_FALSE(HasFailure());  // Not set: no broker to test against.
  const std::string topic = testing::Unique("it-process-http");
  auto produce = RunBubblewatch(
      "produce --brokers " + brokers + " --topic " + topic +
      " --synthetic --jobs 2 --gpus-per-job 2 --duration 30s --rate 2000");
  ASSERT_EQ(produce.exit_code, 0) << produce.err;

  testing::TempDir dir;
  auto process = ServeProcess::StartCommand(
      "process --brokers " + brokers + " --topic " + topic + " --group " +
      topic + " --windows-topic '' --dlq-topic " + topic +
      ".dlq --idle-timeout 2s --store '" + dir.Sub("store") +
      "' --http 127.0.0.1:0 --log-level info");
  ASSERT_NE(process, nullptr);
  httplib::Client client(process->url());

  // Poll until both jobs have windows and the lag is known (the processor
  // measures it with each progress line, every 10 s).
  std::string page;
  testing::PollUntil(
      [&] {
        auto r = client.Get("/metrics");
        if (!r || r->status != 200) return false;
        page = r->body;
        return page.find("\nbubblewatch_jobs 2\n") != std::string::npos &&
               page.find("bubblewatch_processor_lag_messages{") !=
                   std::string::npos;
      },
      absl::Seconds(90), absl::Milliseconds(100));
  ASSERT_THAT(page, HasSubstr("\nbubblewatch_jobs 2\n")) << process->Log();
  EXPECT_THAT(page, HasSubstr("bubblewatch_processor_events_total "));
  EXPECT_THAT(page, Not(HasSubstr("bubblewatch_processor_events_total 0\n")));
  EXPECT_THAT(page, HasSubstr("bubblewatch_processor_lag_messages{topic=\"" +
                              topic + "\""));
  EXPECT_THAT(page, HasSubstr("bubblewatch_job_utilization{job=\""));

  const std::string file = dir.Sub("metrics.prom");
  std::ofstream(file) << page;
  EXPECT_EQ(std::system(("promtool check metrics < '" + file + "'").c_str()), 0)
      << page;

  const std::string remote = " --server " + process->url();
  auto jobs = RunBubblewatch("query jobs --json" + remote);
  ASSERT_EQ(jobs.exit_code, 0) << jobs.err;
  EXPECT_THAT(jobs.out, HasSubstr("\"window_count\":"));
  auto fleet = RunBubblewatch("query fleet" + remote);
  ASSERT_EQ(fleet.exit_code, 0) << fleet.err;
  EXPECT_THAT(fleet.out, HasSubstr("of 2 job(s)"));

  // `systemctl reload` (ExecReload in ops/systemd/) sends SIGHUP: started
  // without --rules, the processor says there is nothing to reload and
  // runs on (the default action would have ended it).
  ASSERT_TRUE(process->Signal(SIGHUP));
  EXPECT_TRUE(testing::PollUntil(
      [&] {
        return absl::StrContains(process->Log(),
                                 "SIGHUP: started without --rules");
      },
      absl::Seconds(30), absl::Milliseconds(50)))
      << process->Log();
  auto healthz = client.Get("/healthz");
  ASSERT_TRUE(healthz) << process->Log();
  EXPECT_EQ(healthz->status, 200);
  // ~ServeProcess then expects a clean exit on SIGTERM.
}

}  // namespace
}  // namespace bubblewatch
