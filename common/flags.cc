#include "common/flags.h"

#include <cstdio>
#include <cstdlib>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/build_info.h"

namespace weft {

bool IsWeftFlagFile(absl::string_view filename) {
  // Abseil's own flags are defined in ".../absl/flags/*.cc".
  return !absl::StrContains(filename, "absl/");
}

namespace {

bool IsUsageFlag(absl::string_view name) {
  for (absl::string_view u : {"help", "helpfull", "helpshort", "helppackage", "helpon", "helpmatch",
                              "version", "only_check_args"}) {
    if (name == u) return true;
  }
  return false;
}

}  // namespace

std::string CheckFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;                         // the rest is positional
    if (arg.size() < 2 || arg[0] != '-') continue;  // positional (or a lone "-")
    absl::string_view body = arg.substr(arg[1] == '-' ? 2 : 1);
    const size_t eq = body.find('=');
    const bool has_value = eq != absl::string_view::npos;
    const absl::string_view name = body.substr(0, eq);
    if (name == "flagfile" || name == "fromenv" || name == "tryfromenv" || name == "undefok") {
      return "";  // flags from elsewhere: Abseil knows how to read them
    }
    if (IsUsageFlag(name)) continue;  // --help[=...], --version ...: Abseil's to handle
    if (name.empty()) return absl::StrCat("'", arg, "' is not a flag");
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) {
      // --noNAME turns a boolean NAME off.
      absl::string_view base = name;
      if (absl::ConsumePrefix(&base, "no") && !has_value) {
        absl::CommandLineFlag* b = absl::FindCommandLineFlag(base);
        if (b != nullptr && b->IsOfType<bool>()) continue;
      }
      return absl::StrCat("unknown flag --", name);
    }
    std::string value;
    if (has_value) {
      value = std::string(body.substr(eq + 1));
    } else if (flag->IsOfType<bool>()) {
      continue;  // --flag alone means true
    } else if (i + 1 < argc) {
      value = argv[++i];  // "--flag value"
    } else {
      return absl::StrCat("flag --", name, " needs a value");
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::StrCat("bad value for --", name, ": ", error);
    }
  }
  return "";
}

std::vector<std::string> RepeatedFlagValues(int argc, char** argv, absl::string_view name) {
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-")) continue;
    if (!absl::ConsumePrefix(&arg, name)) continue;
    if (absl::ConsumePrefix(&arg, "=")) {
      out.emplace_back(arg);
    } else if (arg.empty() && i + 1 < argc) {
      out.emplace_back(argv[++i]);
    }
  }
  return out;
}

std::vector<char*> ParseFlags(int argc, char** argv, absl::string_view usage) {
  absl::SetProgramUsageMessage(usage);
  absl::string_view program = argc > 0 ? argv[0] : "weft";
  program = program.substr(program.rfind('/') + 1);  // npos + 1 == 0
  absl::FlagsUsageConfig config;
  config.contains_help_flags = IsWeftFlagFile;
  config.contains_helpshort_flags = IsWeftFlagFile;
  // --version: "<program> <version> (revision <git commit>)" (common/build_info.h).
  config.version_string = [name = std::string(program)] { return VersionLine(name) + "\n"; };
  absl::SetFlagsUsageConfig(config);
  if (const std::string error = CheckFlags(argc, argv); !error.empty()) {
    std::fprintf(stderr, "%.*s: %s; see --help\n", static_cast<int>(program.size()), program.data(),
                 error.c_str());
    std::exit(kExitUsage);
  }
  return absl::ParseCommandLine(argc, argv);
}

}  // namespace weft
