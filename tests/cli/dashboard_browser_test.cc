// The dashboard in a real browser (ctest label `browser`): `bubblewatch
// serve` over a store (tests/serve/dashboard_test_fleet.h), Debian's
// Chromium headless on the job page and the fleet page. The page marks
// #status data-state="rendered" once it has drawn, with the figures it drew
// and the boxes of its drawn regions; the tests read those from the DOM and
// check the pixels of those boxes in a screenshot taken at the same window
// size (same layout). The screenshots stay as test artifacts
// (BUBBLEWATCH_ARTIFACT_DIR/dashboard_*.png, brokers_dashboard_*.png).
//
// Built twice. dashboard_browser_tests serves the store with `serve
// --store`. dashboard_brokers_browser_tests
// (BUBBLEWATCH_DASHBOARD_FROM_BROKERS; ctest labels kafka and browser: it needs
// the real broker) publishes the same store to a windows topic and a state
// topic, as processors would, and serves it with `serve --brokers`: every page
// must look the same when it comes from the fleet query tier, job states and
// alerts included.
#include <png.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cli/cli_runner.h"
#include "tests/cli/serve_process.h"
#include "tests/serve/dashboard_test_fleet.h"
#include "tests/testing/temp_dir.h"
#if BUBBLEWATCH_DASHBOARD_FROM_BROKERS
#include "tests/cli/publish_store.h"
#endif

