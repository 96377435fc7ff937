// The dashboard in a real browser (ctest label `browser`): `bubblewatch
// serve` over a store, Debian's Chromium headless on the job page and the
// fleet page; the page marks #status data-state="rendered" once Chart.js has
// drawn. Keeps a screenshot of the job page as a test artifact
// (BUBBLEWATCH_ARTIFACT_DIR/dashboard_job.png).
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cli/cli_runner.h"
#include "tests/cli/serve_process.h"
#include "tests/storage/query_test_windows.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace {

using ::bubblewatch::testing::ReadFile;
using ::bubblewatch::testing::ServeProcess;
using ::testing::HasSubstr;

// Runs headless Chromium with `args` on `url`; returns its stdout. The
// virtual time budget lets the page's fetches and drawing finish before the
// DOM is dumped or the screenshot taken, without sleeping.
std::string Chromium(const std::string& profile, const std::string& args,
                     const std::string& url, int* exit_code) {
  const std::string out = profile + "/stdout";
  const std::string cmd =
      "chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
      "--no-first-run --hide-scrollbars --user-data-dir='" +
      profile + "' --virtual-time-budget=10000 " + args + " '" + url + "' > '" +
      out + "' 2>'" + profile + "/stderr'";
  const int status = std::system(cmd.c_str());
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return ReadFile(out);
}

class DashboardBrowserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(std::system("command -v chromium >/dev/null"), 0)
        << "chromium is missing: ops/build installs it (Debian package "
           "chromium)";
    ASSERT_TRUE(query_test::WriteFleetStore(dir_.Sub("store")).ok());
    server_ = ServeProcess::Start(dir_.Sub("store"));
    ASSERT_NE(server_, nullptr);
  }

  testing::TempDir dir_;
  std::unique_ptr<ServeProcess> server_;
};

TEST_F(DashboardBrowserTest, JobPageDrawsTheChartOfEveryWindow) {
  int rc = -1;
  const std::string dom = Chromium(dir_.path(), "--dump-dom",
                                   server_->url() + "/?job=alpha&last=1h", &rc);
  ASSERT_EQ(rc, 0) << ReadFile(dir_.Sub("stderr"));
  EXPECT_THAT(dom, HasSubstr(R"(data-state="rendered")")) << dom;
  EXPECT_THAT(dom, HasSubstr(R"(data-windows="360")"));
  // compute + host_sync + launch_overhead stacked.
  EXPECT_THAT(dom, HasSubstr(R"(data-datasets="3")"));
  EXPECT_THAT(dom, HasSubstr("utilization, last 1m"));
  EXPECT_THAT(dom, HasSubstr("cudaStreamSynchronize"));  // Top bubbles.
  EXPECT_THAT(dom, HasSubstr("gemm_40"));
}

TEST_F(DashboardBrowserTest, FleetPageListsTheJobs) {
  int rc = -1;
  const std::string dom =
      Chromium(dir_.path(), "--dump-dom", server_->url() + "/", &rc);
  ASSERT_EQ(rc, 0) << ReadFile(dir_.Sub("stderr"));
  EXPECT_THAT(dom, HasSubstr(R"(data-state="rendered")")) << dom;
  // The API ranks the fleet's last hour: beta's windows ended long before,
  // so 3 of the 4 jobs.
  EXPECT_THAT(dom, HasSubstr(R"(data-rows="3")"));
  EXPECT_THAT(dom, HasSubstr("?job=odd%2Fjob%20%22x%22"));
}

TEST_F(DashboardBrowserTest, KeepsAScreenshotOfTheJobPage) {
  const std::string png =
      std::string(BUBBLEWATCH_ARTIFACT_DIR) + "/dashboard_job.png";
  std::filesystem::remove(png);
  int rc = -1;
  Chromium(dir_.path(), "--window-size=1280,900 --screenshot='" + png + "'",
           server_->url() + "/?job=alpha", &rc);
  ASSERT_EQ(rc, 0) << ReadFile(dir_.Sub("stderr"));
  ASSERT_TRUE(std::filesystem::exists(png));
  // A drawn chart of 360 stacked bars compresses far worse than a blank page.
  EXPECT_GT(std::filesystem::file_size(png), 30'000u);
  const std::string head = ReadFile(png).substr(0, 8);
  EXPECT_EQ(head, "\x89PNG\r\n\x1a\n");
}

}  // namespace
}  // namespace bubblewatch
