#include "cli/command_line.h"

#include <algorithm>
#include <iostream>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/marshalling.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "cli/exit_codes.h"

namespace bubblewatch {
namespace {

template <typename T>
std::function<absl::Status(absl::string_view)> Setter(std::string name,
                                                      T* target,
                                                      absl::string_view kind) {
  std::string what(kind);
  return [name, target, what](absl::string_view text) -> absl::Status {
    std::string error;
    T value;
    if (!absl::ParseFlag(text, &value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, ": '", text, "' is not ", what,
                       error.empty() ? "" : absl::StrCat(" (", error, ")")));
    }
    *target = value;
    return absl::OkStatus();
  };
}

}  // namespace

CommandLine::CommandLine(std::string usage, std::string description)
    : usage_(std::move(usage)), description_(std::move(description)) {}

void CommandLine::Add(Option option) { options_.push_back(std::move(option)); }

void CommandLine::AddString(std::string name, std::string* target,
                            std::string value_name, std::string help) {
  Add({name, value_name, help, *target, [target](absl::string_view v) {
         *target = std::string(v);
         return absl::OkStatus();
       }});
}

void CommandLine::AddInt(std::string name, int* target, std::string value_name,
                         std::string help) {
  Add({name, value_name, help, absl::StrCat(*target),
       Setter(name, target, "an integer")});
}

void CommandLine::AddInt64(std::string name, int64_t* target,
                           std::string value_name, std::string help) {
  Add({name, value_name, help, absl::StrCat(*target),
       Setter(name, target, "an integer")});
}

void CommandLine::AddDuration(std::string name, absl::Duration* target,
                              std::string value_name, std::string help) {
  Add({name, value_name, help, absl::FormatDuration(*target),
       Setter(name, target, "a duration like 10s, 500ms or 1h")});
}

void CommandLine::AddBool(std::string name, bool* target, std::string help) {
  Add({name, "", help, "",
       [target](absl::string_view) {
         *target = true;
         return absl::OkStatus();
       },
       /*repeatable=*/true, ConfigKind::kSwitch});
}

void CommandLine::AddList(std::string name, std::vector<std::string>* target,
                          std::string value_name, std::string help) {
  // -X's key=value assignments may come from a config file as a map.
  const ConfigKind kind =
      name == "property" ? ConfigKind::kProperties : ConfigKind::kList;
  Add({name, value_name, help, "",
       [target](absl::string_view v) {
         target->emplace_back(v);
         return absl::OkStatus();
       },
       /*repeatable=*/true, kind, target});
}

void CommandLine::AddAlias(char short_name, std::string name) {
  aliases_.emplace_back(short_name, std::move(name));
}

