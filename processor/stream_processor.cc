#include "processor/stream_processor.h"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/text_escape.h"
#include "kafka/kafka_admin.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_handles.h"
#include "kafka/kafka_status.h"
#include "processor/dead_letter.h"
#include "processor/job_state.h"
#include "processor/state_changelog.h"
#include "schemas/event_batch_codec.h"
#include "schemas/window_summary_codec.h"
#include "spdlog/spdlog.h"

namespace bubblewatch {
namespace {

constexpr absl::Duration kRetentionInterval = absl::Minutes(1);
constexpr int kPollTimeoutMs = 100;
// How often jobs past job_expiry are looked for, and how often a job whose
// hosts stay skewed is warned about again.
constexpr absl::Duration kJobExpiryInterval = absl::Minutes(1);
constexpr absl::Duration kSkewWarningInterval = absl::Minutes(10);
// While the broker is unreachable: how often it is probed, and how long a
// probe waits.
constexpr absl::Duration kProbeInterval = absl::Seconds(1);
constexpr int kProbeTimeoutMs = 500;
// A flush that waits longer than this means the broker is unreachable.
constexpr absl::Duration kSlowFlush = absl::Seconds(2);
// Once asked to stop, how long a flush still waits for acknowledgements.
constexpr absl::Duration kFlushOnStop = absl::Seconds(30);

// Consumer errors that mean the broker cannot be reached right now. One
// connection failing (RD_KAFKA_RESP_ERR__TRANSPORT) is not enough: brokers
// close idle connections, and with several brokers the others still serve
// (a partition whose leader died waits for the election, seconds, well
// within an idle timeout).
bool IsBrokerUnreachable(rd_kafka_resp_err_t err) {
  return err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN;
}

// Text of librdkafka 2.0's own diagnosis of a security.protocol mismatch, in
// a transport error (RD_KAFKA_RESP_ERR__TRANSPORT): a PLAINTEXT client whose
// first request a TLS listener dropped, or a TLS handshake a PLAINTEXT
// listener dropped. A broker that is merely down refuses the connection
// instead ("Connection refused").
bool IsProtocolMismatch(absl::string_view reason) {
  return absl::StrContains(reason,
                           "might be caused by incorrect security.protocol") ||
         absl::StrContains(reason, "connecting to a PLAINTEXT broker listener");
}

// True for a "key=value" whose key only a consumer understands.
bool IsConsumerOnlyProperty(absl::string_view assignment) {
  absl::string_view key = assignment.substr(0, assignment.find('='));
  for (absl::string_view prefix :
       {"group.", "session.timeout.ms", "heartbeat.interval.ms",
        "auto.offset.reset", "enable.auto.", "auto.commit.", "fetch.",
        "max.poll.interval.ms", "partition.assignment.strategy",
        "isolation.level", "queued.", "check.crcs"}) {
    if (absl::StartsWith(key, prefix)) return true;
  }
  return false;
}

}  // namespace

class StreamProcessor::Impl {
 public:
  Impl(const StreamProcessorOptions& options, WindowStore* store)
      : options_(options), store_(store) {}
  // Closes the consumer while every member is still alive: closing runs the
  // rebalance callback (OnRevoke), which uses jobs_ and partitions_. Left to
  // the members' destructors, consumer_ (declared first) would close after
  // those maps were destroyed: a double free whenever Run returned an error.
  ~Impl() {
    if (consumer_ != nullptr && !consumer_closed_) {
      rd_kafka_consumer_close(consumer_.get());
      consumer_closed_ = true;
    }
  }

  absl::Status Init();
  absl::Status Run(const std::atomic<bool>& stop);
  ProcessorStats stats() const {
    absl::MutexLock lock(&stats_mu_);
    return stats_;
  }

 private:
  struct PartitionState {
    int64_t committed_position = 0;  // From the store at assignment.
    int64_t next_offset = -1;        // After the last message seen.
    bool at_end = false;  // Reached the partition's end since the last one.
    // The state of every job of this partition as of the last commit (and
    // of the snapshot it was restored from): what the snapshots hold.
    JobStates jobs;
    // Offsets rejected by a limit at or after the resume offset, and the
    // partition's event-time clock (partition_limits.h).
    LimitLedger ledger;
    int64_t resume_offset = 0;  // Of the last commit.
    // When a new job at the limit last looked for expired jobs.
    absl::Time last_expiry_pass = absl::InfinitePast();
    bool changed = false;  // Since the last snapshot written.
  };
  struct JobEntry {
    std::unique_ptr<JobWindower> windower;  // Null once closed for idleness.
    JobState state;
    int32_t partition = 0;
    int64_t last_event_ns = 0;
    int64_t last_offset = -1;  // Of the last batch added.
    bool dirty = false;
    // A skew warning was logged (at that time) and has not cleared yet.
    bool skew_warned = false;
    absl::Time skew_warned_at = absl::InfinitePast();
    // While replaying: producer id -> highest sequence replayed so far.
    absl::flat_hash_map<uint64_t, uint64_t> replayed_sequences;
  };

  static void RebalanceCallback(rd_kafka_t* rk, rd_kafka_resp_err_t err,
                                rd_kafka_topic_partition_list_t* partitions,
                                void* opaque);
  static void DeliveryCallback(rd_kafka_t* rk,
                               const rd_kafka_message_t* message, void* opaque);
  // The consumer's client-level errors (served by rd_kafka_consumer_poll, on
  // Run's thread): logged as librdkafka logs them without a callback; an
  // unreachable broker starts an outage (NoteBrokerDown); a fatal error,
  // and a refused connection at startup (StartupRefusal), stop Run.
  static void ErrorCallback(rd_kafka_t* rk, int err, const char* reason,
                            void* opaque);
  // Until the broker first accepted the consumer (reached_broker_), an
  // error that says it never will with this configuration: authentication,
  // SASL or SSL failures (KafkaErrorCode kUnauthenticated), or librdkafka's
  // security.protocol mismatch diagnosis, reported a second time (the retry
  // failed alike). Returns the error Run stops with, else OK. Later, the
  // same errors are an outage: a broker restarting mid-handshake, or
  // credentials being rotated, must not stop the processor.
  absl::Status StartupRefusal(rd_kafka_resp_err_t err,
                              absl::string_view reason);
  void OnAssign(rd_kafka_topic_partition_list_t* partitions);
  void OnRevoke(rd_kafka_topic_partition_list_t* partitions);
  // Picks the newer of the local and the changelog snapshot of `tp`, sets
  // tp.offset to its resume offset and fills `state`.
  absl::Status RestorePartition(rd_kafka_topic_partition_t& tp,
                                PartitionState& state);
  // Waits until everything produced (windows, dead letters, snapshots) is
  // acknowledged, then commits the group offsets of the last Commit.
  // `sync`: wait for the broker's answer (revocation, shutdown).
  absl::Status FlushAndCommitOffsets(bool sync = false);

