// `bubblewatch query job|fleet|jobs`: the store's answers for people (text
// with a chart) or programs (--json), read from a store directory (a
// read-only RocksDB secondary instance: works beside a running processor and
// on a copied store) or from a `bubblewatch serve` / `process --http` server.
// Both sources give the same bytes with --json.

#include <unistd.h>

#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "serve/http_server.h"
#include "serve/query_client.h"
#include "serve/query_params.h"
#include "serve/query_report.h"
#include "storage/window_queries.h"
#include "storage/window_store.h"

namespace bubblewatch {
namespace {

struct QueryArgs {
  std::string store;
  std::string server;
  std::string token_file;
  std::string last, from, to;
  std::string top, by, bubbles;
  int windows = 30;
  bool json = false;
  bool pretty = false;
  bool no_color = false;
};

// Where answers come from: exactly one of the two is set.
struct Source {
  std::unique_ptr<WindowStoreReader> store;
  std::unique_ptr<QueryClient> client;
};

int Fail(const absl::Status& s) {
  std::cerr << "bubblewatch query: " << s.message() << "\n";
  // A malformed parameter the server rejected is a usage error here too.
  return absl::IsInvalidArgument(s) ? kExitUsage : kExitFailure;
}

int Usage(absl::string_view message) {
  std::cerr << "bubblewatch query: " << message
            << "\nTry 'bubblewatch query --help'.\n";
  return kExitUsage;
}

// Prints `json` (already rendered, or a server's reply) or the text that
// `render` makes of the parsed value.
template <typename T, typename Render>
int Print(const QueryArgs& a, const absl::StatusOr<std::string>& json,
          absl::StatusOr<T> (*parse)(absl::string_view), Render render) {
  if (!json.ok()) return Fail(json.status());
  if (a.json) {
    std::cout << *json << "\n";
    return kExitOk;
  }
  absl::StatusOr<T> value = parse(*json);
  if (!value.ok()) return Fail(value.status());
  std::cout << render(*value);
  return kExitOk;
}

// The period parameters as given (the server applies the same defaults).
void AddPeriodParams(const QueryArgs& a,
                     std::multimap<std::string, std::string>& params) {
  if (!a.from.empty()) {
    params.emplace("from", a.from);
    params.emplace("to", a.to);
  } else if (!a.last.empty()) {
    params.emplace("last", a.last);
  }
}

int Job(const QueryArgs& a, Source& src, const std::string& job,
        const JobPeriod& period, int bubbles) {
  const bool color = !a.no_color && isatty(STDOUT_FILENO);
  JobTextOptions text{.color = color, .table_windows = a.windows};
  auto render = [&](const JobReport& r) {
    return RenderJobReportText(r, text);
  };
  if (src.store != nullptr) {
    absl::StatusOr<JobReport> r = QueryJob(*src.store, job, period, bubbles);
    if (!r.ok()) return Fail(r.status());
    std::cout << (a.json ? RenderJobReportJson(*r, a.pretty) + "\n"
                         : render(*r));
    return kExitOk;
  }
  std::multimap<std::string, std::string> params = {
      {"bubbles", std::to_string(bubbles)}};
  AddPeriodParams(a, params);
  if (a.pretty) params.emplace("pretty", "1");
  return Print<JobReport>(
      a,
      src.client->Get(
          absl::StrCat("/api/v1/jobs/", EncodePathSegment(job), "/windows"),
          params),
      ParseJobReportJson, render);
}

int Fleet(const QueryArgs& a, Source& src, const JobPeriod& period,
          const FleetOrder& by, int top) {
  const bool color = !a.no_color && isatty(STDOUT_FILENO);
  auto render = [&](const FleetReport& r) { return RenderFleetText(r, color); };
  if (src.store != nullptr) {
    absl::StatusOr<FleetReport> r = QueryFleet(*src.store, period, by, top);
    if (!r.ok()) return Fail(r.status());
    std::cout << (a.json ? RenderFleetJson(*r, a.pretty) + "\n" : render(*r));
    return kExitOk;
  }
  std::multimap<std::string, std::string> params = {
      {"top", std::to_string(top)}, {"by", by.Name()}};
  AddPeriodParams(a, params);
  if (a.pretty) params.emplace("pretty", "1");
  return Print<FleetReport>(a, src.client->Get("/api/v1/fleet", params),
                            ParseFleetJson, render);
}

int Jobs(const QueryArgs& a, Source& src) {
  auto render = [](const std::vector<JobInfo>& jobs) {
    return RenderJobsText(jobs, absl::Now());
  };
  if (src.store != nullptr) {
    absl::StatusOr<std::vector<JobInfo>> jobs = src.store->ListJobs();
    if (!jobs.ok()) return Fail(jobs.status());
    std::cout << (a.json ? RenderJobsJson(*jobs, a.pretty, absl::Now()) + "\n"
                         : render(*jobs));
    return kExitOk;
  }
  std::multimap<std::string, std::string> params;
  if (a.pretty) params.emplace("pretty", "1");
  return Print<std::vector<JobInfo>>(a, src.client->Get("/api/v1/jobs", params),
                                     ParseJobsJson, render);
}

}  // namespace

int RunQueryCommand(int argc, char** argv) {
  QueryArgs a;
  CommandLine cl(
      "bubblewatch query job JOB [--last 1h | --from T --to T] [options]\n"
      "       bubblewatch query fleet [--last 1h | --from T --to T] [--top 20] "
      "[--by ORDER]\n"
      "                               [options]\n"
      "       bubblewatch query jobs [options]\n"
      "  with --store DIR or --server URL",
      "Answers from the window store: `job` reports one job's windows over a "
      "period (default the\nlast hour, ending at its latest window): "
      "utilization over time, rolling 1m/5m/1h utilization,\nbubble time by "
      "cause, the top bubbles and advice. `fleet` ranks every job by the GPU "
      "time it wasted\nover a period (default the last hour, ending at the "
      "fleet's newest window; ORDER: bubble_time\n(default), bubble_ratio, "
      "cause:<cause>, comm_wait, straggler_wait, straggler_cost) and says how "
      "many\nGPU-hours "
      "the fleet lost, by cause. "
      "`jobs` lists known jobs.\n\nT is RFC 3339 "
      "(2026-11-29T10:00:00Z) or epoch seconds; a period is at most 24h.\n"
      "--store opens the store read-only (beside a running processor, or a "
      "copy); --server asks\n`bubblewatch serve` or `process --http`.\n\n"
      "Exit codes: 0 ok, 1 no windows for the job, or a store/server failure, "
      "2 usage error.");
  cl.AddString("store", &a.store, "DIR", "read this window store");
  cl.AddString("server", &a.server, "URL",
               "ask this bubblewatch HTTP server (http://HOST:PORT)");
  cl.AddString("token-file", &a.token_file, "FILE",
               "bearer token for --server, from this file");
  cl.AddString(
      "last", &a.last, "DURATION",
      "job, fleet: the period ending at the job's (fleet's) latest window "
      "(default 1h)");
  cl.AddString("from", &a.from, "T", "job, fleet: period start (with --to)");
  cl.AddString("to", &a.to, "T",
               "job, fleet: period end, exclusive (with --from)");
  cl.AddString("bubbles", &a.bubbles, "N", "job: top bubbles to list (10)");
  cl.AddInt("windows", &a.windows, "N",
            "job: rows of the window table: the latest N (0 = all)");
  cl.AddString("top", &a.top, "N", "fleet: jobs to list (20)");
  cl.AddString("by", &a.by, "ORDER",
               "fleet: bubble_time (default), bubble_ratio, cause:<cause>, "
               "comm_wait, straggler_wait or straggler_cost");
  cl.AddBool("json", &a.json, "print JSON (the HTTP API's objects)");
  cl.AddBool("pretty", &a.pretty, "indent the JSON");
  cl.AddBool("no-color", &a.no_color, "no ANSI colors on a terminal");
  std::vector<std::string> pos;
  if (absl::Status s = cl.Parse(argc, argv, &pos); !s.ok()) {
    return Usage(s.message());
  }
  if (cl.help_requested()) {
    std::cout << cl.Help();
    return kExitOk;
  }
  if (pos.empty()) return Usage("want a query: job JOB, fleet or jobs");
  const std::string what = pos[0];
  const size_t want_args = what == "job" ? 2 : 1;
  if (what != "job" && what != "fleet" && what != "jobs") {
    return Usage(absl::StrCat("unknown query '", what,
                              "': want job JOB, fleet or jobs"));
  }
  if (pos.size() < want_args) return Usage("query job needs a JOB");
  if (pos.size() > want_args) {
    return Usage(absl::StrCat("unexpected argument ", pos[want_args]));
  }
  if (a.store.empty() == a.server.empty()) {
    return Usage("give either --store DIR or --server URL");
  }
  if (!a.token_file.empty() && a.server.empty()) {
    return Usage("--token-file goes with --server");
  }
  const bool period_opts = !a.last.empty() || !a.from.empty() || !a.to.empty();
  if (what == "jobs" && period_opts) {
    return Usage("--last, --from and --to apply to `query job` and `fleet`");
  }
  if (what != "job" && !a.bubbles.empty()) {
    return Usage("--bubbles applies to `query job`");
  }
  if (what != "fleet" && (!a.top.empty() || !a.by.empty())) {
    return Usage("--top and --by apply to `query fleet`");
  }
  if (a.windows < 0) return Usage("--windows must be >= 0");

  // Parameters are checked before any store or server is touched, so a typo
  // fails fast with exit 2 in both modes.
  absl::StatusOr<JobPeriod> period = ParseJobPeriod(a.last, a.from, a.to);
  if (!period.ok()) return Usage(period.status().message());
  absl::StatusOr<int> bubbles =
      ParseCount("--bubbles", a.bubbles, kDefaultTopBubbles, kMaxTopBubbles);
  if (!bubbles.ok()) return Usage(bubbles.status().message());
  absl::StatusOr<int> top =
      ParseCount("--top", a.top, kDefaultFleetTop, kMaxFleetTop);
  if (!top.ok()) return Usage(top.status().message());
  absl::StatusOr<FleetOrder> by =
      ParseFleetOrder(a.by.empty() ? "bubble_time" : a.by);
  if (!by.ok()) return Usage(absl::StrCat("--by: ", by.status().message()));

  Source src;
  if (!a.store.empty()) {
    absl::StatusOr<std::unique_ptr<WindowStoreReader>> store =
        OpenRocksDbWindowStoreReadOnly(a.store);
    if (!store.ok()) return Fail(store.status());
    src.store = *std::move(store);
  } else {
    std::string token;
    if (!a.token_file.empty()) {
      absl::StatusOr<std::string> t = ReadTokenFile(a.token_file);
      if (!t.ok()) return Usage(t.status().message());
      token = *std::move(t);
    }
    absl::StatusOr<std::unique_ptr<QueryClient>> client =
        QueryClient::Create(a.server, std::move(token));
    if (!client.ok()) return Usage(client.status().message());
    src.client = *std::move(client);
  }
  if (what == "job") return Job(a, src, pos[1], *period, *bubbles);
  if (what == "fleet") return Fleet(a, src, *period, *by, *top);
  return Jobs(a, src);
}

}  // namespace bubblewatch
