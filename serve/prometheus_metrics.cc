#include "serve/prometheus_metrics.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/text_escape.h"
#include "serve/query_report.h"
#include "storage/window_queries.h"

namespace bubblewatch {
namespace {

// Builds the page. Samples may be added in any order; Take() writes each
// family as one group (HELP, TYPE, then its samples), as the format
// requires, in the order the families were declared.
class Page {
 public:
  void Family(absl::string_view name, absl::string_view type,
              absl::string_view help) {
    index_[name] = families_.size();
    families_.push_back(absl::StrCat("# HELP ", name, " ", help, "\n# TYPE ",
                                     name, " ", type, "\n"));
  }
  void Sample(absl::string_view name, absl::string_view labels, int64_t v) {
    Append(name, labels, absl::StrCat(v));
  }
  void Sample(absl::string_view name, absl::string_view labels, double v) {
    Append(name, labels, absl::StrFormat("%.15g", v));
  }
  std::string Take() && { return absl::StrJoin(families_, ""); }

 private:
  // REQUIRES: Family(name) was called.
  void Append(absl::string_view name, absl::string_view labels,
              absl::string_view value) {
    std::string& body = families_[index_.at(name)];
    absl::StrAppend(&body, name, labels.empty() ? "" : "{", labels,
                    labels.empty() ? "" : "}", " ", value, "\n");
  }