  absl::Status HandleMessage(const rd_kafka_message_t& message, absl::Time now);
  // Sends a batch over a limit to the DLQ and records the decision in its
  // partition's ledger, so that a replay decides the same.
  void RejectForLimit(const rd_kafka_message_t& message, PartitionState& part,
                      const BatchRejection& rejection,
                      const BatchHeader& header);
  // Jobs `part` tracks (its snapshot's jobs).
  static int64_t TrackedJobs(const PartitionState& part) {
    return static_cast<int64_t>(part.jobs.size());
  }
  // Forgets the jobs of `part` past options_.job_expiry that have no open
  // window and no batch at or after `resume_offset`.
  void ForgetExpiredJobs(PartitionState& part, int64_t resume_offset);
  // Measures the host skew of `job` (its windows just closed), logs a
  // warning when it is over options_.skew_warning and updates the stats.
  void NoteHostSkew(const std::string& name, JobEntry& job, absl::Time now);
  // True if `header`'s batch was already counted (see the definition).
  static bool IsDuplicateBatch(JobEntry& job, const BatchHeader& header,
                               bool replay);
  // Forgets the producers of `state` whose newest event lies more than
  // options_.producer_expiry behind its finalized edge.
  void ForgetOldProducers(JobState& state);
  // Produces `letter` to the DLQ with `fallback` (its minimal form, freed by
  // the delivery report) as the message opaque. False, with `error`, when
  // librdkafka refuses it at once.
  bool ProduceDeadLetter(const DeadLetter& letter,
                         std::unique_ptr<DeadLetter> fallback,
                         rd_kafka_resp_err_t* error);
  // A dead letter was refused: see the definition.
  void DeadLetterFailed(const rd_kafka_message_t& message,
                        std::unique_ptr<DeadLetter> minimal);
  // Sends the bounded dead letter of `message` (dead_letter.h).
  // `source`: the batch's header when it decoded, for per-source counts.
  void SendToDeadLetters(const rd_kafka_message_t& message,
                         absl::string_view reason, absl::string_view detail,
                         const BatchHeader* source = nullptr);
  absl::StatusOr<JobEntry*> GetOrLoadJob(const std::string& job,
                                         int32_t partition);
  void CloseIdleJobs(absl::Time now);
  // True when every assigned partition has been read to its end and the
  // broker is reachable.
  bool CaughtUp() const;
  // Broker outages. Silence while the broker cannot be reached says nothing
  // about the jobs: the consumer counts as not caught up (no job or host is
  // idle) from `since` until a probe (ProbeBroker) reaches the broker again;
  // then every idle period starts afresh, so that producers have a whole
  // idle timeout to reconnect and resend what they buffered.
  void NoteBrokerDown(absl::Time since, absl::string_view why);
  void ProbeBroker(absl::Time now);
  // How long a host may be silent before it stops holding its job's
  // watermark back: the idle timeout when caught up, else forever.
  absl::Duration HostIdle() const;
  absl::Status Commit(absl::Time now);
  absl::Status AddLateUpdates(StoreBatch& batch);
  void LogProgress();

  StreamProcessorOptions options_;
  WindowStore* store_;
  RdKafkaPtr consumer_;
  bool consumer_closed_ = false;
  RdKafkaPtr producer_;
  std::unique_ptr<StateChangelog> changelog_;  // Null without --state-topic.
  bool changelog_prepared_ = false;
  // The changelog was created by this assignment round: nothing to read.
  bool changelog_created_now_ = false;
  // Offsets of the last store commit, committed to the group once that
  // commit's snapshots are acknowledged (the next flush).
  RdKafkaPartitionListPtr pending_group_offsets_;
  absl::Status fatal_;  // Set by callbacks; Run returns it.
  // The broker has accepted the consumer: a message, an end of partition or
  // an assignment (which takes a group join) came back.
  bool reached_broker_ = false;
  int protocol_mismatches_ = 0;              // Seen before reached_broker_.
  const std::atomic<bool>* stop_ = nullptr;  // Run's, while it runs.
  bool broker_down_ = false;                 // See NoteBrokerDown.
  absl::Time broker_down_since_;
  absl::Time last_probe_ = absl::InfinitePast();
  // The first failed store write; once set, Commit writes nothing more.
  absl::Status store_failed_;

  absl::flat_hash_map<int32_t, PartitionState> partitions_;
  absl::flat_hash_map<std::string, JobEntry> jobs_;
  std::vector<WindowSummary> pending_windows_;
  // (job, window start) -> late events not yet written.
  absl::flat_hash_map<std::pair<std::string, int64_t>, int64_t> pending_late_;
  bool uncommitted_ = false;
  int64_t undelivered_ = 0;
  // Wall time of the first message and after the last one handled, for the
  // throughput figure in the progress line.
  absl::Time first_message_ = absl::InfinitePast();
  absl::Time last_handled_ = absl::InfinitePast();
  absl::Time last_job_expiry_ = absl::Now();
  // For --exit-when-idle: the last message, or the last event that makes a
  // silence start afresh (an assignment, whose replay has not begun yet; the
  // broker coming back after an outage).
  absl::Time last_message_ = absl::Now();

  mutable absl::Mutex stats_mu_;
  ProcessorStats stats_ ABSL_GUARDED_BY(stats_mu_);
};

absl::Status StreamProcessor::Impl::Init() {
  KafkaConfig consumer_config(options_.brokers);
  RETURN_IF_ERROR(consumer_config.SetAssignments(options_.kafka_properties));
  consumer_config.Set("group.id", options_.group);
  RETURN_IF_ERROR(consumer_config.Require("enable.auto.commit", "false"));
  consumer_config.SetDefault("enable.auto.offset.store", "false");
  consumer_config.SetDefault("auto.offset.reset", "earliest");
  // End-of-partition events tell when the consumer has caught up: idle
  // timeouts only apply then.
  RETURN_IF_ERROR(consumer_config.Require("enable.partition.eof", "true"));
  consumer_config.SetDefault("partition.assignment.strategy",
                             "cooperative-sticky");
  // Work between polls is bounded (one message, one commit), so the default
  // poll interval is ample; keep it explicit for operators.
  consumer_config.SetDefault("max.poll.interval.ms", "300000");
  // librdkafka prefetches up to 64 MiB per partition by default, which a
  // long backlog fills: memory that grows with lag, not with open windows.
  // 16 MiB is still a third of a second at 1 M events/s.
  consumer_config.SetDefault("queued.max.messages.kbytes", "16384");
  ASSIGN_OR_RETURN(RdKafkaConfPtr conf, consumer_config.Build());
  rd_kafka_conf_set_rebalance_cb(conf.get(), &Impl::RebalanceCallback);
  rd_kafka_conf_set_error_cb(conf.get(), &Impl::ErrorCallback);
  rd_kafka_conf_set_opaque(conf.get(), this);
  ASSIGN_OR_RETURN(consumer_,
                   NewKafkaClient(RD_KAFKA_CONSUMER, std::move(conf)));
  rd_kafka_poll_set_consumer(consumer_.get());

  KafkaConfig producer_config(options_.brokers);
  // -X applies to both clients (SASL/SSL settings are shared); consumer-only
  // keys are left out of the producer's, where librdkafka would warn.
  for (const std::string& assignment : options_.kafka_properties) {
    if (!IsConsumerOnlyProperty(assignment)) {
      RETURN_IF_ERROR(producer_config.SetAssignment(assignment));
    }
  }
  producer_config.SetDefault("enable.idempotence", "true");
  producer_config.SetDefault("acks", "all");
  producer_config.SetDefault("partitioner", "murmur2_random");
  producer_config.SetDefault("compression.type", "lz4");
  ASSIGN_OR_RETURN(RdKafkaConfPtr pconf, producer_config.Build());
  rd_kafka_conf_set_dr_msg_cb(pconf.get(), &Impl::DeliveryCallback);
  rd_kafka_conf_set_opaque(pconf.get(), this);
  ASSIGN_OR_RETURN(producer_,
                   NewKafkaClient(RD_KAFKA_PRODUCER, std::move(pconf)));
  if (!options_.state_topic.empty()) {
    KafkaConfig reader_config(options_.brokers);
    // The restore consumer joins no group: group settings (static
    // membership among them) are the main consumer's only.
    for (const std::string& assignment : options_.kafka_properties) {
      if (!absl::StartsWith(assignment, "group.")) {
        RETURN_IF_ERROR(reader_config.SetAssignment(assignment));
      }
    }
    ASSIGN_OR_RETURN(changelog_,
                     StateChangelog::Create(reader_config, options_.state_topic,
                                            producer_.get()));
  }

  RdKafkaPartitionListPtr topics(rd_kafka_topic_partition_list_new(1));
  rd_kafka_topic_partition_list_add(topics.get(), options_.topic.c_str(),
                                    RD_KAFKA_PARTITION_UA);
  return KafkaErrorToStatus(rd_kafka_subscribe(consumer_.get(), topics.get()),
                            absl::StrCat("subscribing to ", options_.topic));
}

void StreamProcessor::Impl::RebalanceCallback(
    rd_kafka_t* rk, rd_kafka_resp_err_t err,
    rd_kafka_topic_partition_list_t* partitions, void* opaque) {
  Impl* self = static_cast<Impl*>(opaque);
  bool cooperative =
      std::string_view(rd_kafka_rebalance_protocol(rk)) == "COOPERATIVE";
  if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
    self->OnAssign(partitions);
    if (cooperative) {
      RdKafkaErrorPtr error(rd_kafka_incremental_assign(rk, partitions));
      if (error) self->fatal_ = KafkaErrorToStatus(error.get(), "assigning");
    } else {
      rd_kafka_assign(rk, partitions);
    }
  } else {
    self->OnRevoke(partitions);
    if (cooperative) {
      RdKafkaErrorPtr error(rd_kafka_incremental_unassign(rk, partitions));
      if (error) self->fatal_ = KafkaErrorToStatus(error.get(), "unassigning");
    } else {
      rd_kafka_assign(rk, nullptr);
    }
  }
}

