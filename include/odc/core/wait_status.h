#pragma once
// How an external command ended, in words, from its wait status (waitpid's or std::system's): what
// a person reads, not the raw number (status 768 is exit status 3, 32512 a command the shell did not
// find). Header-only: odc-run, which links no odc library, reports its ranks with it too.
#include <sys/wait.h>

#include <cstring>
#include <string>

namespace odc {

// "exit status 3", "not found (exit 127)", "not executable (exit 126)", "killed by SIGSEGV (core
// dumped)", "exit status 139 (128 + SIGSEGV: a command the shell ran was killed by SIGSEGV)".
inline std::string describe_wait_status(int status) {
  const auto signal_name = [](int sig) {
    const char* abbrev = sigabbrev_np(sig);
    return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
  };
  if (WIFSIGNALED(status)) {
    return "killed by " + signal_name(WTERMSIG(status)) + (WCOREDUMP(status) ? " (core dumped)" : "");
  }
  if (!WIFEXITED(status)) return "ended with wait status " + std::to_string(status);
  const int code = WEXITSTATUS(status);
  if (code == 126) return "not executable (exit 126)";
  if (code == 127) return "not found (exit 127)";
  if (code > 128 && code <= 128 + 64 && sigabbrev_np(code - 128) != nullptr) {
    return "exit status " + std::to_string(code) + " (128 + " + signal_name(code - 128) +
           ": a command the shell ran was killed by " + signal_name(code - 128) + ")";
  }
  return "exit status " + std::to_string(code);
}

}  // namespace odc
