// `bubblewatch produce`: sends trace files, or a synthetic fleet, to Kafka as
// EventBatch messages (see ingest/event_producer.h for the guarantees).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "base/logging.h"
#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/produce_watch.h"
#include "ingest/batched_trace.h"
#include "ingest/event_producer.h"
#include "ingest/synthetic/synthetic_fleet.h"
#include "ingest/trace_reader.h"
#include "ingest/trace_replay.h"
#include "kafka/embedded_kafka_cluster.h"
#include "kafka/kafka_config.h"

namespace bubblewatch {
namespace {

constexpr char kCommand[] = "bubblewatch produce";

int Fail(int code, absl::string_view message) {
  std::cerr << kCommand << ": " << message << "\n";
  return code;
}

int UsageError(absl::string_view message) {
  std::cerr << kCommand << ": " << message
            << "\nTry 'bubblewatch produce --help'.\n";
  return kExitUsage;
}

// "max" -> 0; "10x" or "10" -> 10.
std::optional<double> ParseReplaySpeed(absl::string_view text) {
  if (text == "max") return 0.0;
  absl::ConsumeSuffix(&text, "x");
  double speed = 0;
  if (!absl::SimpleAtod(text, &speed) || !(speed > 0)) return std::nullopt;
  return speed;
}

// RFC 3339 ("2026-01-01T00:00:00Z"), integer epoch seconds, or "now".
std::optional<int64_t> ParseStartTime(absl::string_view text) {
  if (text == "now") return absl::ToUnixNanos(absl::Now());
  int64_t seconds = 0;
  if (absl::SimpleAtoi(text, &seconds)) return seconds * 1'000'000'000;
  absl::Time t;
  std::string error;
  if (absl::ParseTime(absl::RFC3339_full, std::string(text), &t, &error)) {
    return absl::ToUnixNanos(t);
  }
  return std::nullopt;
}

std::string LocalHostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  return name;
}

std::string Megabytes(int64_t bytes) {
  return absl::StrFormat("%.1f MB", static_cast<double>(bytes) / 1e6);
}

void PrintProgress(const ProducerStats& s, absl::Duration elapsed) {
  const double seconds = std::max(1e-9, absl::ToDoubleSeconds(elapsed));
  std::fprintf(stderr,
               "\r\033[K%s: %lld events sent (%.0f events/s, %.1f MB/s), "
               "%lld batches acknowledged, %lld in flight",
               kCommand, static_cast<long long>(s.events_sent),
               s.events_sent / seconds, s.bytes_sent / seconds / 1e6,
               static_cast<long long>(s.batches_acked),
               static_cast<long long>(s.batches_in_flight()));
  std::fflush(stderr);
}

void PrintSummary(const ProducerStats& s, const std::string& topic,
                  absl::Duration elapsed) {
  const double seconds = std::max(1e-9, absl::ToDoubleSeconds(elapsed));
  std::fprintf(
      stderr,
      "%s: %lld events in %lld batches (%s) to topic %s in %.2f s: %.0f "
      "events/s, %.1f MB/s; %lld of %lld batches acknowledged\n",
      kCommand, static_cast<long long>(s.events_sent),
      static_cast<long long>(s.batches_sent), Megabytes(s.bytes_sent).c_str(),
      topic.c_str(), seconds, s.events_sent / seconds,
      s.bytes_sent / seconds / 1e6, static_cast<long long>(s.batches_acked),
      static_cast<long long>(s.batches_sent));
}

}  // namespace