void StreamProcessor::Impl::OnAssign(
    rd_kafka_topic_partition_list_t* partitions) {
  reached_broker_ = true;
  last_message_ = absl::Now();
  for (int i = 0; i < partitions->cnt; ++i) {
    rd_kafka_topic_partition_t& tp = partitions->elems[i];
    PartitionState state;
    if (absl::Status s = RestorePartition(tp, state); !s.ok()) {
      fatal_ = s;
      continue;
    }
    partitions_[tp.partition] = std::move(state);
  }
  changelog_created_now_ = false;
}

absl::Status StreamProcessor::Impl::RestorePartition(
    rd_kafka_topic_partition_t& tp, PartitionState& state) {
  ASSIGN_OR_RETURN(std::optional<PartitionProgress> local,
                   store_->Progress(tp.topic, tp.partition));
  std::optional<PartitionSnapshot> remote;
  if (changelog_) {
    if (!changelog_prepared_) {
      ASSIGN_OR_RETURN(int partitions,
                       TopicPartitionCount(consumer_.get(), options_.topic,
                                           absl::Seconds(15)));
      ASSIGN_OR_RETURN(changelog_created_now_, changelog_->Prepare(partitions));
      changelog_prepared_ = true;
    }
    if (!changelog_created_now_) {
      ASSIGN_OR_RETURN(remote, changelog_->ReadLatest(tp.topic, tp.partition));
    }
  }
  // Both are consistent snapshots (progress + job states of one commit);
  // the newer one is the one that processed more. On a tie the local one is
  // as good and saves nothing but a decode.
  const char* source = "none (group offset)";
  if (remote &&
      (!local || remote->committed_position > local->committed_position)) {
    tp.offset = remote->resume_offset;
    state.committed_position = remote->committed_position;
    state.jobs = std::move(remote->jobs);
    state.ledger = std::move(remote->ledger);
    source = "changelog";
    absl::MutexLock lock(&stats_mu_);
    ++stats_.state_restores;
  } else if (local) {
    // Resume where an open window still needs data; what lies below the
    // committed position is replay.
    tp.offset = local->resume_offset;
    state.committed_position = local->committed_position;
    if (!local->state.empty()) {
      ASSIGN_OR_RETURN(PartitionSnapshot stored,
                       DecodeStoredPartitionState(local->state));
      state.jobs = std::move(stored.jobs);
      state.ledger = std::move(stored.ledger);
    }
    source = "local store";
  }
  state.resume_offset = tp.offset;
  spdlog::info(
      "assigned {}/{}: state from {} ({} jobs, {} limit rejections to "
      "replay), resume at {}, replay below {}",
      tp.topic, tp.partition, source, TrackedJobs(state),
      state.ledger.rejections(), tp.offset, state.committed_position);
  return absl::OkStatus();
}

void StreamProcessor::Impl::OnRevoke(
    rd_kafka_topic_partition_list_t* partitions) {
  // Everything final is already in the store with its progress; open
  // windows are rebuilt by the next owner from the stored resume offset.
  absl::Status s = Commit(absl::Now());
  // The next owner reads the changelog: it must hold this last snapshot.
  if (s.ok()) s = FlushAndCommitOffsets(/*sync=*/true);
  if (!s.ok()) fatal_ = s;
  for (int i = 0; i < partitions->cnt; ++i) {
    int32_t p = partitions->elems[i].partition;
    spdlog::info("revoked {}/{}", partitions->elems[i].topic, p);
    partitions_.erase(p);
    absl::erase_if(jobs_, [&](const auto& kv) {
      if (kv.second.partition != p) return false;
      absl::MutexLock lock(&stats_mu_);
      stats_.host_skew.erase(kv.first);
      return true;
    });
  }
}

void StreamProcessor::Impl::ErrorCallback(rd_kafka_t* rk, int err,
                                          const char* reason, void* opaque) {
  Impl* self = static_cast<Impl*>(opaque);
  // Run stops with the first failure; what follows it is noise.
  if (!self->fatal_.ok()) return;
  const auto code = static_cast<rd_kafka_resp_err_t>(err);
  if (code == RD_KAFKA_RESP_ERR__FATAL) {
    char fatal[512];
    const rd_kafka_resp_err_t original =
        rd_kafka_fatal_error(rk, fatal, sizeof(fatal));
    self->fatal_ = KafkaErrorToStatus(
        original,
        absl::StrCat("consumer failed for good: ", RedactKafkaSecrets(fatal)));
    return;
  }
  // librdkafka's reason is free text that may quote a property's value.
  const std::string why = RedactKafkaSecrets(reason);
  if (absl::Status refused = self->StartupRefusal(code, why); !refused.ok()) {
    self->fatal_ = refused;  // Run's error line says it all.
    return;
  }
  spdlog::warn("librdkafka {} ERROR: {}", rd_kafka_name(rk), why);
  if (IsBrokerUnreachable(code)) {
    self->NoteBrokerDown(absl::Now(), rd_kafka_err2str(code));
  }
}

