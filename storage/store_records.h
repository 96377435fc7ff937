// The values of the `jobs` and `progress` column families: small fixed
// little-endian layouts behind a format byte, private to storage/. (Windows
// are FlatBuffers, schemas/window_summary.fbs, because other programs read
// them; these records only the store does.)
//
//   JobRecord:      u8 format=2, i64 last_event_ns, i64 last_seen_wall_ns,
//                   i64 window_count, i64 latest_window_start_ns,
//                   i64 oldest_window_start_ns, state bytes
//                   (format 1, still read, lacks oldest_window_start_ns)
//   ProgressRecord: u8 format=2, i64 resume_offset, i64 committed_position,
//                   state bytes (format 1, still read, has no state)
#ifndef BUBBLEWATCH_STORAGE_STORE_RECORDS_H_
#define BUBBLEWATCH_STORAGE_STORE_RECORDS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "schemas/time_types.h"

namespace bubblewatch {

// The fields as stored, one per i64 of the layout above: where the layout
// has a "none" it is kNoneOnWire, and the store converts to optional where
// it hands a record out (JobInfo).
struct JobRecord {
  // kNoneOnWire for none (JobInfo::last_event_ns nullopt). Records written
  // before it was (2026-12) hold 0 for none, read as an event at 0.
  EventNs last_event_ns = kNoneOnWire;
  WallNs last_seen_wall_ns = 0;  // Unix ns.
  int64_t window_count = 0;
  WindowStartNs latest_window_start_ns = 0;  // When window_count > 0.
  // No stored window starts earlier; kUnknownOldest when not known (format 1
  // records), which makes retention look (it lies before every cutoff).
  // Lets a retention pass skip a job with nothing expired without reading
  // its windows.
  WindowStartNs oldest_window_start_ns = kUnknownOldest;
  std::string state;  // Opaque, the processor's.

  static constexpr int64_t kUnknownOldest = kNoneOnWire;
};

struct ProgressRecord {
  KafkaOffset resume_offset = 0;
  KafkaOffset committed_position = 0;
  std::string state;  // Opaque, the processor's.
};

std::string EncodeJobRecord(const JobRecord& record);

// Decodes a JobRecord; with `with_state` false the state blob is not copied
// (ListJobs does not need it). kDataLoss for a malformed record.
absl::StatusOr<JobRecord> DecodeJobRecord(absl::string_view bytes,
                                          bool with_state = true);

std::string EncodeProgressRecord(const ProgressRecord& record);

// kDataLoss for a malformed record.
absl::StatusOr<ProgressRecord> DecodeProgressRecord(absl::string_view bytes);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_STORAGE_STORE_RECORDS_H_