  std::vector<std::string> families_;
  absl::flat_hash_map<std::string, size_t> index_;
};

std::string Label(absl::string_view name, absl::string_view value) {
  return absl::StrCat(name, "=\"", EscapeLabelValue(value), "\"");
}

void WriteProcessor(Page& page, const ProcessorStats& p) {
  struct Counter {
    const char* name;
    const char* help;
    int64_t value;
  };
  const Counter counters[] = {
      {"bubblewatch_processor_messages_total",
       "Kafka messages consumed (replays of already processed offsets "
       "excluded).",
       p.messages},
      {"bubblewatch_processor_events_total",
       "Trace events consumed; rate() of it is events per second.", p.events},
      {"bubblewatch_processor_replayed_messages_total",
       "Messages re-read after a restart or rebalance to rebuild open "
       "windows, not counted again.",
       p.replayed_messages},
      {"bubblewatch_processor_redelivered_messages_total",
       "Messages the consumer sent again within one assignment (below the "
       "next offset), skipped.",
       p.redelivered_messages},
      {"bubblewatch_processor_duplicate_batches_total",
       "Batches a producer sent twice (same sequence), ignored.",
       p.duplicate_batches},
      {"bubblewatch_processor_late_events_total",
       "Events that arrived after their window was final; counted per job in "
       "the stored windows, never dropped silently.",
       p.late_events},
      {"bubblewatch_processor_windows_written_total",
       "Finalized windows written to the store.", p.windows_written},
      {"bubblewatch_processor_windows_published_total",
       "Windows the windows topic acknowledged (late-event updates "
       "included): with a windows topic, equal to windows written.",
       p.windows_published},
      {"bubblewatch_processor_window_parts_published_total",
       "Window parts of split jobs' hosts (stage 1) the parts topic "
       "acknowledged (docs/architecture.md#one-job-across-processors).",
       p.window_parts_published},
      {"bubblewatch_processor_windows_trimmed_total",
       "Windows larger than the windows topic takes, published and stored "
       "trimmed with a note of what was left out "
       "(docs/semantics.md#windows-that-do-not-fit).",
       p.windows_trimmed},
      {"bubblewatch_processor_end_markers_total",
       "End markers counted: a producer's stream of a job ended "
       "(docs/semantics.md#job-lifecycle).",
       p.end_markers},
      {"bubblewatch_processor_jobs_ended_total",
       "Jobs that ended by their producers' end markers.", p.jobs_ended},
      {"bubblewatch_processor_batches_after_end_total",
       "Batches a producer sent after its own end marker (bad input: kept, "
       "the job runs again).",
       p.batches_after_end},
      {"bubblewatch_processor_observation_closes_total",
       "Jobs whose windows closed because a new observation started after "
       "their data: the time between was unobserved "
       "(docs/semantics.md#observations).",
       p.observation_closes},
      {"bubblewatch_processor_buffer_full_closes_total",
       "Jobs whose windows closed early and whose buffer was dropped because "
       "a batch would have taken it past --max-job-buffer-events "
       "(docs/semantics.md#buffer-bound).",
       p.buffer_full_closes},
      {"bubblewatch_processor_overlapping_observations_total",
       "Observations that overlap the previous one of their host and rank "
       "(bad input: counted, events kept).",
       p.overlapping_observations},
      {"bubblewatch_processor_observations_backwards_total",
       "Observations that start before the previous one of their host and "
       "rank (bad input: counted, events kept).",
       p.observations_backwards},
      {"bubblewatch_processor_late_collectives_total",
       "Collective kernels that arrived after their window was final; their "
       "instance was matched without them (counted per job in the stored "
       "windows too).",
       p.late_collectives},
      {"bubblewatch_processor_collective_errors_total",
       "Windows whose collective analysis failed (e.g. two hosts claiming "
       "one rank): stored without their collective part, each logged.",
       p.collective_errors},
      {"bubblewatch_processor_window_analysis_failures_total",
       "Window analyses that failed (a bug): the processor stops before "
       "committing past their windows, each logged with the job and windows.",
       p.window_analysis_failures},
      {"bubblewatch_processor_dead_letters_lost_total",
       "Rejected messages whose dead letter the dead-letter topic refused "
       "even in its minimal form (headers only); each is also logged.",
       p.dead_letters_lost},
  };
  for (const Counter& c : counters) {
    page.Family(c.name, "counter", c.help);
    page.Sample(c.name, "", c.value);
  }
  page.Family("bubblewatch_processor_dlq_messages_total", "counter",
              "Malformed messages sent to the dead-letter topic, by reason.");
  std::vector<std::pair<std::string, int64_t>> dlq(p.dlq_by_reason.begin(),
                                                   p.dlq_by_reason.end());
  std::sort(dlq.begin(), dlq.end());
  for (const auto& [reason, n] : dlq) {
    page.Sample("bubblewatch_processor_dlq_messages_total",
                Label("reason", reason), n);
  }
  page.Family("bubblewatch_processor_dlq_batches_by_source_total", "counter",
              "Batches that decoded but broke a rule or limit, sent to the "
              "dead-letter topic, by job and producer id (job \"\" counts "
              "sources past the first 1000).");
  std::vector<std::pair<std::pair<std::string, uint64_t>, int64_t>> sources(
      p.dlq_by_source.begin(), p.dlq_by_source.end());
  std::sort(sources.begin(), sources.end());
  for (const auto& [source, n] : sources) {
    page.Sample("bubblewatch_processor_dlq_batches_by_source_total",
                absl::StrCat(Label("job", source.first), ",",
                             Label("producer", absl::StrCat(source.second))),
                n);
  }
  page.Family("bubblewatch_processor_tracked_jobs", "gauge",
              "Jobs whose state the owned partitions track (limited per "
              "partition by --max-jobs-per-partition).");
  page.Sample("bubblewatch_processor_tracked_jobs", "", p.tracked_jobs);
  page.Family("bubblewatch_processor_jobs_forgotten_total", "counter",
              "Jobs forgotten after --job-expiry without events.");
  page.Sample("bubblewatch_processor_jobs_forgotten_total", "",
              p.jobs_forgotten);
  page.Family("bubblewatch_processor_job_host_skew_seconds", "gauge",
              "Spread between the newest event times of a job's hosts (clock "
              "skew plus delivery delay) when its windows last closed; only "
              "jobs at or above --skew-warning, labelled with the host ahead "
              "and the host behind.");
  std::vector<std::pair<std::string, ProcessorStats::HostSkew>> skews(
      p.host_skew.begin(), p.host_skew.end());
  std::sort(skews.begin(), skews.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [job, skew] : skews) {
    page.Sample("bubblewatch_processor_job_host_skew_seconds",
                absl::StrCat(Label("job", job), ",", Label("ahead", skew.ahead),
                             ",", Label("behind", skew.behind)),
                static_cast<double>(skew.skew_ns) / 1e9);
  }
  page.Family("bubblewatch_processor_open_jobs", "gauge",
              "Jobs with at least one open window.");
  page.Sample("bubblewatch_processor_open_jobs", "", p.open_jobs);
  page.Family("bubblewatch_processor_buffered_events", "gauge",
              "Events held in open windows.");
  page.Sample("bubblewatch_processor_buffered_events", "", p.buffered_events);
  page.Family("bubblewatch_processor_lag_messages", "gauge",
              "Messages behind the partition's high watermark.");
  std::vector<std::pair<std::string, int64_t>> lag(p.lag.begin(), p.lag.end());
  std::sort(lag.begin(), lag.end());
  for (const auto& [key, n] : lag) {
    // Keys are "topic/partition"; topics may not contain '/'.
    const size_t slash = key.rfind('/');
    const std::string topic =
        slash == std::string::npos ? key : key.substr(0, slash);
    const std::string partition =
        slash == std::string::npos ? "" : key.substr(slash + 1);
    page.Sample(
        "bubblewatch_processor_lag_messages",
        absl::StrCat(Label("topic", topic), ",", Label("partition", partition)),
        n);
  }
}

void WriteMaterializer(Page& page, const MaterializerStatus& m) {
  const std::string topic = Label("topic", m.topic);
  const std::string state_topic =
      m.state_topic.empty() ? "" : Label("topic", m.state_topic);
  page.Family("bubblewatch_serve_lag_messages", "gauge",
              "Offsets of a followed topic (the windows topic, the "
              "processors' state topic) not yet in serve's store, summed "
              "over its partitions (absent until every partition's high "
              "watermark is known).");
  if (m.lag_messages) {
    page.Sample("bubblewatch_serve_lag_messages", topic, *m.lag_messages);
  }
  if (!state_topic.empty() && m.state_lag_messages) {
    page.Sample("bubblewatch_serve_lag_messages", state_topic,
                *m.state_lag_messages);
  }
  page.Family("bubblewatch_serve_partitions", "gauge",
              "Partitions of a followed topic.");
  page.Sample("bubblewatch_serve_partitions", topic,
              static_cast<int64_t>(m.partitions));
  if (!state_topic.empty()) {
    page.Sample("bubblewatch_serve_partitions", state_topic,
                static_cast<int64_t>(m.state_partitions));
  }
  page.Family("bubblewatch_serve_windows_applied_total", "counter",
              "Window versions written to serve's store.");
  page.Sample("bubblewatch_serve_windows_applied_total", topic,
              m.windows_applied);
  page.Family("bubblewatch_serve_windows_deleted_total", "counter",
              "Windows deleted by a tombstone on the windows topic.");
  page.Sample("bubblewatch_serve_windows_deleted_total", topic,
              m.windows_deleted);
  page.Family("bubblewatch_serve_invalid_messages_total", "counter",
              "Messages of a followed topic skipped: not a window (windows "
              "topic), not a partition snapshot (state topic).");
  page.Sample("bubblewatch_serve_invalid_messages_total", topic,
              m.invalid_messages);
  if (state_topic.empty()) return;
  page.Sample("bubblewatch_serve_invalid_messages_total", state_topic,
              m.state_invalid_messages);
  page.Family("bubblewatch_serve_snapshots_applied_total", "counter",
              "Partition snapshots of the state topic applied to serve's "
              "store (job states, alert states).");
  page.Sample("bubblewatch_serve_snapshots_applied_total", state_topic,
              m.snapshots_applied);
  page.Family("bubblewatch_serve_snapshots_superseded_total", "counter",
              "Partition snapshots ignored: one with a higher committed "
              "position was applied before (a former owner's late write).");
  page.Sample("bubblewatch_serve_snapshots_superseded_total", state_topic,
              m.snapshots_superseded);
}

// Utilization and bubble ratio by cause of `p` in two families
// `<prefix>_utilization` and `<prefix>_bubble_ratio`, with `labels` first.
void WritePeriodSamples(Page& page, absl::string_view prefix,
                        absl::string_view labels, const PeriodStats& p) {
  const std::string sep = labels.empty() ? "" : ",";
  page.Sample(absl::StrCat(prefix, "_utilization"), labels, p.utilization());
  for (BubbleCause c : kAllBubbleCauses) {
    page.Sample(absl::StrCat(prefix, "_bubble_ratio"),
                absl::StrCat(labels, sep, Label("cause", BubbleCauseName(c))),
                p.cause_ratio(c));
  }
}

// The job's top kMaxStragglerRanks stragglers of one window, each rank's
// non-zero causes: at most 3 x 10 series per job.
constexpr size_t kMaxStragglerRanks = 3;

void WriteStragglers(Page& page, absl::string_view job_labels,
                     const WindowCollectives& c) {
  // Stragglers come by wait caused, descending.
  const size_t n = std::min(c.stragglers.size(), kMaxStragglerRanks);
  for (size_t i = 0; i < n; ++i) {
    const StragglerWindow& s = c.stragglers[i];
    std::vector<std::pair<std::string, int64_t>> split = {
        {"compute", s.compute_ns}, {"comm", s.comm_ns}};
    for (BubbleCause cause : kAllBubbleCauses) {
      int64_t ns = s.causes[static_cast<int>(cause)];
      if (cause == BubbleCause::kUnattributed) ns += s.unattributed_ns;
      split.emplace_back(std::string(BubbleCauseName(cause)), ns);
    }
    const std::string rank =
        absl::StrCat(job_labels, ",", Label("rank", absl::StrCat(s.rank)));
    for (const auto& [cause, ns] : split) {
      if (ns <= 0) continue;
      page.Sample("bubblewatch_job_straggler_wait_seconds",
                  absl::StrCat(rank, ",", Label("cause", cause)),
                  static_cast<double>(ns) / 1e9);
    }
  }
}

}  // namespace

std::string EscapeLabelValue(absl::string_view value) {
  // A label value that is not UTF-8 fails the whole scrape (promtool, and
  // Prometheus itself): such a name is shown escaped (\xHH) instead;
  // printable names pass unchanged.
  const std::string printable = EscapeForLog(value);
  std::string out;
  out.reserve(printable.size());
  for (char c : printable) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

absl::StatusOr<std::string> RenderPrometheusMetrics(
    const WindowStoreReader& store, int top_jobs,
    const ProcessorStats* processor, const MaterializerStatus* materializer) {
  // Every job, most bubble time first: the first `top_jobs` get their own
  // series, the rest are aggregated.
  ASSIGN_OR_RETURN(
      FleetReport fleet,
      QueryFleetLatest(store,
                       FleetOrder{.metric = FleetOrder::Metric::kBubbleTime},
                       std::numeric_limits<int>::max()));
  const size_t exported = std::min(fleet.entries.size(),
                                   static_cast<size_t>(std::max(0, top_jobs)));

  Page page;
  page.Family("bubblewatch_jobs", "gauge",
              "Jobs with at least one stored window.");
  page.Sample("bubblewatch_jobs", "", fleet.jobs);
  page.Family("bubblewatch_fleet_utilization", "gauge",
              "GPU utilization (compute / span, GPU-time weighted) over the "
              "latest complete window of every job.");
  page.Family("bubblewatch_fleet_bubble_ratio", "gauge",
              "Bubble time of a cause / span over the latest complete window "
              "of every job; the causes add up to the bubble ratio.");
  WritePeriodSamples(page, "bubblewatch_fleet", "", fleet.all.stats);

  page.Family("bubblewatch_job_utilization", "gauge",
              "GPU utilization of a job over the range ending at its latest "
              "window; only the jobs with the most bubble time (see "
              "bubblewatch_other_jobs).");
  page.Family("bubblewatch_job_bubble_ratio", "gauge",
              "Bubble time of a cause / span of a job over the range ending "
              "at its latest window; the causes add up to the bubble ratio.");
  page.Family("bubblewatch_job_comm_wait_ratio", "gauge",
              "GPU time a multi-rank job's ranks waited in collectives / its "
              "GPU time (span), over the range ending at its latest window; "
              "only jobs with collectives in the range.");
  page.Family("bubblewatch_job_straggler_wait_seconds", "gauge",
              "GPU time the others waited for a straggler rank in the job's "
              "latest window, split by what made the rank late (compute, "
              "comm or a bubble cause; unattributed includes wait with no "
              "sync point); the job's top 3 stragglers, non-zero causes.");
  page.Family("bubblewatch_job_latest_window_end_seconds", "gauge",
              "Event time (Unix seconds) at which the job's latest stored "
              "window ends.");
  // The lifecycle (docs/semantics.md#job-lifecycle): every job counted by
  // phase; the per-job series for the same jobs as the others.
  ASSIGN_OR_RETURN(std::vector<JobInfo> jobs, store.ListJobs());
  const absl::Time now = absl::Now();
  absl::flat_hash_map<std::string, JobPhase> phases;
  int64_t by_phase[4] = {0, 0, 0, 0};
  for (const JobInfo& j : jobs) {
    const JobPhase phase = PhaseAt(
        j.lifecycle, std::max(now - j.last_seen_wall, absl::ZeroDuration()));
    phases[j.job] = phase;
    ++by_phase[static_cast<int>(phase)];
  }
  page.Family("bubblewatch_jobs_by_state", "gauge",
              "Jobs the store knows, by lifecycle state (active, paused, "
              "ended, waiting).");
  for (JobPhase phase : {JobPhase::kActive, JobPhase::kPaused, JobPhase::kEnded,
                         JobPhase::kWaiting}) {
    page.Sample("bubblewatch_jobs_by_state",
                Label("state", JobPhaseName(phase)),
                by_phase[static_cast<int>(phase)]);
  }
  page.Family("bubblewatch_job_state", "gauge",
              "1 for the job's lifecycle state (active, paused, ended, "
              "waiting); the "
              "same jobs as bubblewatch_job_utilization.");
  page.Family("bubblewatch_job_last_seen_seconds", "gauge",
              "Wall time (Unix seconds) the processor last committed news of "
              "the job.");
  absl::flat_hash_map<std::string, absl::Time> last_seen;
  for (const JobInfo& j : jobs) last_seen[j.job] = j.last_seen_wall;
  for (size_t i = 0; i < exported; ++i) {
    const FleetEntry& e = fleet.entries[i];
    absl::StatusOr<std::vector<RollingUtilization>> rolling =
        QueryRolling(store, e.job);
    if (absl::IsNotFound(rolling.status())) continue;  // Trimmed meanwhile.
    if (!rolling.ok()) return rolling.status();
    const std::string job = Label("job", e.job);
    for (const RollingUtilization& r : *rolling) {
      const std::string labels =
          absl::StrCat(job, ",", Label("range", RangeLabel(r.range)));
      WritePeriodSamples(page, "bubblewatch_job", labels, r.stats);
      // Multi-rank jobs only: a job without collectives has no ratio (not 0).
      if (r.collective_windows > 0) {
        page.Sample("bubblewatch_job_comm_wait_ratio", labels,
                    r.comm_wait_ratio());
      }
    }
    if (e.latest.collectives.has_value()) {
      WriteStragglers(page, job, *e.latest.collectives);
    }
    page.Sample("bubblewatch_job_latest_window_end_seconds", job,
                static_cast<double>(e.latest.end_ns) / 1e9);
    if (auto it = phases.find(e.job); it != phases.end()) {
      page.Sample(
          "bubblewatch_job_state",
          absl::StrCat(job, ",", Label("state", JobPhaseName(it->second))),
          int64_t{1});
      page.Sample("bubblewatch_job_last_seen_seconds", job,
                  absl::ToDoubleSeconds(last_seen[e.job] - absl::UnixEpoch()));
    }
  }

  PeriodStats others;
  for (size_t i = exported; i < fleet.entries.size(); ++i) {
    others.Add(fleet.entries[i].latest.stats);
  }
  page.Family("bubblewatch_other_jobs", "gauge",
              "Jobs with windows but without per-job series (beyond the "
              "top jobs by bubble time).");
  page.Sample("bubblewatch_other_jobs", "",
              static_cast<int64_t>(fleet.entries.size() - exported));
  page.Family("bubblewatch_other_jobs_utilization", "gauge",
              "GPU utilization over the latest window of every job without "
              "per-job series.");
  page.Family("bubblewatch_other_jobs_bubble_ratio", "gauge",
              "Bubble time of a cause / span over the latest window of every "
              "job without per-job series.");
  WritePeriodSamples(page, "bubblewatch_other_jobs", "", others);

  if (processor != nullptr) WriteProcessor(page, *processor);
  if (materializer != nullptr) WriteMaterializer(page, *materializer);
  return std::move(page).Take();
}

}  // namespace bubblewatch
