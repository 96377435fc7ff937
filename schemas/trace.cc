#include "schemas/trace.h"

namespace bubblewatch {

NameInterner::NameInterner(Trace* trace) : trace_(trace) {
  ids_.reserve(trace_->names.size());
  for (NameId i = 0; i < trace_->names.size(); ++i) {
    ids_.emplace(trace_->names[i], i);
  }
}

NameId NameInterner::Intern(absl::string_view name) {
  auto it = ids_.find(name);
  if (it != ids_.end()) return it->second;
  NameId id = static_cast<NameId>(trace_->names.size());
  trace_->names.emplace_back(name);
  ids_.emplace(std::string(name), id);
  return id;
}

}  // namespace bubblewatch
