#include "ingest/watch/job_name_pattern.h"

#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace bubblewatch {

absl::StatusOr<TranslatedPattern> TranslateNamedGroups(
    absl::string_view pattern) {
  TranslatedPattern out;
  int group = 0;
  size_t i = 0;
  while (i < pattern.size()) {
    const char c = pattern[i];
    if (c == '\\') {
      // An escape: copy it and the escaped character untouched.
      out.ecmascript.append(pattern.substr(i, 2).data(),
                            pattern.substr(i, 2).size());
      i += 2;
      continue;
    }
    if (c == '[') {
      // A character class: '(' inside it is literal. ']' right after '[' or
      // '[^' is literal too.
      size_t j = i + 1;
      if (j < pattern.size() && pattern[j] == '^') ++j;
      if (j < pattern.size() && pattern[j] == ']') ++j;
      while (j < pattern.size() && pattern[j] != ']') {
        j += pattern[j] == '\\' ? 2 : 1;
      }
      if (j >= pattern.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("unterminated character class at offset ", i));
      }
      out.ecmascript.append(pattern.data() + i, j + 1 - i);
      i = j + 1;
      continue;
    }
    if (c != '(') {
      out.ecmascript.push_back(c);
      ++i;
      continue;
    }
    absl::string_view rest = pattern.substr(i);
    size_t name_begin = 0;
    if (absl::StartsWith(rest, "(?P<")) {
      name_begin = i + 4;
    } else if (absl::StartsWith(rest, "(?<") &&
               !absl::StartsWith(rest, "(?<=") &&
               !absl::StartsWith(rest, "(?<!")) {
      name_begin = i + 3;
    } else {
      // "(?:", "(?=", "(?!" do not capture; anything else is a plain group.
      if (!absl::StartsWith(rest, "(?")) ++group;
      out.ecmascript.push_back('(');
      ++i;
      continue;
    }
    const size_t name_end = pattern.find('>', name_begin);
    if (name_end == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("unterminated group name at offset ", i));
    }
    std::string name(pattern.substr(name_begin, name_end - name_begin));
    if (name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("empty group name at offset ", i));
    }
    ++group;
    if (!out.groups.emplace(name, group).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("group name '", name, "' is used twice"));
    }
    out.ecmascript.push_back('(');
    i = name_end + 1;
  }
  return out;
}

absl::StatusOr<JobNamePattern> JobNamePattern::Create(
    absl::string_view pattern) {
  absl::StatusOr<TranslatedPattern> translated = TranslateNamedGroups(pattern);
  if (!translated.ok()) return translated.status();
  JobNamePattern p;
  p.pattern_ = std::string(pattern);
  if (auto it = translated->groups.find("job");
      it != translated->groups.end()) {
    p.job_group_ = it->second;
  }
  if (auto it = translated->groups.find("rank");
      it != translated->groups.end()) {
    p.rank_group_ = it->second;
  }
  if (p.job_group_ == 0 && p.rank_group_ == 0) {
    return absl::InvalidArgumentError(
        "the pattern has neither a (?<job>...) nor a (?<rank>...) group");
  }
  try {
    p.regex_ = std::regex(translated->ecmascript, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a regular expression: ", e.what()));
  }
  return p;
}

std::optional<JobAndRank> JobNamePattern::Match(
    absl::string_view file_name) const {
  std::smatch m;
  const std::string name(file_name);
  if (!std::regex_search(name, m, regex_)) return std::nullopt;
  JobAndRank out;
  if (job_group_ > 0 && m[job_group_].matched) out.job = m[job_group_].str();
  int32_t rank = 0;
  if (rank_group_ > 0 && m[rank_group_].matched &&
      absl::SimpleAtoi(m[rank_group_].str(), &rank) && rank >= 0) {
    out.rank = rank;
  }
  return out;
}

}  // namespace bubblewatch
