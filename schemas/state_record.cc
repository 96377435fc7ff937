#include "schemas/state_record.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace bubblewatch {

bool IsStateRecord(absl::string_view bytes) {
  return bytes.size() >= 8 && flatbuffers::BufferHasIdentifier(
                                  bytes.data(), fb::StateRecordIdentifier());
}

std::string FinishStateRecord(flatbuffers::FlatBufferBuilder& builder,
                              fb::StateBody type,
                              flatbuffers::Offset<void> body) {
  fb::FinishStateRecordBuffer(
      builder, fb::CreateStateRecord(builder, kStateFormatVersion, type, body));
  return std::string(reinterpret_cast<const char*>(builder.GetBufferPointer()),
                     builder.GetSize());
}

absl::StatusOr<const fb::StateRecord*> ReadStateRecord(absl::string_view bytes,
                                                       fb::StateBody type,
                                                       absl::string_view what) {
  if (!IsStateRecord(bytes)) {
    return absl::DataLossError(
        absl::StrCat("corrupt ", what, ": not a state record"));
  }
  flatbuffers::Verifier verifier(reinterpret_cast<const uint8_t*>(bytes.data()),
                                 bytes.size());
  if (!fb::VerifyStateRecordBuffer(verifier)) {
    return absl::DataLossError(
        absl::StrCat("corrupt ", what, ": the state record does not verify"));
  }
  const fb::StateRecord* record = fb::GetStateRecord(bytes.data());
  if (record->format_version() == 0) {
    return absl::DataLossError(
        absl::StrCat("corrupt ", what, ": state format version 0"));
  }
  if (record->format_version() > kStateFormatVersion) {
    return absl::DataLossError(absl::StrCat(
        what, " has state format version ", record->format_version(),
        ", written by a newer bubblewatch (this one reads up to ",
        kStateFormatVersion, ")"));
  }
  if (record->body_type() != type) {
    return absl::DataLossError(
        absl::StrCat("corrupt ", what, ": the state record holds a ",
                     fb::EnumNameStateBody(record->body_type()), ", not a ",
                     fb::EnumNameStateBody(type)));
  }
  return record;
}

}  // namespace bubblewatch
