// Command-line flags for every Weft binary, in one place.
//
// Abseil's --help lists only flags defined in files named after the program
// ("weft-scheduler.cc"); ours live in "scheduler_main.cc" and the like, so --help printed
// "No flags matched". ParseFlags sets Abseil's usage config once for all binaries:
// --help (and --helpshort) list the flags defined in Weft's own sources; Abseil's own
// flags (--flagfile, --fromenv ...) stay under --helpfull.
//
// It also makes a bad command line a usage error with exit status 2 (Abseil exits 1):
// an unknown flag, a flag without its value, or a value that does not parse is reported
// on stderr ("<program>: <what>; see --help") before Abseil parses anything. Exit
// statuses: 0 ok, 1 runtime failure, 2 bad arguments — the convention every Weft binary
// documents. --help itself keeps Abseil's behaviour (prints, exits 1).
// Thread-safety: call once from main() before starting threads.
#ifndef WEFT_COMMON_FLAGS_H_
#define WEFT_COMMON_FLAGS_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace weft {

inline constexpr int kExitUsage = 2;

// Sets the usage message and config, checks argv (exit 2 on a bad flag), then parses it
// with absl::ParseCommandLine. Returns the positional arguments, argv[0] first.
std::vector<char*> ParseFlags(int argc, char** argv, absl::string_view usage);

// The check ParseFlags runs, for tests: empty when every flag in argv[1..] is defined and
// its value parses (values are parsed into the flags, as Abseil would), else the error.
// A command line that uses --flagfile/--fromenv/--tryfromenv/--undefok is left to Abseil.
std::string CheckFlags(int argc, char** argv);

// Every value given for flag `name` in argv ("--name=v", "--name v", also with one
// dash), in order, up to "--". Abseil keeps only the last one of a repeated flag; tools
// whose flag may be repeated (weft --stop) read them all here.
std::vector<std::string> RepeatedFlagValues(int argc, char** argv, absl::string_view name);

// True for flags --help should list: those defined outside Abseil's own sources.
bool IsWeftFlagFile(absl::string_view filename);

}  // namespace weft

#endif  // WEFT_COMMON_FLAGS_H_