namespace bubblewatch {
namespace {

using ::bubblewatch::testing::ReadFile;
using ::bubblewatch::testing::ServeProcess;
using ::testing::HasSubstr;
using ::testing::Not;

// Runs headless Chromium with `args` on `url`; returns its stdout. The
// virtual time budget lets the page's fetches and drawing finish before the
// DOM is dumped or the screenshot taken, without sleeping.
std::string Chromium(const std::string& profile, const std::string& args,
                     const std::string& url, int* exit_code) {
  const std::string out = profile + "/stdout";
  const std::string cmd =
      "chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
      "--no-first-run --hide-scrollbars --force-device-scale-factor=1 "
      "--force-color-profile=srgb "
      "--user-data-dir='" +
      profile + "' --virtual-time-budget=10000 " + args + " '" + url + "' > '" +
      out + "' 2>'" + profile + "/stderr'";
  const int status = std::system(cmd.c_str());
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return ReadFile(out);
}

// The value of attribute `name` of the #status element in `dom`; "" if none.
std::string StatusData(const std::string& dom, const std::string& name) {
  std::smatch m;
  const std::regex tag(R"re(<div id="status"[^>]*>)re");
  if (!std::regex_search(dom, m, tag)) return "";
  const std::string status = m.str(0);
  const std::regex attr(" data-" + name + R"re(="([^"]*)")re");
  return std::regex_search(status, m, attr) ? m.str(1) : "";
}

double StatusNumber(const std::string& dom, const std::string& name) {
  double v = -1;
  EXPECT_TRUE(absl::SimpleAtod(StatusData(dom, name), &v))
      << name << " in " << dom.substr(0, 2000);
  return v;
}

// The <tr>...</tr> of the fleet table row of `job`; "" if none.
std::string FleetRow(const std::string& dom, const std::string& job) {
  const size_t at = dom.find("data-job=\"" + job + "\"");
  if (at == std::string::npos) return "";
  const size_t begin = dom.rfind("<tr", at);
  const size_t end = dom.find("</tr>", at);
  return dom.substr(begin, end - begin);
}

struct Box {
  int x = 0, y = 0, w = 0, h = 0;
};

// "x,y,w,h" as the page writes it (CSS px = screenshot px at scale 1).
Box ParseBox(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, ',');
  Box b;
  EXPECT_EQ(parts.size(), 4u) << text;
  if (parts.size() == 4) {
    EXPECT_TRUE(
        absl::SimpleAtoi(parts[0], &b.x) && absl::SimpleAtoi(parts[1], &b.y) &&
        absl::SimpleAtoi(parts[2], &b.w) && absl::SimpleAtoi(parts[3], &b.h))
        << text;
  }
  return b;
}

struct Rgb {
  int r, g, b;
};

// A screenshot decoded to RGBA by libpng.
class Image {
 public:
  static Image Load(const std::string& path) {
    Image img;
    png_image image{};
    image.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_file(&image, path.c_str())) {
      ADD_FAILURE() << "not a PNG: " << path << ": " << image.message;
      return img;
    }
    image.format = PNG_FORMAT_RGBA;
    img.pixels_.resize(PNG_IMAGE_SIZE(image));
    if (!png_image_finish_read(&image, nullptr, img.pixels_.data(), 0,
                               nullptr)) {
      ADD_FAILURE() << "bad PNG: " << path << ": " << image.message;
      img.pixels_.clear();
      return img;
    }
    img.width_ = static_cast<int>(image.width);
    img.height_ = static_cast<int>(image.height);
    return img;
  }

  int width() const { return width_; }
  int height() const { return height_; }

  Rgb At(int x, int y) const {
    const unsigned char* p =
        &pixels_[4 * (static_cast<size_t>(y) * width_ + x)];
    return {p[0], p[1], p[2]};
  }

  // The share of the pixels of `box` (clipped to the image) for which
  // `pred` holds; 0 for an empty box.
  double Share(const Box& box, const std::function<bool(Rgb)>& pred) const {
    int64_t hits = 0, all = 0;
    for (int y = std::max(box.y, 0); y < std::min(box.y + box.h, height_);
         ++y) {
      for (int x = std::max(box.x, 0); x < std::min(box.x + box.w, width_);
           ++x) {
        ++all;
        hits += pred(At(x, y)) ? 1 : 0;
      }
    }
    return all > 0 ? static_cast<double>(hits) / all : 0.0;
  }

  // The darkest luminance (0..255) in `box`.
  int Darkest(const Box& box) const {
    int darkest = 255;
    for (int y = std::max(box.y, 0); y < std::min(box.y + box.h, height_);
         ++y) {
      for (int x = std::max(box.x, 0); x < std::min(box.x + box.w, width_);
           ++x) {
        const Rgb c = At(x, y);
        darkest = std::min(darkest, (299 * c.r + 587 * c.g + 114 * c.b) / 1000);
      }
    }
    return darkest;
  }

 private:
  int width_ = 0;
  int height_ = 0;
  std::vector<unsigned char> pixels_;
};

std::function<bool(Rgb)> Near(Rgb want, int tolerance = 3) {
  return [want, tolerance](Rgb c) {
    return std::abs(c.r - want.r) <= tolerance &&
           std::abs(c.g - want.g) <= tolerance &&
           std::abs(c.b - want.b) <= tolerance;
  };
}

// Colours the page draws with (serve/dashboard/app.js).
constexpr Rgb kHostSyncRed = {0xd9, 0x2d, 0x20};  // CAUSE_COLORS.host_sync.
constexpr Rgb kDevice0Blue = {0x2f, 0x6f, 0xdf};  // DEVICE_COLORS[0].
constexpr Rgb kDevice1Orange = {0xf7, 0x90, 0x09};
// HEAT_STOPS interpolated: 10 % busy lies 0.4 of the way from #440154 to
// #3b528b, 95 % 0.8 of the way from #5ec962 to #fde725.
constexpr Rgb kHeat10 = {64, 33, 106};
constexpr Rgb kHeat95 = {221, 225, 49};
constexpr Rgb kStragglerMark = {0xff, 0x2d, 0x2d};  // STRAGGLER_MARK.

// app.js heatColor: `u` (0..1) interpolated over HEAT_STOPS (viridis).
Rgb HeatColor(double u) {
  constexpr Rgb kStops[] = {{0x44, 0x01, 0x54},
                            {0x3b, 0x52, 0x8b},
                            {0x21, 0x91, 0x8c},
                            {0x5e, 0xc9, 0x62},
                            {0xfd, 0xe7, 0x25}};
  const double x = std::clamp(u, 0.0, 1.0) * 4;
  const int i = std::min(static_cast<int>(x), 3);
  const double f = x - i;
  auto mix = [f](int a, int b) {
    return static_cast<int>(std::floor(a + f * (b - a) + 0.5));
  };
  const Rgb a = kStops[i], b = kStops[i + 1];
  return {mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b)};
}

// One cell of the page's #rank-table: its data-u ("" for none) and whether
// it carries data-straggler (the root) or data-held-up (a rank it held up).
struct RankCell {
  std::string u;
  bool straggler = false;
  bool held_up = false;
};

// The cells of the #rank-table row of `rank`, window by window.
std::vector<RankCell> RankRow(const std::string& dom, int rank) {
  std::vector<RankCell> cells;
  const size_t at = dom.find("<tr data-rank=\"" + std::to_string(rank) + "\"");
  if (at == std::string::npos) return cells;
  const std::string row = dom.substr(at, dom.find("</tr>", at) - at);
  const std::regex td(
      R"re(<td data-u="([^"]*)"( data-straggler="1")?( data-held-up="1")?>)re");
  for (std::sregex_iterator it(row.begin(), row.end(), td), end; it != end;
       ++it) {
    cells.push_back({(*it)[1].str(), (*it)[2].matched, (*it)[3].matched});
  }
  return cells;
}

// app.js pct: a ratio as "12.3%".
std::string Pct(double ratio) { return absl::StrFormat("%.1f%%", 100 * ratio); }

// app.js duration: µs as "12.3 us", "4.56 ms" or "7.89 s".
std::string Duration(double us) {
  const double a = std::abs(us);
  if (a < 1e3) return absl::StrFormat("%.1f us", us);
  if (a < 1e6) return absl::StrFormat("%.2f ms", us / 1e3);
  return absl::StrFormat("%.2f s", us / 1e6);
}

// A row of the page's #window-table: the data-* figures as the API gave
// them ("" where unknown), whether the row is marked partial, and the text
// of its observed and coverage cells (with or without the partial badge).
struct WindowRow {
  std::string coverage;
  std::string observed_us;
  bool partial_row = false;
  std::string observed_text;
  std::string coverage_text;
  bool badge = false;
};

// The rows of #window-table, as the page lists them (newest first).
std::vector<WindowRow> WindowRows(const std::string& dom) {
  std::vector<WindowRow> rows;
  const size_t table = dom.find("<table id=\"window-table\"");
  if (table == std::string::npos) return rows;
  const size_t body = dom.find("<tbody>", table);
  const size_t body_end = dom.find("</tbody>", body);
  if (body == std::string::npos || body_end == std::string::npos) return rows;
  const std::regex open(
      R"re(^<tr data-coverage="([^"]*)" data-observed-us="([^"]*)"( class="partial")?>)re");
  const std::regex observed(
      R"re(<td class="num obs observed"[^>]*>([^<]*)</td>)re");
  const std::regex coverage(
      R"re(<td class="num obs coverage"[^>]*>([^<]*)(<span class="badge partial">partial</span>)?</td>)re");
  for (size_t at = dom.find("<tr", body); at < body_end;
       at = dom.find("<tr", at + 1)) {
    const std::string row = dom.substr(at, dom.find("</tr>", at) - at);
    WindowRow r;
    std::smatch m;
    EXPECT_TRUE(std::regex_search(row, m, open)) << row;
    if (m.empty()) continue;
    r.coverage = m.str(1);
    r.observed_us = m.str(2);
    r.partial_row = m[3].matched;
    EXPECT_TRUE(std::regex_search(row, m, observed)) << row;
    if (!m.empty()) r.observed_text = m.str(1);
    EXPECT_TRUE(std::regex_search(row, m, coverage)) << row;
    if (!m.empty()) {
      r.coverage_text = m.str(1);
      r.badge = m[2].matched;
    }
    rows.push_back(r);
  }
  return rows;
}

// A summary card of the job page (data-card="key"): its opening tag (with
// its data-* figures) and the text of its value; both "" if none.
struct Card {
  std::string tag;
  std::string value;
};

Card FindCard(const std::string& dom, const std::string& key) {
  Card c;
  const size_t at = dom.find("data-card=\"" + key + "\"");
  if (at == std::string::npos) return c;
  const size_t begin = dom.rfind("<div", at);
  c.tag = dom.substr(begin, dom.find('>', at) + 1 - begin);
  const std::string value_tag = "<div class=\"value\">";
  const size_t v = dom.find(value_tag, at);
  if (v == std::string::npos) return c;
  const size_t from = v + value_tag.size();
  c.value = dom.substr(from, dom.find('<', from) - from);
  return c;
}

// The number in attribute data-`name` of `tag`; NaN if none.
double TagNumber(const std::string& tag, const std::string& name) {
  std::smatch m;
  double v = std::nan("");
  if (std::regex_search(tag, m,
                        std::regex(" data-" + name + R"re(="([^"]*)")re"))) {
    EXPECT_TRUE(absl::SimpleAtod(m.str(1), &v)) << tag;
  }
  return v;
}

#if BUBBLEWATCH_DASHBOARD_FROM_BROKERS
constexpr char kArtifactPrefix[] = "brokers_";
#else
constexpr char kArtifactPrefix[] = "";
#endif

class DashboardBrowserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(std::system("command -v chromium >/dev/null"), 0)
        << "chromium is missing: ops/build installs it (Debian package "
           "chromium)";
    ASSERT_TRUE(
        dashboard_test::WriteDashboardFleetStore(dir_.Sub("store")).ok());
#if BUBBLEWATCH_DASHBOARD_FROM_BROKERS
    server_ = testing::ServeThroughBrokers(dir_.Sub("store"), dir_.Sub("serve"),
                                           "it-dashboard");
#else
    server_ = ServeProcess::Start(dir_.Sub("store"));
#endif
    ASSERT_NE(server_, nullptr);
  }

  std::string Dom(const std::string& page, const std::string& size) {
    int rc = -1;
    const std::string dom =
        Chromium(dir_.path(), "--window-size=" + size + " --dump-dom",
                 server_->url() + page, &rc);
    EXPECT_EQ(rc, 0) << ReadFile(dir_.Sub("stderr"));
    EXPECT_EQ(StatusData(dom, "state"), "rendered") << dom;
    return dom;
  }

  // A screenshot of `page` at `size` ("W,H"), kept as artifact `name`.
  Image Screenshot(const std::string& page, const std::string& size,
                   const std::string& name) {
    const std::string png =
        std::string(BUBBLEWATCH_ARTIFACT_DIR) + "/" + kArtifactPrefix + name;
    std::filesystem::remove(png);
    int rc = -1;
    Chromium(dir_.path(),
             "--window-size=" + size + " --screenshot='" + png + "'",
             server_->url() + page, &rc);
    EXPECT_EQ(rc, 0) << ReadFile(dir_.Sub("stderr"));
    return Image::Load(png);
  }

  testing::TempDir dir_;
  std::unique_ptr<ServeProcess> server_;
};

TEST_F(DashboardBrowserTest, JobPageDrawsTheChartOfEveryWindow) {
  const std::string dom = Dom("/?job=alpha&last=1h", "1400,1600");
  EXPECT_EQ(StatusData(dom, "windows"), "360");
  // compute + host_sync + launch_overhead stacked.
  EXPECT_EQ(StatusData(dom, "datasets"), "3");
  // Alpha's bubbles reach 90 %: the axis stays at 0..100 %.
  EXPECT_EQ(StatusData(dom, "y-min"), "0");
  EXPECT_EQ(StatusData(dom, "devices"), "1");
  EXPECT_EQ(StatusData(dom, "device-view"), "lines");
  EXPECT_THAT(dom, HasSubstr("utilization, last 1m"));
  EXPECT_THAT(dom, HasSubstr("cudaStreamSynchronize"));  // Top bubbles.
  EXPECT_THAT(dom, HasSubstr("gemm_40"));
  // Alpha's windows carry no observed time: no coverage is shown, none is
  // marked partial.
  EXPECT_EQ(StatusData(dom, "observed-windows"), "0");
  EXPECT_EQ(StatusData(dom, "partial-windows"), "0");
  EXPECT_EQ(FindCard(dom, "observed").tag, "");
  EXPECT_THAT(dom,
              HasSubstr(R"(<table id="window-table" class="no-observed")"));
  const std::vector<WindowRow> rows = WindowRows(dom);
  ASSERT_EQ(rows.size(), 360u);
  for (const WindowRow& r : rows) {
    EXPECT_EQ(r.coverage, "");
    EXPECT_FALSE(r.partial_row || r.badge);
  }
}

TEST_F(DashboardBrowserTest, JobPageShowsObservedTimeAndMarksPartialWindows) {
  // "observed": one observation starting 2.5 s into window 390 and ending
  // 6 s into window 399 (dashboard_test_fleet.h).
  const std::string page = "/?job=observed&last=1h";
  const std::string dom = Dom(page, "1400,1600");
  std::vector<WindowSummary> stored;
  for (int64_t i = dashboard_test::kObservedFirst;
       i <= dashboard_test::kObservedLast; ++i) {
    stored.push_back(dashboard_test::ObservedWindow(i));
  }
  const int n = static_cast<int>(stored.size());
  int64_t observed_ns = 0, length_ns = 0;
  int partial = 0;
  for (const WindowSummary& w : stored) {
    ASSERT_TRUE(w.observed_ns.has_value());
    const int64_t length = w.window.end_ns - w.window.start_ns;
    observed_ns += *w.observed_ns;
    length_ns += length;
    if (*w.observed_ns < length) ++partial;
  }
  ASSERT_GT(partial, 0);
  ASSERT_LT(partial, n);  // Whole windows too.
  EXPECT_EQ(StatusNumber(dom, "windows"), n);
  EXPECT_EQ(StatusNumber(dom, "observed-windows"), n);
  EXPECT_EQ(StatusNumber(dom, "partial-windows"), partial);
  EXPECT_EQ(StatusNumber(dom, "view-width"), 1400);
  EXPECT_LE(StatusNumber(dom, "scroll-width"), 1400);

  // The period's figures in the summary cards.
  const Card observed = FindCard(dom, "observed");
  EXPECT_NEAR(TagNumber(observed.tag, "us"), observed_ns / 1e3, 1e-6)
      << observed.tag;
  const double coverage = static_cast<double>(observed_ns) / length_ns;
  EXPECT_NEAR(TagNumber(observed.tag, "coverage"), coverage, 1e-12)
      << observed.tag;
  EXPECT_EQ(observed.value,
            Duration(observed_ns / 1e3) + " (" + Pct(coverage) + ")");
  const Card unobserved = FindCard(dom, "unobserved");
  EXPECT_NEAR(TagNumber(unobserved.tag, "us"), (length_ns - observed_ns) / 1e3,
              1e-6)
      << unobserved.tag;
  EXPECT_EQ(unobserved.value, Duration((length_ns - observed_ns) / 1e3));
  const Card partial_card = FindCard(dom, "partial");
  EXPECT_EQ(TagNumber(partial_card.tag, "count"), partial) << partial_card.tag;
  EXPECT_EQ(partial_card.value, absl::StrCat(partial, " of ", n));

  // Each window's row (newest first) against the stored window: observed
  // time and coverage as data and as shown, and the partial mark on exactly
  // the partly observed windows.
  const std::vector<WindowRow> rows = WindowRows(dom);
  ASSERT_EQ(rows.size(), stored.size());
  int marked = 0;
  for (int k = 0; k < n; ++k) {
    const WindowSummary& w = stored[n - 1 - k];
    const WindowRow& r = rows[k];
    const int64_t length = w.window.end_ns - w.window.start_ns;
    const double us = *w.observed_ns / 1e3;
    const double cov = static_cast<double>(*w.observed_ns) / length;
    const bool is_partial = *w.observed_ns < length;
    double shown = -1;
    EXPECT_TRUE(absl::SimpleAtod(r.observed_us, &shown)) << r.observed_us;
    EXPECT_NEAR(shown, us, 1e-6) << "row " << k;
    EXPECT_TRUE(absl::SimpleAtod(r.coverage, &shown)) << r.coverage;
    EXPECT_NEAR(shown, cov, 1e-12) << "row " << k;
    EXPECT_EQ(r.observed_text, Duration(us)) << "row " << k;
    EXPECT_EQ(r.coverage_text, Pct(cov)) << "row " << k;
    EXPECT_EQ(r.partial_row, is_partial) << "row " << k;
    EXPECT_EQ(r.badge, is_partial) << "row " << k;
    marked += r.partial_row ? 1 : 0;
  }
  EXPECT_EQ(marked, partial);

  // The chart: white stripes over the columns of the partly observed
  // windows, none over a whole window's.
  const Image img = Screenshot(page, "1400,1600", "dashboard_observed.png");
  const Box plot = ParseBox(StatusData(dom, "rect-util-plot"));
  ASSERT_GT(plot.w, 1000);
  ASSERT_GT(plot.h, 200);
  auto x = [&](int i) {
    return plot.x + static_cast<int>(std::lround(1.0 * i * plot.w / n));
  };
  for (int i = 0; i < n; ++i) {
    const Box column{x(i) + 4, plot.y + 4, x(i + 1) - x(i) - 8, plot.h - 8};
    const double white = img.Share(column, Near({255, 255, 255}));
    if (*stored[i].observed_ns <
        stored[i].window.end_ns - stored[i].window.start_ns) {
      EXPECT_GT(white, 0.1) << "window " << i;
    } else {
      EXPECT_LT(white, 0.01) << "window " << i;
    }
  }
}

TEST_F(DashboardBrowserTest, JobPageZoomsToASmallBubbleAndFitsThePage) {
  // "steady": 99.6 % and 99.7 % busy, names far wider than the page.
  const std::string page = "/?job=steady&last=1h";
  const std::string dom = Dom(page, "1400,1600");
  EXPECT_EQ(StatusData(dom, "windows"), "30");
  EXPECT_EQ(StatusData(dom, "devices"), "2");
  EXPECT_EQ(StatusData(dom, "device-view"), "lines");
  EXPECT_THAT(dom, HasSubstr("least busy: GPU 0 at 99.6%"));
  // Auto zoom: the axis starts just below 99.6 %.
  EXPECT_EQ(StatusNumber(dom, "y-min"), 99.5);
  // No sideways scroll at 1400 px, though the bubbles table holds names of
  // 220 characters.
  EXPECT_EQ(StatusNumber(dom, "view-width"), 1400);
  EXPECT_LE(StatusNumber(dom, "scroll-width"), 1400);
  EXPECT_THAT(dom, HasSubstr("aten::item / cudaStreamSynchronize"));

  const Image img = Screenshot(page, "1400,1600", "dashboard_job.png");
  ASSERT_EQ(img.width(), 1400);
  // The host_sync part (0.39 % of the span, 78 % of the zoomed axis) fills
  // much of the chart; at 0..100 % it would be a line of 1-2 px.
  const Box util = ParseBox(StatusData(dom, "rect-util"));
  ASSERT_GT(util.w * util.h, 100'000);
  EXPECT_GT(img.Share(util, Near(kHostSyncRed)), 0.3);
  // Both devices' lines, apart on the zoomed axis.
  const Box devices = ParseBox(StatusData(dom, "rect-devices"));
  EXPECT_GT(img.Share(devices, Near(kDevice0Blue, 30)), 0.002);
  EXPECT_GT(img.Share(devices, Near(kDevice1Orange, 30)), 0.002);
}

TEST_F(DashboardBrowserTest, JobPageFullAxisKeepsTheBubbleThin) {
  // The same job with the axis forced to 0..100 %: the control works, and
  // the pixel check above is one that a missing zoom fails.
  const std::string page = "/?job=steady&last=1h&y=full";
  const std::string dom = Dom(page, "1400,1600");
  EXPECT_EQ(StatusData(dom, "y-min"), "0");
  const Image img = Screenshot(page, "1400,1600", "dashboard_job_full.png");
  const Box util = ParseBox(StatusData(dom, "rect-util"));
  EXPECT_LT(img.Share(util, Near(kHostSyncRed)), 0.02);
}

TEST_F(DashboardBrowserTest, JobPageDrawsAHeatMapForManyDevices) {
  const std::string page = "/?job=wide&last=1h";
  const std::string dom = Dom(page, "1400,1600");
  EXPECT_EQ(StatusData(dom, "devices"), "16");
  EXPECT_EQ(StatusData(dom, "device-view"), "heatmap");
  EXPECT_EQ(StatusNumber(dom, "view-width"), 1400);
  EXPECT_LE(StatusNumber(dom, "scroll-width"), 1400);

  const Image img = Screenshot(page, "1400,1600", "dashboard_devices.png");
  const Box heat = ParseBox(StatusData(dom, "rect-heat"));
  ASSERT_GT(heat.w, 1000);
  ASSERT_EQ(heat.h % dashboard_test::kWideDevices, 0) << heat.h;
  const int row = heat.h / dashboard_test::kWideDevices;
  // Each device's row, inset by a pixel from the cell edges.
  for (int d = 0; d < dashboard_test::kWideDevices; ++d) {
    const Box band{heat.x + 1, heat.y + d * row + 1, heat.w - 2, row - 2};
    const Rgb want = d == dashboard_test::kWideSlowDevice ? kHeat10 : kHeat95;
    EXPECT_GT(img.Share(band, Near(want)), 0.95) << "device " << d;
  }
}

TEST_F(DashboardBrowserTest, JobPageDrawsRanksAndMarksEachWindowsStraggler) {
  const std::string page = "/?job=ranks&last=1h";
  const std::string dom = Dom(page, "1400,1600");
  EXPECT_EQ(StatusData(dom, "windows"), "30");
  EXPECT_EQ(StatusData(dom, "ranks"), std::to_string(dashboard_test::kRanks));
  EXPECT_EQ(StatusData(dom, "straggler-windows"), "20");
  EXPECT_EQ(StatusNumber(dom, "view-width"), 1400);
  EXPECT_LE(StatusNumber(dom, "scroll-width"), 1400);

  // Every cell against the stored window: the rank's busy-useful
  // utilization, and the mark on exactly the window's straggler.
  std::vector<WindowSummary> stored;
  for (int64_t i = 370; i <= 399; ++i) {
    stored.push_back(dashboard_test::RankWindows(i));
  }
  for (int r = 0; r < dashboard_test::kRanks; ++r) {
    // The rank's cell names its process (host and pid) as title.
    const RankWindow& last = stored.back().collectives->ranks[r];
    EXPECT_NE(dom.find(absl::StrCat("<tr data-rank=\"", r, "\"><td title=\"on ",
                                    last.host.str(), " pid ", last.pid, "\">",
                                    r, "</td>")),
              std::string::npos)
        << "rank " << r;
    const std::vector<RankCell> cells = RankRow(dom, r);
    ASSERT_EQ(cells.size(), stored.size()) << "rank " << r;
    for (size_t i = 0; i < stored.size(); ++i) {
      const WindowCollectives& c = *stored[i].collectives;
      double u = -1;
      EXPECT_TRUE(absl::SimpleAtod(cells[i].u, &u)) << cells[i].u;
      EXPECT_NEAR(u, c.ranks[r].busy_useful_utilization(), 1e-12)
          << "rank " << r << " window " << i;
      const bool straggler = !c.stragglers.empty() && c.stragglers[0].rank == r;
      EXPECT_EQ(cells[i].straggler, straggler)
          << "rank " << r << " window " << i;
      EXPECT_EQ(cells[i].held_up, dashboard_test::HeldUpRank(370 + i) == r)
          << "rank " << r << " window " << i;
    }
  }

  // The pixels: each cell's left quarter has its utilization's colour; its
  // middle has the straggler mark exactly where the table has it.
  const Image img = Screenshot(page, "1400,1600", "dashboard_ranks.png");
  const Box heat = ParseBox(StatusData(dom, "rect-rank-heat"));
  ASSERT_GT(heat.w, 1000);
  ASSERT_EQ(heat.h % dashboard_test::kRanks, 0) << heat.h;
  const int row = heat.h / dashboard_test::kRanks;
  ASSERT_GE(row, 12);
  const int n = static_cast<int>(stored.size());
  auto x = [&](int i) {
    return heat.x + static_cast<int>(std::lround(1.0 * i * heat.w / n));
  };
  int marks = 0;
  int frames = 0;
  for (int r = 0; r < dashboard_test::kRanks; ++r) {
    for (int i = 0; i < n; ++i) {
      const WindowCollectives& c = *stored[i].collectives;
      const int w = x(i + 1) - x(i);
      const int y = heat.y + r * row;
      const Box left{x(i) + 2, y + 2, w / 4 - 4, row - 4};
      EXPECT_GT(
          img.Share(left,
                    Near(HeatColor(c.ranks[r].busy_useful_utilization()))),
          0.9)
          << "rank " << r << " window " << i;
      const Box middle{x(i) + w / 2 - 3, y + row / 2 - 2, 6, 4};
      const bool straggler = !c.stragglers.empty() && c.stragglers[0].rank == r;
      const double mark = img.Share(middle, Near(kStragglerMark));
      // A rank held up has a hollow frame: its left side (2 px wide, as
      // app.js draws it) is the mark, its middle is not.
      const int mw = std::max(6, w / 2);
      const int mh = std::max(6, row / 2);
      const Box frame{x(i) + (w - mw) / 2, y + (row - mh) / 2 + 2, 2, mh - 4};
      const double framed = img.Share(frame, Near(kStragglerMark));
      if (straggler) {
        ++marks;
        EXPECT_GT(mark, 0.9) << "rank " << r << " window " << i;
      } else {
        EXPECT_EQ(mark, 0.0) << "rank " << r << " window " << i;
        if (dashboard_test::HeldUpRank(370 + i) == r) {
          ++frames;
          EXPECT_GT(framed, 0.9) << "rank " << r << " window " << i;
        } else {
          EXPECT_EQ(framed, 0.0) << "rank " << r << " window " << i;
        }
      }
    }
  }
  EXPECT_EQ(marks, 20);
  EXPECT_EQ(frames, 20);
}

// One rect of the page's window timeline (#timeline-svg): its geometry and
// fill as drawn, and the stored state and length it says it draws.
struct TimelineRect {
  double x = 0, y = 0, width = 0, height = 0;
  std::string fill;
  int rank = -1;
  std::string state;
  int state_id = -1;
  int64_t start_us = 0;
  int64_t us = 0;
};

// The segment rects of #timeline-svg, in document order.
std::vector<TimelineRect> TimelineRects(const std::string& dom) {
  std::vector<TimelineRect> rects;
  const size_t svg = dom.find("<svg id=\"timeline-svg\"");
  if (svg == std::string::npos) return rects;
  const std::string body = dom.substr(svg, dom.find("</svg>", svg) - svg);
  auto attr = [](const std::string& tag, const std::string& name) {
    std::smatch m;
    const std::regex re(" " + name + R"re(="([^"]*)")re");
    return std::regex_search(tag, m, re) ? m.str(1) : std::string();
  };
  const std::regex rect(R"re(<rect [^>]*data-state-id="[^"]*"[^>]*>)re");
  for (std::sregex_iterator it(body.begin(), body.end(), rect), end; it != end;
       ++it) {
    const std::string tag = it->str();
    TimelineRect r;
    EXPECT_TRUE(absl::SimpleAtod(attr(tag, "x"), &r.x) &&
                absl::SimpleAtod(attr(tag, "y"), &r.y) &&
                absl::SimpleAtod(attr(tag, "width"), &r.width) &&
                absl::SimpleAtod(attr(tag, "height"), &r.height) &&
                absl::SimpleAtoi(attr(tag, "data-rank"), &r.rank) &&
                absl::SimpleAtoi(attr(tag, "data-state-id"), &r.state_id) &&
                absl::SimpleAtoi(attr(tag, "data-start-us"), &r.start_us) &&
                absl::SimpleAtoi(attr(tag, "data-us"), &r.us))
        << tag;
    r.fill = attr(tag, "fill");
    r.state = attr(tag, "data-state");
    rects.push_back(r);
  }
  return rects;
}

// The opening tag of the timeline row of `rank`; "" if none.
std::string TimelineRow(const std::string& dom, int rank) {
  std::smatch m;
  const std::regex re("<g class=\"tl-row\" data-rank=\"" +
                      std::to_string(rank) + R"re("[^>]*>)re");
  return std::regex_search(dom, m, re) ? m.str(0) : "";
}

// The colours app.js draws a timeline's states with (TIMELINE_COLORS).
std::string TimelineColor(const std::string& state) {
  if (state == "compute") return "#12b76a";
  if (state == "wait") return "#fdb022";
  if (state == "transfer") return "#84caff";
  if (state == "host_sync") return "#d92d20";
  if (state == "data_loading") return "#ee46bc";
  return "?";
}

Rgb HexColor(const std::string& hex) {
  auto part = [&](int at) { return std::stoi(hex.substr(at, 2), nullptr, 16); };
  return {part(1), part(3), part(5)};
}

TEST_F(DashboardBrowserTest, ClickingAStragglerCellOpensTheWindowsTimeline) {
  // Window 375 of "ranks": rank kStragglerA is its root straggler and held
  // up HeldUpRank(375).
  constexpr int64_t kIndex = 375;
  const WindowSummary stored = dashboard_test::RankWindows(kIndex);
  const WindowCollectives& c = *stored.collectives;
  ASSERT_EQ(c.timelines.size(), c.ranks.size());
  const int root = dashboard_test::kStragglerA;
  ASSERT_EQ(c.stragglers[0].rank, root);
  const int held_up = dashboard_test::HeldUpRank(kIndex);
  const std::string start = std::to_string(stored.window.start_ns);

  // Without a click no timeline is drawn.
  const std::string plain = Dom("/?job=ranks&last=1h", "1400,1600");
  EXPECT_TRUE(TimelineRects(plain).empty());
  EXPECT_EQ(StatusData(plain, "timeline-start-ns"), "");

  // A click on the straggler's cell of window 375 of the heat map.
  const std::string page =
      "/?job=ranks&last=1h#click=" + std::to_string(root) + "," + start;
  const std::string dom = Dom(page, "1400,1600");
  EXPECT_EQ(StatusData(dom, "timeline-opened-by"), "click");
  EXPECT_EQ(StatusData(dom, "timeline-start-ns"), start);
  EXPECT_EQ(StatusData(dom, "timeline-root"), std::to_string(root));
  EXPECT_EQ(StatusNumber(dom, "timeline-ranks"), dashboard_test::kRanks);
  EXPECT_LE(StatusNumber(dom, "scroll-width"), 1400);

  // The root's row and the row it held up are marked, no other.
  for (int r = 0; r < dashboard_test::kRanks; ++r) {
    const std::string row = TimelineRow(dom, r);
    ASSERT_NE(row, "") << "rank " << r;
    EXPECT_EQ(row.find("data-root=\"1\"") != std::string::npos, r == root)
        << row;
    EXPECT_EQ(row.find("data-held-up=\"1\"") != std::string::npos, r == held_up)
        << row;
  }

  // Every drawn segment against the stored window, in order: state, start
  // and length, its colour, and where and how wide it is on the axis.
  const std::vector<TimelineRect> rects = TimelineRects(dom);
  const Box plot = ParseBox(StatusData(dom, "rect-timeline"));
  const Box svg = ParseBox(StatusData(dom, "rect-timeline-svg"));
  ASSERT_GT(plot.w, 1000);
  const int64_t length_us =
      (stored.window.end_ns - stored.window.start_ns) / 1000;
  int64_t from = 0, to = length_us;
  for (const RankTimeline& t : c.timelines) {
    int64_t end = t.start_us;
    for (const TimelineSegment& seg : t.segments) end += seg.us;
    from = std::min<int64_t>(from, t.start_us);
    to = std::max(to, end);
  }
  // The axis as the page drew it: it spans the window and every segment.
  const std::vector<std::string> axis =
      absl::StrSplit(StatusData(dom, "timeline-axis"), ',');
  ASSERT_EQ(axis.size(), 4u) << StatusData(dom, "timeline-axis");
  double plot_left = 0, plot_w = 0, axis_from = 0, axis_to = 0;
  ASSERT_TRUE(absl::SimpleAtod(axis[0], &plot_left) &&
              absl::SimpleAtod(axis[1], &plot_w) &&
              absl::SimpleAtod(axis[2], &axis_from) &&
              absl::SimpleAtod(axis[3], &axis_to));
  EXPECT_EQ(axis_from, from);
  EXPECT_EQ(axis_to, to);
  EXPECT_EQ(plot_w, plot.w);
  auto x_of = [&](int64_t us) {
    return plot_left + static_cast<double>(us - from) * plot_w / (to - from);
  };
  size_t next = 0;
  int checked = 0;
  const Image img = Screenshot(page, "1400,1600", "dashboard_timeline.png");
  for (size_t i = 0; i < c.ranks.size(); ++i) {
    const RankTimeline& t = c.timelines[i];
    int64_t at = t.start_us;
    for (size_t k = 0; k < t.segments.size(); ++k, ++next) {
      SCOPED_TRACE(absl::StrCat("rank ", c.ranks[i].rank, " segment ", k));
      ASSERT_LT(next, rects.size());
      const TimelineRect& r = rects[next];
      const TimelineSegment& seg = t.segments[k];
      EXPECT_EQ(r.rank, c.ranks[i].rank);
      EXPECT_EQ(r.state_id, seg.state);
      EXPECT_EQ(r.state, TimelineStateName(seg.state));
      EXPECT_EQ(r.start_us, at);
      EXPECT_EQ(r.us, seg.us);
      EXPECT_EQ(r.fill, TimelineColor(r.state));
      EXPECT_NEAR(r.x, x_of(at), 0.01);
      EXPECT_NEAR(r.x + r.width, x_of(at + seg.us), 0.01);
      // On screen: the middle of the segment has its colour.
      const int px = svg.x + static_cast<int>(r.x + r.width / 2);
      const int py = svg.y + static_cast<int>(r.y + r.height / 2);
      const Box middle{px - 2, py - 2, 4, 4};
      EXPECT_GT(img.Share(middle, Near(HexColor(r.fill))), 0.9)
          << "at " << px << "," << py;
      at += seg.us;
      ++checked;
    }
  }
  EXPECT_EQ(next, rects.size());
  EXPECT_EQ(checked, 15 * dashboard_test::kRanks);
  EXPECT_EQ(StatusNumber(dom, "timeline-segments"), checked);

  // The API gives the stored segments as they are.
  int rc = -1;
  const std::string api = Chromium(
      dir_.path(), "--dump-dom",
      server_->url() + "/api/v1/jobs/ranks/timeline?start_ns=" + start, &rc);
  EXPECT_EQ(rc, 0);
  for (const RankTimeline& t : c.timelines) {
    std::string want = absl::StrCat(
        "{\"start_us\":", t.start_us, ",\"merged_us\":", t.merged_us,
        ",\"bin_us\":", t.bin_us, ",\"segments\":[");
    for (size_t k = 0; k < t.segments.size(); ++k) {
      absl::StrAppend(&want, k > 0 ? "," : "", "[", t.segments[k].state, ",",
                      t.segments[k].us, "]");
    }
    EXPECT_THAT(api, HasSubstr(want + "]}"));
  }
}

TEST_F(DashboardBrowserTest, FleetPageRanksTheLastHourByDefault) {
  // beta's windows end 3,700 s before the fleet's newest one: outside the
  // default period, inside two hours.
  const std::string hour = Dom("/", "1400,900");
  EXPECT_EQ(StatusData(hour, "rows"), "8");
  EXPECT_EQ(FleetRow(hour, "beta"), "");
  EXPECT_THAT(hour, HasSubstr("over the last 1h: fleet utilization"));
  EXPECT_THAT(hour, HasSubstr("GPU-hours lost to bubbles"));
}

TEST_F(DashboardBrowserTest, FleetPageShowsLastSeenStalenessAndAlerts) {
  const std::string dom = Dom("/?last=2h", "1400,900");
  EXPECT_EQ(StatusData(dom, "rows"), "9");
  EXPECT_EQ(StatusData(dom, "stale"), "1");
  EXPECT_EQ(StatusData(dom, "firing"), "1");
  EXPECT_THAT(dom, HasSubstr("?job=odd%2Fjob%20%22x%22"));
  EXPECT_EQ(StatusNumber(dom, "view-width"), 1400);
  EXPECT_LE(StatusNumber(dom, "scroll-width"), 1400);

  const std::string stale = FleetRow(dom, "stale");
  EXPECT_THAT(stale, HasSubstr(R"(class="stale")"));
  EXPECT_THAT(stale, HasSubstr("2 h ago"));
  EXPECT_THAT(stale, HasSubstr(R"(data-alert="none")"));
  const std::string beta = FleetRow(dom, "beta");
  EXPECT_THAT(beta, Not(HasSubstr(R"(class="stale")")));
  EXPECT_THAT(beta, HasSubstr(" s ago"));
  EXPECT_THAT(beta, HasSubstr(R"(data-alert="firing")"));
  EXPECT_THAT(beta, HasSubstr("low-util"));
  EXPECT_THAT(FleetRow(dom, "gamma"), HasSubstr(R"(data-alert="ok")"));
  EXPECT_THAT(FleetRow(dom, "alpha"), HasSubstr(R"(data-alert="none")"));

  const Image img = Screenshot("/?last=2h", "1400,900", "dashboard_fleet.png");
  ASSERT_EQ(img.width(), 1400);
  // A dimmed row has no dark text; a live one has.
  EXPECT_GT(img.Darkest(ParseBox(StatusData(dom, "rect-stale"))), 110);
  EXPECT_LT(img.Darkest(ParseBox(StatusData(dom, "rect-fresh"))), 90);
  // The firing badge is red.
  EXPECT_GT(
      img.Share(ParseBox(StatusData(dom, "rect-firing")), Near(kHostSyncRed)),
      0.4);
}

}  // namespace
}  // namespace bubblewatch
