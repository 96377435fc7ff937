#include "cli/produce_watch.h"

#include <algorithm>
#include <csignal>
#include <iostream>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "cli/exit_codes.h"
#include "ingest/watch/job_name_pattern.h"
#include "ingest/watch/trace_watcher.h"

namespace bubblewatch {
namespace {

constexpr char kCommand[] = "bubblewatch produce --watch";

std::atomic<TraceWatcher*> g_watcher{nullptr};

void OnStopSignal(int) {
  // RequestStop only stores an atomic: async-signal-safe.
  if (TraceWatcher* w = g_watcher.load()) w->RequestStop();
}

int Fail(int code, absl::string_view message) {
  std::cerr << kCommand << ": " << message << "\n";
  return code;
}

std::string Summary(const WatcherStats& s) {
  std::string out = absl::StrCat(
      s.files_sent, " files sent (", s.events_sent, " events in ",
      s.batches_sent, " batches), ", s.files_already_sent,
      " already sent before a restart, ", s.files_rejected, " rejected");
  if (s.files_already_rejected > 0) {
    absl::StrAppend(&out, ", ", s.files_already_rejected,
                    " rejected before a restart (left in place)");
  }
  for (const auto& [reason, count] : s.rejected_by_reason) {
    absl::StrAppend(&out, "; ", reason, ": ", count);
  }
  return out;
}

std::string InspectorSummary(const InspectorTailStats& s) {
  std::string out = absl::StrCat(
      "Inspector logs: ", s.logs, " followed, ", s.records_sent,
      " records sent (", s.batches_sent, " batches in ", s.chunks_sent,
      " chunks), ", s.truncated, " truncated, ", s.replaced, " replaced");
  if (s.resent_pending > 0) {
    absl::StrAppend(&out, ", ", s.resent_pending,
                    " chunks resent after a restart");
  }
  if (s.ring_dropped > 0) {
    absl::StrAppend(&out, ", ", s.ring_dropped,
                    " records dropped by the plugin's ring");
  }
  if (s.rank_changes > 0) {
    absl::StrAppend(&out, ", ", s.rank_changes, " job rank changes");
  }
  if (s.exec_instances_sent > 0 || s.exec_records_held > 0) {
    absl::StrAppend(&out, ", ", s.exec_instances_sent,
                    " exec-time-only instances sent, ", s.exec_records_held,
                    " exec-time-only records held (their instances not "
                    "complete yet)");
  }
  for (const auto& [reason, count] : s.skipped) {
    absl::StrAppend(&out, "; ", reason, ": ", count);
  }
  return out;
}

}  // namespace

int RunProduceWatch(const ProduceWatchFlags& flags, KafkaConfig config,
                    EventProducerOptions producer_options) {
  TraceWatcherOptions options;
  options.dir = flags.dir;
  options.job = flags.job;
  options.rank = flags.rank;
  options.host = flags.host;
  options.reject_dir = flags.reject_dir;
  options.state_dir = flags.state_dir;
  options.settle = flags.settle;
  options.incomplete_timeout = flags.incomplete_timeout;
  options.poll_interval = flags.poll_interval;
  options.use_inotify = !flags.no_inotify;
  options.batching = flags.batching;
  options.split_ranks = flags.split_ranks;
  // Negative: refused by Validate (as 0), not wrapped to a huge bound.
  options.max_file_bytes =
      static_cast<uint64_t>(std::max<int64_t>(flags.max_file_bytes, 0));
  options.max_file_events = flags.max_file_events;
  options.flush_timeout = flags.timeout + absl::Seconds(5);
  options.inspector_pool.expire = flags.inspector_pool_expire;
  options.inspector_pool.lag = flags.inspector_pool_lag;
  options.inspector_pool_idle = flags.inspector_pool_idle;
  if (absl::Status s = options.Validate(); !s.ok()) {
    return Fail(kExitUsage, s.message());
  }
  absl::StatusOr<AfterSend> after = ParseAfterSend(flags.after_send);
  if (!after.ok()) {
    return Fail(kExitUsage,
                absl::StrCat("--after-send: ", after.status().message()));
  }
  options.after_send = *after;
  if (flags.job.empty() || !flags.job_from_name.empty()) {
    const std::string pattern = flags.job_from_name.empty()
                                    ? std::string(kDefaultJobNamePattern)
                                    : flags.job_from_name;
    absl::StatusOr<JobNamePattern> p = JobNamePattern::Create(pattern);
    if (!p.ok()) {
      return Fail(kExitUsage,
                  absl::StrCat("--job-from-name: ", p.status().message()));
    }
    options.job_pattern = *std::move(p);
  }

  // What the broker stores of a file's batches must be a prefix of them:
  // the processor keeps only the highest sequence it counted per producer,
  // so after a gap (batch k lost, k+1 stored) the resend would skip k.
  // The idempotent producer's sequence checks rule out gaps except after an
  // error that resets its sequences: gapless.guarantee makes those fatal
  // instead, and messages never time out inside librdkafka (a timeout is the
  // one such error gapless does not cover). The wait is bounded by Flush's
  // --timeout instead, after which the watcher exits and its restart resends
  // the whole file.
  config.Set("enable.gapless.guarantee", "true");
  config.Set("message.timeout.ms", "0");
  absl::StatusOr<std::unique_ptr<EventProducer>> producer =
      EventProducer::Create(std::move(config), producer_options);
  if (!producer.ok()) return Fail(kExitUsage, producer.status().message());
  absl::StatusOr<std::unique_ptr<TraceWatcher>> watcher =
      TraceWatcher::Create(std::move(options), producer->get());
  if (!watcher.ok()) return Fail(kExitUsage, watcher.status().message());
  if (absl::Status st = (*producer)->WaitUntilReachable(flags.timeout);
      !st.ok()) {
    return Fail(kExitFailure, st.message());
  }

  g_watcher.store(watcher->get());
  std::signal(SIGTERM, OnStopSignal);
  std::signal(SIGINT, OnStopSignal);
  absl::Status run = (*watcher)->Run();
  g_watcher.store(nullptr);
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  std::cerr << kCommand << ": " << Summary((*watcher)->stats()) << "\n";
  if (const InspectorTailStats t = (*watcher)->inspector_stats();
      t.logs > 0 || t.chunks_sent > 0 || !t.skipped.empty()) {
    std::cerr << kCommand << ": " << InspectorSummary(t) << "\n";
  }
  if (!run.ok()) return Fail(kExitFailure, run.message());
  return kExitOk;
}

}  // namespace bubblewatch