int RunProduceCommand(int argc, char** argv) {
  std::string brokers;
  std::string topic = "bubblewatch.events";
  std::string job;
  int rank = -1;
  // Empty: each file's own host (a Kineto or Nsight trace that names it),
  // else this machine's; the watcher: this machine's.
  std::string host;
  int64_t batch_events = 4096;
  absl::Duration linger = absl::Milliseconds(50);
  std::string replay_speed = "max";
  absl::Duration timeout = absl::Seconds(30);
  std::vector<std::string> properties;
  std::string log_level = "warn";
  bool synthetic = false;
  bool no_end_marker = false;
  int split_ranks = 0;
  SyntheticFleetOptions fleet;
  std::string scenario = "mix";
  int64_t seed = 1;
  std::string truth_path;
  std::string start_time = "2026-01-01T00:00:00Z";
  std::string rate_text = "20000";
  ProduceWatchFlags watch;

  CommandLine cl(
      absl::StrCat(kCommand,
                   " --brokers HOST:PORT[,...]|embedded --job JOB [options] "
                   "FILE...\n       ",
                   kCommand,
                   " --brokers HOST:PORT[,...]|embedded --synthetic "
                   "[fleet options]\n       ",
                   kCommand,
                   " --brokers HOST:PORT[,...] --watch DIR [watch options]"),
      "Sends trace files (any file 'analyze' reads), or a synthetic fleet with "
      "planted bubbles of\nknown cause, to Kafka as FlatBuffers EventBatch "
      "messages keyed by job id: idempotent,\nacks=all, lz4, "
      "partitioner=murmur2_random. '--brokers embedded' runs librdkafka's "
      "mock\ncluster in this process (a demo: its data is gone on exit).\n"
      "--watch follows DIR and sends each finished trace file once, also "
      "across restarts\n(a service: runs until SIGTERM).\n\n"
      "Exit codes: 0 every batch acknowledged, 1 delivery failed or no broker, "
      "2 usage error,\n3 unreadable or malformed input.");
  cl.AddString("brokers", &brokers, "HOST:PORT[,...]|embedded",
               "Kafka bootstrap servers");
  cl.AddString("topic", &topic, "TOPIC", "topic to produce to");
  cl.AddString("job", &job, "JOB",
               "job id (the message key); with --synthetic, the job name "
               "prefix");
  cl.AddInt("rank", &rank, "R",
            "distributed rank of the files (-1 = what each file says)");
  cl.AddString("host", &host, "H",
               "producing host name (default: the file's own host when it "
               "names one, else this machine's)");
  cl.AddInt64("batch-events", &batch_events, "N",
              "most events per EventBatch message");
  cl.AddDuration("linger", &linger, "DURATION",
                 "librdkafka linger.ms; when paced, also the most event time "
                 "(x speed) one batch spans");
  cl.AddString("replay-speed", &replay_speed, "1x|10x|max",
               "pace sending by event time, or send as fast as possible");
  cl.AddDuration("timeout", &timeout, "DURATION",
                 "how long to wait for a broker and for each batch's "
                 "acknowledgement");
  cl.AddList("property", &properties, "key=value",
             "librdkafka property, as in kcat (repeatable; e.g. -X "
             "security.protocol=SASL_SSL)");
  cl.AddAlias('X', "property");
  cl.AddString("log-level", &log_level, "LEVEL",
               "trace, debug, info, warn, error or off (stderr)");
  cl.AddBool("no-end-marker", &no_end_marker,
             "send no end marker after each stream: the job goes on in a "
             "later produce (docs/semantics.md#job-lifecycle)");
  cl.AddInt("split-ranks", &split_ranks, "N",
            "key the batches of a job of N or more ranks (its declared world "
            "size) JOB@HOST, or JOB@rank-R for a rank naming no host, so "
            "that its hosts spread over the processors; their windows are "
            "made by the processors' stage 2, which must run "
            "(docs/architecture.md#one-job-across-processors). 0 = never");
  cl.AddBool("synthetic", &synthetic,
             "send a synthetic fleet instead of files");
  cl.AddInt("jobs", &fleet.jobs, "N", "synthetic: jobs");
  cl.AddInt("gpus-per-job", &fleet.gpus_per_job, "G",
            "synthetic: GPUs (ranks) per job");
  cl.AddDuration("duration", &fleet.duration, "DURATION",
                 "synthetic: event time to generate");
  cl.AddString("rate", &rate_text, "EVENTS_PER_S_PER_GPU",
               "synthetic: approximate trace events per second and GPU");
  cl.AddString("scenario", &scenario,
               "healthy|sync|launch|alloc|dataloader|memcpy|straggler|mix|"
               "lockstep",
               "synthetic: which bubbles (or stragglers) to plant");
  cl.AddInt64("seed", &seed, "S", "synthetic: random seed");
  cl.AddString("truth", &truth_path, "FILE",
               "synthetic: write the planted bubble time per job, device, "
               "10 s window and cause, or each job's straggler (rank, "
               "cause, interval) (JSON lines)");
  cl.AddString("start-time", &start_time, "RFC3339|EPOCH_SECONDS|now",
               "synthetic: event time of the first event");
  cl.AddString("watch", &watch.dir, "DIR",
               "follow DIR for *.json, *.json.gz and *.sqlite trace files and "
               "send each complete one once");
  cl.AddString("job-from-name", &watch.job_from_name, "REGEX",
               "watch: job and rank from the file name, groups (?<job>...) "
               "and (?<rank>...) (default without --job: "
               "'<job>.rank<rank>.'); else the trace's metadata");
  cl.AddString("after-send", &watch.after_send, "keep|move:DIR|delete",
               "watch: what to do with a file once every batch is "
               "acknowledged");
  cl.AddString("reject-dir", &watch.reject_dir, "DIR",
               "watch: where bad files and files without a job go (default "
               "DIR/.bubblewatch-rejected)");
  cl.AddString("state-dir", &watch.state_dir, "DIR",
               "watch: where the record of acknowledged files lives (default "
               "DIR/.bubblewatch-state)");
  cl.AddDuration("settle", &watch.settle, "DURATION",
                 "watch: how long a file must stay unchanged before it is "
                 "read (unless inotify saw it closed)");
  cl.AddDuration("incomplete-timeout", &watch.incomplete_timeout, "DURATION",
                 "watch: how long an unchanged but unfinished file (no gzip "
                 "trailer, no closing '}') is waited for before rejected");
  cl.AddInt64("max-file-bytes", &watch.max_file_bytes, "BYTES",
              "watch: the most bytes one file may hold, gunzipped (default "
              "2 GiB); past it the file is rejected as 'too large' as the "
              "read gets there");
  cl.AddInt64("max-file-events", &watch.max_file_events, "N",
              "watch: the most GPU + CPU events one file may hold (default "
              "5000000, 80 to 220 bytes of memory each while sent); past it "
              "the file is rejected as 'too large'");
  cl.AddDuration("poll-interval", &watch.poll_interval, "DURATION",
                 "watch: rescan period (the only trigger with --no-inotify)");
  cl.AddBool("no-inotify", &watch.no_inotify,
             "watch: poll instead of using inotify (e.g. on NFS)");
  cl.AddDuration("inspector-pool-idle", &watch.inspector_pool_idle, "DURATION",
                 "watch: exec-time-only Inspector logs: a job whose logs did "
                 "not grow for this long has ended, and its last instances "
                 "are sent (default 15s)");
  cl.AddDuration("inspector-pool-expire", &watch.inspector_pool_expire,
                 "DURATION",
                 "watch: exec-time-only Inspector logs: a process this far "
                 "behind the job's newest dump is not waited for, an "
                 "instance this far below the safe bound is given up, and a "
                 "job missing processes' logs after dumps this long apart is "
                 "counted, not sent (default 30s)");
  cl.AddDuration("inspector-pool-lag", &watch.inspector_pool_lag, "DURATION",
                 "watch: exec-time-only Inspector logs: the most the sent "
                 "timeline may fall behind its records' dump times before "
                 "it is lifted (default 2s)");

  std::vector<std::string> files;
  if (absl::Status st = cl.Parse(argc, argv, &files); !st.ok()) {
    return UsageError(st.message());
  }
  if (cl.help_requested()) {
    std::cout << cl.Help();
    return kExitOk;
  }
  if (absl::Status st = InitLogging(log_level); !st.ok()) {
    return UsageError(st.message());
  }

  // Usage checks, all before any input is read or any broker contacted.
  if (brokers.empty()) return UsageError("--brokers is required");
  if (topic.empty()) return UsageError("--topic must not be empty");
  if (batch_events < 1) return UsageError("--batch-events must be >= 1");
  if (split_ranks < 0) return UsageError("--split-ranks must be >= 0");
  if (linger < absl::ZeroDuration()) {
    return UsageError("--linger must not be negative");
  }
  if (timeout <= absl::ZeroDuration()) {
    return UsageError("--timeout must be positive");
  }
  const std::optional<double> speed = ParseReplaySpeed(replay_speed);
  if (!speed) {
    return UsageError(absl::StrCat("--replay-speed: '", replay_speed,
                                   "' is not like 1x, 10x or max"));
  }
  // Checked now, applied once the bootstrap address is known.
  if (absl::Status st = KafkaConfig("").SetAssignments(properties); !st.ok()) {
    return UsageError(st.message());
  }
  if (synthetic) {
    if (!files.empty()) {
      return UsageError("--synthetic takes no FILE arguments");
    }
    if (!watch.dir.empty()) {
      return UsageError("--synthetic and --watch exclude each other");
    }
    std::optional<SyntheticScenario> parsed = ParseSyntheticScenario(scenario);
    if (!parsed) {
      return UsageError(absl::StrCat(
          "--scenario: '", scenario,
          "' is not healthy, sync, launch, alloc, dataloader, memcpy, "
          "straggler, mix or lockstep"));
    }
    fleet.scenario = *parsed;
    fleet.seed = static_cast<uint64_t>(seed);
    if (!job.empty()) fleet.job_prefix = job;
    if (!absl::SimpleAtod(rate_text, &fleet.events_per_second_per_gpu) ||
        !(fleet.events_per_second_per_gpu > 0)) {
      return UsageError(
          absl::StrCat("--rate: '", rate_text, "' is not a positive number"));
    }
    std::optional<int64_t> start = ParseStartTime(start_time);
    if (!start) {
      return UsageError(absl::StrCat(
          "--start-time: '", start_time,
          "' is not RFC 3339 (2026-01-01T00:00:00Z), epoch seconds or now"));
    }
    fleet.start_time_ns = *start;
    if (fleet.jobs < 1 || fleet.gpus_per_job < 1 ||
        fleet.duration <= absl::ZeroDuration()) {
      return UsageError(
          "--jobs, --gpus-per-job and --duration must be positive");
    }
  } else if (!watch.dir.empty()) {
    if (!files.empty()) return UsageError("--watch takes no FILE arguments");
    if (brokers == "embedded") {
      return UsageError("--watch needs a real broker, not 'embedded'");
    }
    if (!truth_path.empty()) return UsageError("--truth needs --synthetic");
    watch.job = job;
    watch.rank = rank;
    watch.host = host.empty() ? LocalHostName() : host;
    watch.batching.max_events = batch_events;
    watch.split_ranks = split_ranks;
    watch.timeout = timeout;
    KafkaConfig config(brokers);
    if (absl::Status st = config.SetAssignments(properties); !st.ok()) {
      return UsageError(st.message());
    }
    EventProducerOptions producer_options;
    producer_options.topic = topic;
    producer_options.delivery_timeout = timeout;
    producer_options.linger = linger;
    return RunProduceWatch(watch, std::move(config), producer_options);
  } else {
    if (files.empty()) return UsageError("no FILE to send (or --synthetic)");
    if (job.empty()) return UsageError("--job is required with FILEs");
    if (!truth_path.empty()) return UsageError("--truth needs --synthetic");
  }

  // Input first: a bad file is exit 3 before anything is sent.
  BatchingOptions batching;
  batching.max_events = batch_events;
  if (*speed > 0) {
    batching.max_span_ns =
        static_cast<int64_t>(absl::ToDoubleNanoseconds(linger) * *speed);
  }
  std::vector<std::unique_ptr<BatchedTrace>> streams;
  if (synthetic) {
    const absl::Time begin = absl::Now();
    absl::StatusOr<std::vector<SyntheticJob>> jobs =
        GenerateSyntheticFleet(fleet);
    if (!jobs.ok()) return UsageError(jobs.status().message());
    if (!truth_path.empty()) {
      if (absl::Status st = WriteSyntheticTruthFile(*jobs, truth_path);
          !st.ok()) {
        return Fail(kExitFailure, st.message());
      }
    }
    for (SyntheticJob& j : *jobs) {
      for (Trace& rank_trace : j.ranks) {
        const BatchHeader identity = TraceIdentity(rank_trace);
        streams.push_back(std::make_unique<BatchedTrace>(std::move(rank_trace),
                                                         identity, batching));
      }
    }
    spdlog::info("generated and batched the synthetic fleet in {}",
                 absl::FormatDuration(absl::Now() - begin));
  } else {
    for (const std::string& path : files) {
      absl::StatusOr<Trace> trace = ReadTraceFile(path);
      if (!trace.ok()) {
        return Fail(kExitBadInput,
                    absl::StrCat(path, ": ", trace.status().message()));
      }
      if (trace->source_format == "inspector") {
        // docs/analyze.md#inspector-logs: a job's logs are read together.
        return Fail(kExitBadInput,
                    absl::StrCat(path,
                                 ": an NCCL Inspector log: produce does not "
                                 "send these yet; analyze reads a job's logs "
                                 "together"));
      }
      BatchHeader identity;
      identity.job = job;
      identity.rank = rank >= 0 ? rank : trace->rank;
      identity.world_size = trace->world_size;
      // The host is the clock domain of the job's ranks
      // (docs/semantics.md#clocks): the trace's own host name when it has
      // one, so ranks of several machines uploaded from one keep their
      // machines' clocks apart. A rank of a multi-rank job that names no
      // host was exported wherever it ran, not necessarily here: it is
      // sent without one, a clock domain of its own, as `analyze` takes
      // such a file.
      const bool rank_of_a_job =
          identity.rank > 0 || (identity.rank == 0 && identity.world_size > 1);
      identity.host = !host.empty()          ? host
                      : !trace->host.empty() ? trace->host
                      : rank_of_a_job        ? ""
                                             : LocalHostName();
      streams.push_back(std::make_unique<BatchedTrace>(*std::move(trace),
                                                       identity, batching));
    }
  }

  std::unique_ptr<EmbeddedKafkaCluster> embedded;
  std::string bootstrap = brokers;
  if (brokers == "embedded") {
    absl::StatusOr<std::unique_ptr<EmbeddedKafkaCluster>> cluster =
        EmbeddedKafkaCluster::Create();
    if (!cluster.ok()) return Fail(kExitFailure, cluster.status().message());
    embedded = *std::move(cluster);
    if (absl::Status st = embedded->CreateTopic(topic, /*partitions=*/4);
        !st.ok()) {
      return Fail(kExitFailure, st.message());
    }
    bootstrap = embedded->bootstrap_servers();
  }
  KafkaConfig config(bootstrap);
  if (absl::Status st = config.SetAssignments(properties); !st.ok()) {
    return UsageError(st.message());
  }

  EventProducerOptions producer_options;
  producer_options.topic = topic;
  producer_options.delivery_timeout = timeout;
  producer_options.linger = linger;
  absl::StatusOr<std::unique_ptr<EventProducer>> producer =
      EventProducer::Create(config, producer_options);
  if (!producer.ok()) return UsageError(producer.status().message());
  if (absl::Status st = (*producer)->WaitUntilReachable(timeout); !st.ok()) {
    PrintSummary((*producer)->stats(), topic, absl::ZeroDuration());
    return Fail(kExitFailure, st.message());
  }

  std::vector<BatchedTrace*> stream_ptrs;
  for (auto& s : streams) stream_ptrs.push_back(s.get());
  ReplayOptions replay;
  replay.speed = *speed;
  replay.end_markers = !no_end_marker;
  replay.split_ranks = split_ranks;
  const bool terminal = isatty(STDERR_FILENO) == 1;
  if (terminal) replay.progress = &PrintProgress;
  const absl::Time begin = absl::Now();
  absl::Status sent = ReplayTraces(stream_ptrs, producer->get(), replay);
  // Flush even after a send error, so the summary counts what got through.
  absl::Status flushed = (*producer)->Flush(
      sent.ok() ? timeout + absl::Seconds(5) : absl::Seconds(5));
  const absl::Duration elapsed = absl::Now() - begin;
  if (terminal) std::fputs("\r\033[K", stderr);
  PrintSummary((*producer)->stats(), topic, elapsed);
  if (!sent.ok()) return Fail(kExitFailure, sent.message());
  if (!flushed.ok()) return Fail(kExitFailure, flushed.message());
  return kExitOk;
}

}  // namespace bubblewatch