absl::Status StreamProcessor::Impl::StartupRefusal(rd_kafka_resp_err_t err,
                                                   absl::string_view reason) {
  if (reached_broker_) return absl::OkStatus();
  const bool unauthenticated =
      KafkaErrorCode(err) == absl::StatusCode::kUnauthenticated;
  if (!unauthenticated) {
    // One drop in the handshake may be a broker restarting at that moment;
    // the same drop on the reconnect (librdkafka reports it again within
    // about a second) is the configuration.
    if (err != RD_KAFKA_RESP_ERR__TRANSPORT || !IsProtocolMismatch(reason) ||
        ++protocol_mismatches_ < 2) {
      return absl::OkStatus();
    }
  }
  return absl::Status(
      unauthenticated ? absl::StatusCode::kUnauthenticated
                      : absl::StatusCode::kFailedPrecondition,
      absl::StrCat("the Kafka broker refused the connection at startup (",
                   rd_kafka_err2name(err), "): ", reason,
                   "; check -X security.protocol and the sasl.*/ssl.* "
                   "properties against the broker's listener"));
}

void StreamProcessor::Impl::DeliveryCallback(rd_kafka_t*,
                                             const rd_kafka_message_t* message,
                                             void* opaque) {
  Impl* self = static_cast<Impl*>(opaque);
  --self->undelivered_;
  // Dead letters carry their minimal form; nothing else has a message opaque.
  std::unique_ptr<DeadLetter> minimal(
      static_cast<DeadLetter*>(message->_private));
  if (message->err == RD_KAFKA_RESP_ERR_NO_ERROR) return;
  if (minimal != nullptr) {
    self->DeadLetterFailed(*message, std::move(minimal));
    return;
  }
  self->fatal_ = KafkaErrorToStatus(
      message->err,
      absl::StrCat("delivering to ", rd_kafka_topic_name(message->rkt)));
}

bool StreamProcessor::Impl::ProduceDeadLetter(
    const DeadLetter& letter, std::unique_ptr<DeadLetter> fallback,
    rd_kafka_resp_err_t* error) {
  rd_kafka_headers_t* headers =
      rd_kafka_headers_new(static_cast<int>(letter.headers.size()));
  for (const auto& [name, value] : letter.headers) {
    rd_kafka_header_add(headers, name.data(), static_cast<ssize_t>(name.size()),
                        value.data(), static_cast<ssize_t>(value.size()));
  }
  ++undelivered_;
  rd_kafka_resp_err_t err = rd_kafka_producev(
      producer_.get(), RD_KAFKA_V_TOPIC(options_.dlq_topic.c_str()),
      RD_KAFKA_V_KEY(letter.key.data(), letter.key.size()),
      RD_KAFKA_V_VALUE(const_cast<char*>(letter.payload.data()),
                       letter.payload.size()),
      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(headers),
      RD_KAFKA_V_OPAQUE(fallback.get()), RD_KAFKA_V_END);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    --undelivered_;
    rd_kafka_headers_destroy(headers);  // Owned by librdkafka only on success.
    *error = err;
    return false;
  }
  fallback.release();  // The delivery report frees it.
  return true;
}

// The bounded form did not fit the topic (its max.message.bytes is lower
// than the broker's default), or was refused for good: the minimal form
// goes instead, and the consumer moves on once that one is acknowledged.
// If even that is refused, the loss is logged and counted, never fatal: a
// dead-letter topic the processor cannot write to must not stop the fleet.
// Errors that mean the broker is away (a timed-out message) stay fatal, as
// for windows and snapshots: the offsets must not move past an
// unacknowledged dead letter, and a restart retries it.
void StreamProcessor::Impl::DeadLetterFailed(
    const rd_kafka_message_t& message, std::unique_ptr<DeadLetter> minimal) {
  const rd_kafka_resp_err_t err = message.err;
  const bool refused = err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ||
                       err == RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE ||
                       err == RD_KAFKA_RESP_ERR_INVALID_RECORD ||
                       err == RD_KAFKA_RESP_ERR_INVALID_MSG ||
                       err == RD_KAFKA_RESP_ERR_POLICY_VIOLATION;
  if (!refused) {
    fatal_ = KafkaErrorToStatus(err, "delivering to the dead-letter topic");
    return;
  }
  if (!minimal->headers.empty()) {
    spdlog::warn("{} refused a dead letter ({}); sending its minimal form",
                 options_.dlq_topic, rd_kafka_err2str(err));
    DeadLetter retry = std::move(*minimal);
    rd_kafka_resp_err_t produce_err = RD_KAFKA_RESP_ERR_NO_ERROR;
    // The minimal form's own fallback is empty: no third try.
    if (ProduceDeadLetter(retry, std::make_unique<DeadLetter>(),
                          &produce_err)) {
      return;
    }
  }
  spdlog::error(
      "{} refused the dead letter of a rejected message even in its minimal "
      "form ({}); counted in bubblewatch_dead_letters_lost_total",
      options_.dlq_topic, rd_kafka_err2str(err));
  absl::MutexLock lock(&stats_mu_);
  ++stats_.dead_letters_lost;
}

void StreamProcessor::Impl::SendToDeadLetters(const rd_kafka_message_t& message,
                                              absl::string_view reason,
                                              absl::string_view detail,
                                              const BatchHeader* source) {
  RejectedMessage rejected{
      .topic = options_.topic,
      .partition = message.partition,
      .offset = message.offset,
      .key = absl::string_view(static_cast<const char*>(message.key),
                               message.key_len),
      .payload = absl::string_view(static_cast<const char*>(message.payload),
                                   message.len)};
  rd_kafka_headers_t* original = nullptr;
  if (rd_kafka_message_headers(&message, &original) ==
      RD_KAFKA_RESP_ERR_NO_ERROR) {
    const char* name = nullptr;
    const void* value = nullptr;
    size_t size = 0;
    for (size_t i = 0;
         rd_kafka_header_get_all(original, i, &name, &value, &size) ==
         RD_KAFKA_RESP_ERR_NO_ERROR;
         ++i) {
      rejected.headers.emplace_back(
          name, value == nullptr
                    ? std::string()
                    : std::string(static_cast<const char*>(value), size));
    }
  }
  const DeadLetter letter = MakeDeadLetter(rejected, reason, detail);
  auto minimal = std::make_unique<DeadLetter>(
      MakeDeadLetter(rejected, reason, detail, /*minimal=*/true));
  rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
  if (!ProduceDeadLetter(letter, std::move(minimal), &err)) {
    // Refused before sending (e.g. over the producer's message.max.bytes):
    // the minimal form, then the same rules as a refused delivery.
    rd_kafka_message_t refused{};
    refused.err = err;
    DeadLetterFailed(refused, std::make_unique<DeadLetter>(MakeDeadLetter(
                                  rejected, reason, detail, /*minimal=*/true)));
  }
  spdlog::warn(
      "message {}/{}@{} to {}: {}: {}{}", options_.topic, message.partition,
      message.offset, options_.dlq_topic, std::string(reason),
      EscapeForLog(detail.substr(0, 4096)),
      letter.truncated.empty()
          ? ""
          : absl::StrCat(" (dead letter cut: ", letter.truncated, ")"));
  absl::MutexLock lock(&stats_mu_);
  ++stats_.dlq_by_reason[std::string(reason)];
  if (source != nullptr) {
    std::pair<std::string, uint64_t> key(source->job, source->producer_id);
    if (stats_.dlq_by_source.size() >= kMaxDlqSources &&
        !stats_.dlq_by_source.contains(key)) {
      key = {"", 0};
    }
    ++stats_.dlq_by_source[key];
  }
}

