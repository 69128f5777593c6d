#pragma once
// An external command line run by /bin/sh -c, as std::system runs it, but one that can be stopped:
// in a process group of its own, with the signal mask and the dispositions of SIGINT, SIGTERM,
// SIGUSR1, SIGPIPE and SIGCHLD reset (odc-train blocks the stop signals in every thread, and a child
// inherits a blocked mask: std::system's command could not be interrupted), stdin and stdout from
// and to files, and a deadline. On a timeout or a stop request its whole group is killed (SIGTERM,
// then SIGKILL after kKillGrace) and reaped before the call returns; whatever it left running when
// it ended, and everything it started when the caller dies (even of SIGKILL), is killed too:
// nothing it started outlives the call. What left the group (`setsid cmd &`, a double fork) is
// found as well: the caller is a child subreaper while the command runs (PR_SET_CHILD_SUBREAPER,
// restored after), so such a process comes back to it as an orphan and is killed and reaped before
// the call returns. When the caller itself dies, the group's watcher finds those by the tag in the
// command's environment (ODC_COMMAND_TAG, unique to the call) and kills them; only one that both
// left the group and cleared its environment can escape then.
#include <chrono>
#include <functional>
#include <string>

namespace odc {

struct ShellCommandResult {
  enum class Ended { exited, timed_out, stopped };
  Ended ended = Ended::exited;
  int wait_status = 0;  // waitpid's when it ended by itself (describe_wait_status, wait_status.h)
  double seconds = 0.0;
};

inline constexpr std::chrono::seconds kKillGrace{2};

// Runs `command` with stdin read from `stdin_path` and stdout written to `stdout_path` (created or
// truncated; stderr stays the caller's) until it ends, `timeout_s` seconds pass (<= 0: no limit)
// or `stop_requested` (may be empty; asked every 20 ms) says true. The two files are the caller's
// scratch: should the caller die while the command runs, they are removed with the group. odc::Error
// when the shell cannot be started (a file that cannot be opened, no /bin/sh).
ShellCommandResult run_shell_command(const std::string& command, const std::string& stdin_path,
                                     const std::string& stdout_path, double timeout_s,
                                     const std::function<bool()>& stop_requested);

}  // namespace odc
