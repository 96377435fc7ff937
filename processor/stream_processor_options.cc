// Validation of the processor's options (docs/state.md's sibling concern:
// every problem reported at once). Kept apart from the consumer
// loop in stream_processor.cc.
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/option_problems.h"
#include "processor/batch_validator.h"
#include "processor/job_windower.h"
#include "processor/partition_limits.h"
#include "processor/stream_processor.h"
#include "schemas/trace.h"

namespace bubblewatch {
namespace {

std::string Not(absl::string_view requirement, absl::Duration d) {
  return absl::StrCat(requirement, ", not ", absl::FormatDuration(d));
}

template <typename T>
std::string Not(absl::string_view requirement, T v) {
  return absl::StrCat(requirement, ", not ", v);
}

}  // namespace

void WindowerOptions::AddProblems(OptionProblems p) const {
  p.Check(window_ns > 0 && window_ns <= kMaxWindowNs, "window_ns",
          Not(absl::StrCat("must be within 1 and ", kMaxWindowNs,
                           " ns (146 years)"),
              window_ns));
  p.Check(lateness_ns >= 0, "lateness_ns", Not("must be >= 0", lateness_ns));
  p.Check(max_launch_lead_ns >= 0, "max_launch_lead_ns",
          Not("must be >= 0", max_launch_lead_ns));
  p.Check(top_bubbles_per_window >= 0, "top_bubbles_per_window",
          Not("must be >= 0", top_bubbles_per_window));
}

absl::Status WindowerOptions::Validate() const {
  OptionProblems p("WindowerOptions");
  AddProblems(p);
  return p.ToStatus();
}

void BatchLimits::AddProblems(OptionProblems p) const {
  p.Check(max_event_duration_ns >= 1, "max_event_duration_ns",
          Not("must be >= 1", max_event_duration_ns));
  p.Check(max_batch_time_spread_ns >= 1, "max_batch_time_spread_ns",
          Not("must be >= 1", max_batch_time_spread_ns));
  p.Check(max_events >= 1, "max_events", Not("must be >= 1", max_events));
  p.Check(max_batch_bytes >= 1, "max_batch_bytes",
          Not("must be >= 1", max_batch_bytes));
  p.Check(max_name_bytes >= 1, "max_name_bytes",
          Not("must be >= 1", max_name_bytes));
  p.Check(max_names >= 1, "max_names", Not("must be >= 1", max_names));
  p.Check(max_string_table_bytes >= 1, "max_string_table_bytes",
          Not("must be >= 1", max_string_table_bytes));
}

absl::Status BatchLimits::Validate() const {
  OptionProblems p("BatchLimits");
  AddProblems(p);
  return p.ToStatus();
}

void ProcessorLimits::AddProblems(OptionProblems p) const {
  p.Check(max_open_windows >= 1, "max_open_windows",
          Not("must be >= 1", max_open_windows));
  p.Check(max_jobs_per_partition >= 1, "max_jobs_per_partition",
          Not("must be >= 1", max_jobs_per_partition));
  p.Check(max_sequence_step >= 1, "max_sequence_step",
          Not("must be >= 1", max_sequence_step));
  p.Check(max_job_buffer_events >= 1, "max_job_buffer_events",
          Not("must be >= 1", max_job_buffer_events));
}

absl::Status ProcessorLimits::Validate() const {
  OptionProblems p("ProcessorLimits");
  AddProblems(p);
  return p.ToStatus();
}

absl::Status StreamProcessorOptions::Validate() const {
  OptionProblems p("StreamProcessorOptions");
  p.Check(!brokers.empty(), "brokers", "is required");
  p.Check(!topic.empty(), "topic", "is required");
  // A split unit's parts are its only output: nowhere to put them would
  // lose them (docs/semantics.md#no-silent-loss).
  p.Check(!parts_topic.empty(), "parts_topic", "must not be empty");
  p.Check(!group.empty(), "group", "is required");
  windower.AddProblems(p.Field("windower"));
  limits.AddProblems(p.Field("limits"));
  state_limits.AddProblems(p.Field("state_limits"));
  // A batch that does not fit an empty buffer could not be taken at all.
  p.Check(
      state_limits.max_job_buffer_events >= limits.max_events,
      "state_limits.max_job_buffer_events",
      absl::StrCat("must be at least limits.max_events (", limits.max_events,
                   "), not ", state_limits.max_job_buffer_events));
  const absl::Duration zero = absl::ZeroDuration();
  p.Check(job_expiry > zero, "job_expiry", Not("must be > 0", job_expiry));
  p.Check(rank_grace >= zero, "rank_grace", Not("must be >= 0", rank_grace));
  p.Check(skew_warning >= zero, "skew_warning",
          Not("must be >= 0", skew_warning));
  p.Check(idle_timeout > zero, "idle_timeout",
          Not("must be > 0", idle_timeout));
  p.Check(producer_expiry > zero, "producer_expiry",
          Not("must be > 0", producer_expiry));
  p.Check(retention > zero, "retention", Not("must be > 0", retention));
  p.Check(commit_interval > zero, "commit_interval",
          Not("must be > 0", commit_interval));
  p.Check(log_interval > zero, "log_interval",
          Not("must be > 0", log_interval));
  p.Check(exit_when_idle >= zero, "exit_when_idle",
          Not("must be >= 0", exit_when_idle));
  return p.ToStatus();
}

}  // namespace bubblewatch