absl::StatusOr<StreamProcessor::Impl::JobEntry*>
StreamProcessor::Impl::GetOrLoadJob(const std::string& job, int32_t partition) {
  auto it = jobs_.find(job);
  if (it == jobs_.end()) {
    JobEntry entry;
    entry.partition = partition;
    // The partition's snapshot is the truth (it may come from another
    // instance, and this store may hold an older state of the job from a
    // past ownership); the store's own job record is for jobs no snapshot
    // has seen (stores written before snapshots existed).
    std::optional<std::string> stored;
    if (auto part = partitions_.find(partition); part != partitions_.end()) {
      if (auto it = part->second.jobs.find(job);
          it != part->second.jobs.end()) {
        stored = it->second;
      }
    }
    if (!stored) {
      ASSIGN_OR_RETURN(stored, store_->JobState(job));
    }
    if (stored) {
      ASSIGN_OR_RETURN(entry.state, JobState::Parse(*stored));
    }
    it = jobs_.emplace(job, std::move(entry)).first;
  }
  JobEntry& entry = it->second;
  entry.partition = partition;
  if (!entry.windower) {
    entry.windower = std::make_unique<JobWindower>(job, options_.windower);
    entry.windower->RestoreFinalizedThrough(entry.state.finalized_through_ns);
  }
  return &entry;
}

absl::Status StreamProcessor::Impl::HandleMessage(
    const rd_kafka_message_t& message, absl::Time now) {
  PartitionState& part = partitions_[message.partition];
  part.at_end = false;
  part.changed = true;
  const bool replay = message.offset < part.committed_position;
  part.next_offset = std::max(part.next_offset, message.offset + 1);
  uncommitted_ = true;
  {
    absl::MutexLock lock(&stats_mu_);
    ++stats_.messages;
    if (replay) ++stats_.replayed_messages;
  }
  // Checked before decoding: a huge message is not decoded at all.
  if (std::optional<BatchRejection> too_large =
          CheckBatchBytes(message.len, options_.limits)) {
    if (!replay) {
      SendToDeadLetters(message, too_large->reason, too_large->detail);
    }
    return absl::OkStatus();
  }
  absl::StatusOr<DecodedBatch> batch = DecodeEventBatch(
      {static_cast<const uint8_t*>(message.payload), message.len});
  if (!batch.ok()) {
    // A replayed message went to the DLQ the first time.
    if (!replay) {
      SendToDeadLetters(message, "undecodable", batch.status().message());
    }
    return absl::OkStatus();
  }
  if (std::optional<BatchRejection> rejection =
          ValidateBatch(*batch, options_.limits)) {
    if (!replay) {
      SendToDeadLetters(message, rejection->reason, rejection->detail,
                        &batch->header);
    }
    return absl::OkStatus();
  }
  EscapeUnprintableNames(&*batch);
  const std::string& job_name = batch->header.job;
  // The stateful limits. A replayed batch is decided as it was the first
  // time (its partition's ledger); its dead letter was sent then.
  if (replay) {
    if (part.ledger.WasRejected(message.offset)) return absl::OkStatus();
  } else if (!part.jobs.contains(job_name)) {
    // At the limit, expired jobs make room first (looked for at most once a
    // second: a stream of made-up names must not cost a scan each).
    if (TrackedJobs(part) >= options_.state_limits.max_jobs_per_partition &&
        now - part.last_expiry_pass >= absl::Seconds(1)) {
      part.last_expiry_pass = now;
      ForgetExpiredJobs(part, part.resume_offset);
    }
    if (std::optional<BatchRejection> rejection =
            CheckNewJob(TrackedJobs(part), options_.state_limits)) {
      RejectForLimit(message, part, *rejection, batch->header);
      return absl::OkStatus();
    }
  }
  ASSIGN_OR_RETURN(JobEntry * job, GetOrLoadJob(job_name, message.partition));
  if (!replay) {
    if (std::optional<BatchRejection> rejection = CheckOpenWindows(
            job->windower->OpenWindowsWith(*batch), options_.windower.window_ns,
            options_.state_limits)) {
      RejectForLimit(message, part, *rejection, batch->header);
      // A job whose first batch this was is not tracked: a stream of
      // made-up job names must not grow the job table either.
      if (!part.jobs.contains(job_name)) jobs_.erase(job_name);
      return absl::OkStatus();
    }
  }
  if (!replay) {
    if (std::optional<BatchRejection> rejection =
            CheckSequenceStep(job->state.producer_sequences, batch->header,
                              options_.state_limits)) {
      RejectForLimit(message, part, *rejection, batch->header);
      return absl::OkStatus();
    }
  }
  if (IsDuplicateBatch(*job, batch->header, replay)) {
    if (!replay) {  // A replayed duplicate was counted the first time.
      absl::MutexLock lock(&stats_mu_);
      ++stats_.duplicate_batches;
    }
    return absl::OkStatus();
  }
  int64_t late = job->windower->Add(*batch, message.offset, replay, now);
  for (const auto& [window, count] : job->windower->TakeLateCounts()) {
    pending_late_[{batch->header.job, window}] += count;
  }
  int64_t batch_newest_ns = INT64_MIN;
  for (const GpuActivity& a : batch->trace.gpu) {
    batch_newest_ns = std::max(batch_newest_ns, a.end_ns);
  }
  for (const CpuEvent& e : batch->trace.cpu) {
    batch_newest_ns = std::max(batch_newest_ns, e.end_ns);
  }
  job->last_event_ns = std::max(job->last_event_ns, batch_newest_ns);
  job->last_offset = message.offset;
  if (batch->header.producer_id != 0) {
    job->state.NoteProducerEvents(batch->header.producer_id, batch_newest_ns);
  }
  job->dirty = true;
  part.ledger.NoteEvent(batch_newest_ns);
  std::vector<WindowSummary> done =
      job->windower->FinalizeReady(now, HostIdle());
  job->state.finalized_through_ns = job->windower->finalized_through_ns();
  if (!done.empty()) {
    ForgetOldProducers(job->state);
    NoteHostSkew(job_name, *job, now);
  }
  // Tracked from its first accepted batch (the commit writes its state).
  if (!part.jobs.contains(job_name)) {
    part.jobs.emplace(job_name, job->state.Serialize());
  }
  {
    absl::MutexLock lock(&stats_mu_);
    stats_.events +=
        static_cast<int64_t>(batch->trace.gpu.size() + batch->trace.cpu.size());
    stats_.late_events += late;
  }
  for (WindowSummary& w : done) pending_windows_.push_back(std::move(w));
  return absl::OkStatus();
}

void StreamProcessor::Impl::RejectForLimit(const rd_kafka_message_t& message,
                                           PartitionState& part,
                                           const BatchRejection& rejection,
                                           const BatchHeader& header) {
  part.ledger.RecordRejection(message.offset);
  SendToDeadLetters(message, rejection.reason, rejection.detail, &header);
}