const CommandLine::Option* CommandLine::Find(absl::string_view name) const {
  for (const Option& o : options_) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

ConfigSchema CommandLine::Schema() const {
  ConfigSchema schema;
  for (const Option& o : options_) schema.emplace(o.name, o.kind);
  return schema;
}

absl::StatusOr<std::vector<ConfigSetting>> CommandLine::ReadConfigFile() const {
  return LoadConfigFile(config_path_, Schema());
}

absl::Status CommandLine::ApplyConfig(
    const std::vector<std::pair<const Option*, size_t>>& list_sizes) {
  for (const ConfigSetting& setting : config_settings_) {
    const Option* option = Find(setting.key);
    // ParseConfigFile knows only the schema's keys.
    if (option == nullptr) continue;
    if (option->list != nullptr) {
      // The file's values go before the command line's.
      size_t at = option->list->size();
      for (const auto& [o, size] : list_sizes) {
        if (o == option) at = size;
      }
      option->list->insert(option->list->begin() + at, setting.values.begin(),
                           setting.values.end());
      continue;
    }
    if (GivenOnCommandLine(setting.key) || setting.values.empty()) continue;
    if (absl::Status s = option->set(setting.values.front()); !s.ok()) {
      // The setter's "--window: ..." as "FILE:LINE: 'window': ...".
      absl::string_view reason = s.message();
      const std::string flag = absl::StrCat("--", setting.key, ": ");
      if (absl::StartsWith(reason, flag)) reason.remove_prefix(flag.size());
      return absl::InvalidArgumentError(absl::StrCat(
          config_path_, ":", setting.line, ": '", setting.key, "': ", reason));
    }
  }
  return absl::OkStatus();
}

absl::Status CommandLine::Parse(int argc, char** argv,
                                std::vector<std::string>* positional) {
  // How the user spelt each single-valued option already given ("--store",
  // "-s"), to name both in the error.
  absl::flat_hash_map<const Option*, std::string> given;
  // Every command with options has --config, unless it has an option of
  // that name itself.
  const bool has_config = !options_.empty() && Find("config") == nullptr;
  std::vector<std::pair<const Option*, size_t>> list_sizes;
  for (const Option& o : options_) {
    if (o.list != nullptr) list_sizes.emplace_back(&o, o.list->size());
  }
  bool config_given = false;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") {
      for (++i; i < argc; ++i) positional->emplace_back(argv[i]);
      break;
    }
    if (arg == "-h" || arg == "--help") {
      help_requested_ = true;
      continue;
    }
    std::string name;
    std::optional<std::string> value;
    if (absl::StartsWith(arg, "--")) {
      absl::string_view body = arg.substr(2);
      size_t eq = body.find('=');
      name = std::string(body.substr(0, eq));
      if (eq != absl::string_view::npos)
        value = std::string(body.substr(eq + 1));
    } else if (arg.size() >= 2 && arg[0] == '-' && arg != "-") {
      auto alias =
          std::find_if(aliases_.begin(), aliases_.end(),
                       [&](const auto& a) { return a.first == arg[1]; });
      if (alias == aliases_.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("unknown option '", arg, "'"));
      }
      name = alias->second;
      if (arg.size() > 2) value = std::string(arg.substr(2));
    } else {
      positional->emplace_back(arg);
      continue;
    }
    if (has_config && name == "config") {
      if (config_given) {
        return absl::InvalidArgumentError(
            "option '--config' given more than once; --config takes one "
            "value");
      }
      config_given = true;
      if (!value) {
        if (i + 1 >= argc) {
          return absl::InvalidArgumentError(
              "option '--config' needs a value (FILE)");
        }
        value = argv[++i];
      }
      config_path_ = *value;
      if (config_path_.empty()) {
        return absl::InvalidArgumentError("--config: no file named");
      }
      continue;
    }
    const Option* option = Find(name);
    if (option == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown option '--", name, "'"));
    }
    given_on_command_line_.insert(option->name);
    if (!option->repeatable) {
      // What the user typed, without the value: "--store", "-s".
      const std::string typed = absl::StartsWith(arg, "--")
                                    ? absl::StrCat("--", name)
                                    : std::string(arg.substr(0, 2));
      auto [it, first] = given.try_emplace(option, typed);
      if (!first) {
        const std::string spelt =
            it->second == typed
                ? absl::StrCat("'", typed, "'")
                : absl::StrCat("'", it->second, "' and '", typed, "'");
        return absl::InvalidArgumentError(
            absl::StrCat("option ", spelt, " given more than once; --", name,
                         " takes one value"));
      }
    }
    if (option->value_name.empty()) {
      if (value) {
        return absl::InvalidArgumentError(
            absl::StrCat("option '--", name, "' takes no value"));
      }
      if (absl::Status s = option->set(""); !s.ok()) return s;
      continue;
    }
    if (!value) {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(absl::StrCat(
            "option '--", name, "' needs a value (", option->value_name, ")"));
      }
      value = argv[++i];
    }
    if (absl::Status s = option->set(*value); !s.ok()) return s;
  }
  if (config_path_.empty() || help_requested_) return absl::OkStatus();
  absl::StatusOr<std::vector<ConfigSetting>> settings = ReadConfigFile();
  if (!settings.ok()) return settings.status();
  config_settings_ = *std::move(settings);
  return ApplyConfig(list_sizes);
}

