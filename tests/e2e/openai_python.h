// PyPI's official `openai` client for the end-to-end tests: the venv that
// tests/e2e/openai_venv.sh makes once per machine, outside the repository
// (~/.cache/weft/venv-openai), and openai_client.py, which drives Weft's HTTP API with it.
// Tests that use it skip (GTEST_SKIP with `skip`) only when the package index cannot be
// reached to make the venv; any other failure of the script is an error.
//
// Thread-safety: OpenAiPython() is safe to call from any thread (made once).
#ifndef WEFT_TESTS_E2E_OPENAI_PYTHON_H_
#define WEFT_TESTS_E2E_OPENAI_PYTHON_H_

#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/e2e/process_harness.h"

namespace weft::e2e {

struct OpenAiVenv {
  std::string python;  // the venv's interpreter; empty when skip or error is set
  std::string skip;    // why tests skip: the package index cannot be reached
  std::string error;   // openai_venv.sh failed otherwise (with its log)
};

// Runs openai_venv.sh the first time (up to 10 minutes on a fresh machine).
const OpenAiVenv& OpenAiPython();

// Runs openai_client.py with `args` (--phase=... and the phase's flags) in the venv.
RunResult RunOpenAiClient(const std::vector<std::string>& args);
// Runs another script of the venv's users (a runfiles path, e.g.
// "tests/e2e/structured_client.py") with `args`.
RunResult RunOpenAiScript(const std::string& script, const std::vector<std::string>& args);

// What openai_client.py printed as "<key>: <json>" on stdout (the last such line);
// null when it printed none.
nlohmann::json PrintedJson(const std::string& out, const std::string& key);

}  // namespace weft::e2e

#endif  // WEFT_TESTS_E2E_OPENAI_PYTHON_H_