void StreamProcessor::Impl::ForgetExpiredJobs(PartitionState& part,
                                              int64_t resume_offset) {
  // While replaying, jobs with batches ahead are not loaded yet.
  if (part.next_offset < part.committed_position) return;
  const int64_t clock = part.ledger.newest_event_ns();
  const int64_t expiry = absl::ToInt64Nanoseconds(options_.job_expiry);
  if (clock == INT64_MIN || clock < INT64_MIN + expiry) return;
  const int64_t cutoff = clock - expiry;
  int64_t forgotten = 0;
  for (auto it = part.jobs.begin(); it != part.jobs.end();) {
    auto live = jobs_.find(it->first);
    // Open windows, or a batch a replay from the resume offset would read:
    // the job's state is still needed.
    // (A dirty one was closed since the last commit: its newest state is
    // not in the table yet.)
    if (live != jobs_.end() &&
        (live->second.windower != nullptr || live->second.dirty ||
         live->second.last_offset >= resume_offset)) {
      ++it;
      continue;
    }
    absl::StatusOr<JobState> state = JobState::Parse(it->second);
    if (!state.ok() || state->NewestEventNs() >= cutoff) {
      ++it;
      continue;
    }
    spdlog::info(
        "job {} forgotten: its newest event is more than {} behind "
        "its partition's",
        it->first, absl::FormatDuration(options_.job_expiry));
    if (live != jobs_.end()) jobs_.erase(live);
    it = part.jobs.erase(it);
    ++forgotten;
  }
  if (forgotten > 0) {
    part.changed = true;
    absl::MutexLock lock(&stats_mu_);
    stats_.jobs_forgotten += forgotten;
  }
}

void StreamProcessor::Impl::NoteHostSkew(const std::string& name, JobEntry& job,
                                         absl::Time now) {
  const int64_t threshold = absl::ToInt64Nanoseconds(options_.skew_warning);
  if (threshold <= 0) return;
  std::string ahead, behind;
  const int64_t skew =
      job.windower->HostSkewNs(now, HostIdle(), &ahead, &behind);
  const bool above = skew >= threshold;
  if (above &&
      (!job.skew_warned || now - job.skew_warned_at >= kSkewWarningInterval)) {
    const std::string by = absl::FormatDuration(absl::Nanoseconds(skew));
    spdlog::warn(
        "job {}: host {} is {} ahead of host {} in event time (clock skew or "
        "delivery delay); its windows close that much later and hold that "
        "much more of {}'s events (ops/RUNBOOK.md, \"Clock skew\")",
        name, ahead, by, behind, ahead);
    job.skew_warned = true;
    job.skew_warned_at = now;
  } else if (!above && job.skew_warned && skew < threshold / 2) {
    spdlog::info("job {}: host skew back to {}", name,
                 absl::FormatDuration(absl::Nanoseconds(skew)));
    job.skew_warned = false;
  }
  absl::MutexLock lock(&stats_mu_);
  if (!above) {
    stats_.host_skew.erase(name);
  } else if (stats_.host_skew.size() < kMaxDlqSources ||
             stats_.host_skew.contains(name)) {
    stats_.host_skew[name] =
        ProcessorStats::HostSkew{.skew_ns = skew,
                                 .ahead = std::move(ahead),
                                 .behind = std::move(behind)};
  }
}

// A batch resent by its producer (same id and sequence, e.g. a watcher that
// resent a file after a crash) counts once. Live, it is checked against the
// highest sequence counted, stored with the job's state. On replay that
// stored sequence covers the whole replayed range (those batches were
// counted before the restart), so a replayed batch is checked against the
// batches replayed before it instead: a resent copy follows its original in
// the partition and was dropped the first time too. (A copy whose original
// lies before the resume offset only holds events of finalized windows,
// which the windower drops on replay.)
bool StreamProcessor::Impl::IsDuplicateBatch(JobEntry& job,
                                             const BatchHeader& header,
                                             bool replay) {
  if (header.producer_id == 0) return false;
  absl::flat_hash_map<uint64_t, uint64_t>& seen =
      replay ? job.replayed_sequences : job.state.producer_sequences;
  auto it = seen.find(header.producer_id);
  if (it != seen.end() && header.sequence <= it->second) return true;
  seen[header.producer_id] = header.sequence;
  return false;
}

// Only when the finalized edge moves, and only by event time, so a replay
// forgets exactly what the first pass forgot.
void StreamProcessor::Impl::ForgetOldProducers(JobState& state) {
  const int64_t expiry = absl::ToInt64Nanoseconds(options_.producer_expiry);
  if (state.finalized_through_ns == INT64_MIN ||
      state.finalized_through_ns < INT64_MIN + expiry) {
    return;
  }
  state.ForgetProducersBefore(state.finalized_through_ns - expiry);
}

bool StreamProcessor::Impl::CaughtUp() const {
  if (partitions_.empty() || broker_down_) return false;
  for (const auto& [p, part] : partitions_) {
    if (!part.at_end) return false;
  }
  return true;
}

void StreamProcessor::Impl::NoteBrokerDown(absl::Time since,
                                           absl::string_view why) {
  if (broker_down_) return;
  broker_down_ = true;
  broker_down_since_ = since;
  last_probe_ = absl::Now();
  spdlog::warn(
      "broker unreachable ({}): no job is closed for idleness until it is "
      "back",
      std::string(why));
}

void StreamProcessor::Impl::ProbeBroker(absl::Time now) {
  if (!broker_down_ || now - last_probe_ < kProbeInterval) return;
  last_probe_ = now;
  // Any partition will do: its leader answering means the broker is back
  // (with several brokers, at least one of them is). With none assigned
  // there is no job to protect.
  if (!partitions_.empty()) {
    int64_t low = 0, high = 0;
    if (rd_kafka_query_watermark_offsets(
            consumer_.get(), options_.topic.c_str(), partitions_.begin()->first,
            &low, &high, kProbeTimeoutMs) != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return;
    }
  }
  broker_down_ = false;
  const absl::Time back = absl::Now();
  last_message_ = back;
  for (auto& [name, job] : jobs_) {
    if (job.windower) job.windower->RestartIdleTimers(back);
  }
  spdlog::warn("broker reachable again after {}; idle timeouts start afresh",
               absl::FormatDuration(absl::Trunc(back - broker_down_since_,
                                                absl::Milliseconds(1))));
}

absl::Duration StreamProcessor::Impl::HostIdle() const {
  // Silence only means something once the consumer has read everything:
  // while it lags, a host's next batch may simply not be read yet.
  return CaughtUp() ? options_.idle_timeout : absl::InfiniteDuration();
}

void StreamProcessor::Impl::CloseIdleJobs(absl::Time now) {
  if (!CaughtUp()) return;
  for (auto& [name, job] : jobs_) {
    if (!job.windower ||
        now - job.windower->last_activity() < options_.idle_timeout) {
      continue;
    }
    for (WindowSummary& w : job.windower->FinalizeAll()) {
      pending_windows_.push_back(std::move(w));
    }
    job.state.finalized_through_ns = job.windower->finalized_through_ns();
    spdlog::info("job {} idle for {}: closed through {}", name,
                 absl::FormatDuration(options_.idle_timeout),
                 job.state.finalized_through_ns);
    job.windower.reset();
    job.dirty = true;
    job.skew_warned = false;
    uncommitted_ = true;
    absl::MutexLock lock(&stats_mu_);
    stats_.host_skew.erase(name);
  }
}

