// OptionProblems: collects every problem with a set of options, so that an
// options struct's Validate() reports all of them in one kInvalidArgument
// Status instead of stopping at the first (or, worse, the last) one found.
//
//   absl::Status FooOptions::Validate() const {
//     OptionProblems problems("FooOptions");
//     AddProblems(problems);
//     return problems.ToStatus();
//   }
//   // By value: a copy is a handle on the same list.
//   void FooOptions::AddProblems(OptionProblems p) const {
//     p.Check(size >= 1, "size", absl::StrCat("must be >= 1, not ", size));
//     bar.AddProblems(p.Field("bar"));  // Names become "bar.<name>".
//   }
#ifndef BUBBLEWATCH_BASE_OPTION_PROBLEMS_H_
#define BUBBLEWATCH_BASE_OPTION_PROBLEMS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace bubblewatch {

class OptionProblems {
 public:
  // `what` names the options in the message ("StreamProcessorOptions").
  explicit OptionProblems(absl::string_view what);

  // Records "<field> <requirement>" unless `ok`. `field` is the option's
  // name as in its struct, prefixed by the Field() path.
  void Check(bool ok, absl::string_view field, absl::string_view requirement);

  // The problems of a nested struct: they land in this list (copies share
  // it), their names prefixed with "<field>.".
  OptionProblems Field(absl::string_view field) const;

  bool empty() const { return problems_->empty(); }
  const std::vector<std::string>& problems() const { return *problems_; }

  // OK when nothing was recorded, else kInvalidArgument
  // "invalid <what>: <problem>; <problem>; ..." in the order recorded.
  absl::Status ToStatus() const;

 private:
  std::string what_;
  std::string prefix_;
  std::shared_ptr<std::vector<std::string>> problems_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_BASE_OPTION_PROBLEMS_H_
