#include "base/option_problems.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace bubblewatch {

OptionProblems::OptionProblems(absl::string_view what)
    : what_(what), problems_(std::make_shared<std::vector<std::string>>()) {}

void OptionProblems::Check(bool ok, absl::string_view field,
                           absl::string_view requirement) {
  if (!ok) problems_->push_back(absl::StrCat(prefix_, field, " ", requirement));
}

OptionProblems OptionProblems::Field(absl::string_view field) const {
  OptionProblems nested = *this;
  absl::StrAppend(&nested.prefix_, field, ".");
  return nested;
}

absl::Status OptionProblems::ToStatus() const {
  if (problems_->empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("invalid ", what_, ": ", absl::StrJoin(*problems_, "; ")));
}

}  // namespace bubblewatch