absl::Status StreamProcessor::Impl::AddLateUpdates(StoreBatch& batch) {
  for (const auto& [key, count] : pending_late_) {
    const auto& [job, start] = key;
    WindowSummary* target = nullptr;
    for (WindowSummary& w : batch.windows) {
      if (w.job == job && w.window.start_ns == start) target = &w;
    }
    if (target == nullptr) {
      ASSIGN_OR_RETURN(std::vector<WindowSummary> stored,
                       store_->Scan(job, absl::FromUnixNanos(start),
                                    absl::FromUnixNanos(start + 1)));
      // No stored window (e.g. retention removed it): the job's total in
      // the stats still counts these events.
      if (stored.empty()) continue;
      batch.windows.push_back(std::move(stored.front()));
      target = &batch.windows.back();
    }
    target->late_events += count;
  }
  pending_late_.clear();
  return absl::OkStatus();
}

absl::Status StreamProcessor::Impl::FlushAndCommitOffsets(bool sync) {
  // Waits for the acknowledgements as long as the producer keeps trying
  // (message.timeout.ms, 5 min by default, after which the delivery report
  // fails and sets fatal_): a broker restart is waited out, not fatal. Once
  // asked to stop, it waits kFlushOnStop at most.
  const absl::Time start = absl::Now();
  absl::Time next_warning = start + absl::Seconds(10);
  while (undelivered_ > 0 && fatal_.ok()) {
    rd_kafka_flush(producer_.get(), 1000);
    if (undelivered_ == 0) break;
    const absl::Time now = absl::Now();
    if (now - start >= kSlowFlush) {
      NoteBrokerDown(start, absl::StrCat("no acknowledgement for ",
                                         absl::FormatDuration(kSlowFlush)));
    }
    // Outside Run (the consumer closing in the destructor) counts as
    // stopping.
    const bool stopping = stop_ == nullptr || stop_->load();
    if (stopping && now - start >= kFlushOnStop) {
      return absl::UnavailableError(absl::StrCat(
          undelivered_,
          " dead-letter/window/state messages not acknowledged within ",
          absl::FormatDuration(kFlushOnStop),
          " of stopping; not committing past them"));
    }
    if (now >= next_warning) {
      spdlog::warn(
          "waiting {} for the broker to acknowledge {} dead-letter/window/"
          "state messages (offsets do not move until it does)",
          absl::FormatDuration(absl::Trunc(now - start, absl::Seconds(1))),
          undelivered_);
      next_warning = now + absl::Seconds(10);
    }
  }
  RETURN_IF_ERROR(fatal_);
  if (pending_group_offsets_ && pending_group_offsets_->cnt > 0) {
    // Best effort: with a changelog, a new owner resumes from the snapshot;
    // the group offset only matters to one that finds no snapshot, and it
    // never runs ahead of the acknowledged snapshots.
    rd_kafka_resp_err_t err = rd_kafka_commit(
        consumer_.get(), pending_group_offsets_.get(), /*async=*/sync ? 0 : 1);
    if (sync && err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      spdlog::warn("committing group offsets: {}", rd_kafka_err2str(err));
    }
  }
  pending_group_offsets_.reset();
  return absl::OkStatus();
}