std::optional<int> CommandLine::ParseOrExit(
    int argc, char** argv, std::vector<std::string>* positional) {
  // The usage line starts with "bubblewatch NAME".
  std::string command =
      usage_.substr(0, usage_.find(' ', usage_.find(' ') + 1));
  if (absl::Status s = Parse(argc, argv, positional); !s.ok()) {
    std::cerr << command << ": " << s.message() << "\nTry '" << command
              << " --help'.\n";
    return kExitUsage;
  }
  if (help_requested_) {
    std::cout << Help();
    return kExitOk;
  }
  return std::nullopt;
}

namespace {

// Appends one option entry: `lhs` (already indented) and its help text
// starting at `column`, wrapped to `width`, continuation lines indented to
// `column`. Line breaks in `help` are reflowed like spaces.
void AppendOptionEntry(std::string& out, absl::string_view lhs,
                       absl::string_view help, int column, int width) {
  std::string line(lhs);
  // At least two spaces between the left side and the text, so that a
  // value name ("1x|10x|max") never reads as the start of the text.
  if (static_cast<int>(line.size()) + 2 > column) {
    absl::StrAppend(&out, line, "\n");
    line.clear();
  }
  line.resize(column, ' ');
  bool line_has_words = false;
  for (absl::string_view word :
       absl::StrSplit(help, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    if (line_has_words &&
        static_cast<int>(line.size() + 1 + word.size()) > width) {
      absl::StrAppend(&out, line, "\n");
      line.assign(column, ' ');
      line_has_words = false;
    }
    if (line_has_words) line.push_back(' ');
    absl::StrAppend(&line, word);
    line_has_words = true;
  }
  // An option without help text leaves no trailing spaces.
  if (!line_has_words) line.erase(line.find_last_not_of(' ') + 1);
  absl::StrAppend(&out, line, "\n");
}

}  // namespace

std::string CommandLine::Help() const {
  std::string out = absl::StrCat("usage: ", usage_, "\n\n", description_, "\n");
  if (options_.empty()) return out;
  absl::StrAppend(&out, "\noptions:\n");
  for (const Option& o : options_) {
    std::string lhs = absl::StrCat("  --", o.name);
    for (const auto& [c, n] : aliases_) {
      if (n == o.name)
        lhs = absl::StrCat("  -", std::string(1, c), ", --", o.name);
    }
    if (!o.value_name.empty()) absl::StrAppend(&lhs, " ", o.value_name);
    std::string help = o.help;
    if (!o.default_text.empty()) {
      absl::StrAppend(&help, " (default: ", o.default_text, ")");
    }
    AppendOptionEntry(out, lhs, help, kHelpColumn, kHelpWidth);
  }
  if (Find("config") == nullptr) {
    AppendOptionEntry(
        out, "  --config FILE",
        "read options from this YAML file: keys are the option names "
        "without --, -X properties a map under 'property' (docs/config.md); "
        "the command line wins",
        kHelpColumn, kHelpWidth);
  }
  AppendOptionEntry(out, "  -h, --help", "show this help", kHelpColumn,
                    kHelpWidth);
  return out;
}

std::string InFlagTerms(
    absl::string_view message,
    std::initializer_list<std::pair<absl::string_view, absl::string_view>>
        flags) {
  std::vector<std::pair<absl::string_view, absl::string_view>> replacements(
      flags.begin(), flags.end());
  std::string text(message);
  // "invalid AnalyzerOptions: ..." -> "invalid options: ...".
  if (absl::StartsWith(text, "invalid ")) {
    const size_t colon = text.find(": ");
    if (colon != std::string::npos) {
      text = absl::StrCat("invalid options", text.substr(colon));
    }
  }
  return absl::StrReplaceAll(text, replacements);
}

}  // namespace bubblewatch