absl::Status StreamProcessor::Impl::Commit(absl::Time now) {
  // After a failed store write nothing more may be written: the failed batch
  // is gone from memory (its windows, its advanced positions), so a later
  // commit, e.g. the one a revocation makes while the consumer closes, would
  // store progress past windows that were never written.
  if (!store_failed_.ok()) return store_failed_;
  const bool observer_wants =
      options_.observer != nullptr && options_.observer->WantsCommit(now);
  if (!uncommitted_ && pending_windows_.empty() && !observer_wants) {
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(fatal_);
  StoreBatch batch;
  batch.windows = std::move(pending_windows_);
  pending_windows_.clear();
  RETURN_IF_ERROR(AddLateUpdates(batch));
  // The order below makes a crash between any two steps harmless:
  //   1. publish this commit's windows;
  //   2. flush: windows, dead letters and the previous commit's snapshots
  //      are acknowledged (a crash before here stores nothing: the windows
  //      are recomputed and published again, identical);
  //   3. commit the previous commit's group offsets (their snapshots are
  //      durable now);
  //   4. store commit: windows + job states + per-partition snapshots, one
  //      RocksDB batch (a crash after it: this instance resumes from it;
  //      another resumes from the older changelog snapshot and replays);
  //   5. write this commit's snapshots to the changelog; their offsets wait
  //      for the next flush.
  if (!options_.windows_topic.empty()) {
    for (const WindowSummary& w : batch.windows) {
      std::string value = EncodeWindowSummary(w);
      ++undelivered_;
      rd_kafka_resp_err_t err = rd_kafka_producev(
          producer_.get(), RD_KAFKA_V_TOPIC(options_.windows_topic.c_str()),
          RD_KAFKA_V_KEY(w.job.data(), w.job.size()),
          RD_KAFKA_V_VALUE(value.data(), value.size()),
          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
      if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        --undelivered_;
        spdlog::warn("cannot publish window of {}: {}", w.job,
                     rd_kafka_err2str(err));
      }
    }
  }
  RETURN_IF_ERROR(FlushAndCommitOffsets());
  absl::flat_hash_map<int32_t, int64_t> resume;
  for (auto& [name, job] : jobs_) {
    if (job.dirty) {
      std::string state = job.state.Serialize();
      if (auto part = partitions_.find(job.partition);
          part != partitions_.end()) {
        part->second.jobs[name] = state;
        part->second.changed = true;
      }
      batch.jobs.push_back(JobUpdate{.job = name,
                                     .last_event_ns = job.last_event_ns,
                                     .last_seen_wall = now,
                                     .state = std::move(state)});
      job.dirty = false;
    }
    if (job.windower) {
      if (std::optional<int64_t> r = job.windower->ResumeOffset()) {
        spdlog::debug("job {} partition {}: resume {} finalized through {}",
                      name, job.partition, *r,
                      job.windower->finalized_through_ns());
        auto [it, inserted] = resume.try_emplace(job.partition, *r);
        if (!inserted) it->second = std::min(it->second, *r);
      }
    }
  }
  const bool expire_jobs = now - last_job_expiry_ >= kJobExpiryInterval;
  if (expire_jobs) last_job_expiry_ = now;
  RdKafkaPartitionListPtr offsets(
      rd_kafka_topic_partition_list_new(static_cast<int>(partitions_.size())));
  for (auto& [p, part] : partitions_) {
    if (part.next_offset < 0) continue;
    PartitionProgress progress;
    progress.topic = options_.topic;
    progress.partition = p;
    auto it = resume.find(p);
    progress.resume_offset = it != resume.end() ? it->second : part.next_offset;
    progress.committed_position =
        std::max(part.committed_position, part.next_offset);
    part.resume_offset = progress.resume_offset;
    if (expire_jobs) ForgetExpiredJobs(part, progress.resume_offset);
    // No replay starts below the resume offset: older decisions are done.
    part.ledger.ForgetBefore(progress.resume_offset);
    progress.state = EncodePartitionSnapshot(
        PartitionSnapshot{.topic = progress.topic,
                          .partition = p,
                          .resume_offset = progress.resume_offset,
                          .committed_position = progress.committed_position,
                          .jobs = part.jobs,
                          .ledger = part.ledger});
    part.committed_position = progress.committed_position;
    rd_kafka_topic_partition_list_add(offsets.get(), options_.topic.c_str(), p)
        ->offset = progress.resume_offset;
    batch.progress.push_back(std::move(progress));
  }
  if (options_.observer != nullptr) {
    RETURN_IF_ERROR(options_.observer->BeforeCommit(now, batch));
  }
  absl::Status written = store_->Commit(batch);
  if (!written.ok()) {
    store_failed_ = absl::Status(
        written.code(), absl::StrCat("cannot write windows to the store, "
                                     "stopping before offsets move: ",
                                     written.message()));
    return store_failed_;
  }
  uncommitted_ = false;
  if (options_.observer != nullptr) options_.observer->AfterCommit(now);
  int64_t snapshots = 0;
  if (changelog_) {
    for (const PartitionProgress& progress : batch.progress) {
      PartitionState& part = partitions_[progress.partition];
      if (!part.changed) continue;
      ++undelivered_;
      absl::Status s = changelog_->Write(
          PartitionSnapshot{.topic = progress.topic,
                            .partition = progress.partition,
                            .resume_offset = progress.resume_offset,
                            .committed_position = progress.committed_position,
                            .jobs = part.jobs,
                            .ledger = part.ledger});
      if (!s.ok()) {
        --undelivered_;
        return s;
      }
      part.changed = false;
      ++snapshots;
    }
  }
  if (offsets->cnt > 0) pending_group_offsets_ = std::move(offsets);
  absl::MutexLock lock(&stats_mu_);
  stats_.windows_written += static_cast<int64_t>(batch.windows.size());
  stats_.state_snapshots_written += snapshots;
  return absl::OkStatus();
}

void StreamProcessor::Impl::LogProgress() {
  int64_t open = 0, buffered = 0;
  for (const auto& [name, job] : jobs_) {
    if (!job.windower) continue;
    ++open;
    buffered += static_cast<int64_t>(job.windower->buffered_events());
  }
  absl::flat_hash_map<std::string, int64_t> lag;
  for (const auto& [p, part] : partitions_) {
    int64_t low = 0, high = 0;
    if (rd_kafka_get_watermark_offsets(consumer_.get(), options_.topic.c_str(),
                                       p, &low,
                                       &high) == RD_KAFKA_RESP_ERR_NO_ERROR &&
        part.next_offset >= 0) {
      lag[absl::StrCat(options_.topic, "/", p)] =
          std::max<int64_t>(0, high - part.next_offset);
    }
  }
  int64_t tracked = 0;
  for (const auto& [p, part] : partitions_) tracked += TrackedJobs(part);
  absl::MutexLock lock(&stats_mu_);
  stats_.open_jobs = open;
  stats_.buffered_events = buffered;
  stats_.tracked_jobs = tracked;
  stats_.lag = lag;
  int64_t dlq = 0;
  for (const auto& [reason, n] : stats_.dlq_by_reason) dlq += n;
  int64_t total_lag = 0;
  for (const auto& [tp, n] : lag) total_lag += n;
  double busy_s = first_message_ == absl::InfinitePast()
                      ? 0.0
                      : absl::ToDoubleSeconds(last_handled_ - first_message_);
  spdlog::info(
      "processed {} messages, {} events ({:.0f} events/s from first to last "
      "message); {} windows written; {} open jobs, {} buffered events; lag "
      "{}; late {}; duplicates {}; DLQ {}",
      stats_.messages, stats_.events,
      busy_s > 0 ? static_cast<double>(stats_.events) / busy_s : 0.0,
      stats_.windows_written, open, buffered, total_lag, stats_.late_events,
      stats_.duplicate_batches, dlq);
}

absl::Status StreamProcessor::Impl::Run(const std::atomic<bool>& stop) {
  spdlog::info("consuming {} from {} as group {}; store {}", options_.topic,
               options_.brokers, options_.group, store_->Describe());
  stop_ = &stop;
  absl::Cleanup forget_stop = [this] { stop_ = nullptr; };
  absl::Time last_commit = absl::Now();
  absl::Time last_log = absl::Now();
  absl::Time last_retention = absl::InfinitePast();
  last_message_ = absl::Now();
  while (!stop.load()) {
    RdKafkaMessagePtr message(
        rd_kafka_consumer_poll(consumer_.get(), kPollTimeoutMs));
    rd_kafka_poll(producer_.get(), 0);  // Serve delivery reports.
    RETURN_IF_ERROR(fatal_);
    absl::Time now = absl::Now();
    if (message) {
      if (message->err == RD_KAFKA_RESP_ERR_NO_ERROR ||
          message->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        reached_broker_ = true;
      }
      if (message->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        last_message_ = now;
        if (first_message_ == absl::InfinitePast()) first_message_ = now;
        RETURN_IF_ERROR(HandleMessage(*message, now));
        last_handled_ = absl::Now();
      } else if (message->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        partitions_[message->partition].at_end = true;
      } else {
        absl::Status s = KafkaErrorToStatus(message->err, "consuming");
        if (rd_kafka_fatal_error(consumer_.get(), nullptr, 0) !=
            RD_KAFKA_RESP_ERR_NO_ERROR) {
          return s;
        }
        RETURN_IF_ERROR(StartupRefusal(message->err, s.message()));
        if (IsBrokerUnreachable(message->err)) {
          NoteBrokerDown(now, rd_kafka_err2str(message->err));
        }
        spdlog::warn("{}", s.ToString());
      }
    }
    ProbeBroker(now);
    CloseIdleJobs(now);
    if (!pending_windows_.empty() ||
        now - last_commit >= options_.commit_interval) {
      RETURN_IF_ERROR(Commit(now));
      last_commit = now;
    }
    if (now - last_retention >= kRetentionInterval) {
      absl::StatusOr<RetentionStats> r =
          store_->ApplyRetention(options_.retention);
      if (!r.ok()) return r.status();
      if (r->windows_deleted > 0) {
        spdlog::info("retention removed {} windows of {} jobs",
                     r->windows_deleted, r->jobs_trimmed);
      }
      last_retention = now;
    }
    if (now - last_log >= options_.log_interval) {
      LogProgress();
      last_log = now;
    }
    // Idle counts only while partitions are assigned (a restarted member may
    // wait for a rebalance before it gets any) and the broker is reachable.
    if (partitions_.empty() || broker_down_) last_message_ = now;
    if (options_.exit_when_idle > absl::ZeroDuration() &&
        now - last_message_ >= options_.exit_when_idle) {
      bool all_closed = std::none_of(
          jobs_.begin(), jobs_.end(),
          [](const auto& kv) { return kv.second.windower != nullptr; });
      if (all_closed) break;
    }
  }
  RETURN_IF_ERROR(Commit(absl::Now()));
  RETURN_IF_ERROR(FlushAndCommitOffsets(/*sync=*/true));
  LogProgress();
  spdlog::info("{}", store_->Describe());
  rd_kafka_consumer_close(consumer_.get());
  consumer_closed_ = true;
  rd_kafka_flush(producer_.get(), 10'000);
  return absl::OkStatus();
}

StreamProcessor::StreamProcessor(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
StreamProcessor::~StreamProcessor() = default;

absl::StatusOr<std::unique_ptr<StreamProcessor>> StreamProcessor::Create(
    const StreamProcessorOptions& options, WindowStore* store) {
  RETURN_IF_ERROR(options.Validate());
  auto impl = std::make_unique<Impl>(options, store);
  RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<StreamProcessor>(new StreamProcessor(std::move(impl)));
}

absl::Status StreamProcessor::Run() { return impl_->Run(stop_); }

ProcessorStats StreamProcessor::stats() const { return impl_->stats(); }

}  // namespace bubblewatch
