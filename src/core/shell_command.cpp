#include "odc/core/shell_command.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>
#include <vector>

#include "odc/core/error.h"
#include "odc/core/file_descriptor.h"
#include "odc/core/process_stats.h"

extern char** environ;

namespace odc {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPoll = std::chrono::milliseconds(20);

// The command line ($1) runs under a wrapper shell that leads the group. A watcher in the group
// blocks on fd 4, one end of a socket pair whose other end only the caller holds: when the caller
// is done it sends a line and closes it; when it dies (even of SIGKILL, which no destructor sees)
// the watcher reads an end of file instead and removes the scratch files ($2, $3) the caller
// cannot. Either way the watcher then kills the whole group: nothing the command started outlives
// it. The command's stdin is saved on fd 3 first (an asynchronous list's would be /dev/null); its
// exit status is the wrapper's (a signal's death there reads as 128 + N, as a shell reports it).
// The command and everything it starts carry ODC_COMMAND_TAG=$4 (this call's own) in their
// environment: when the caller died, the processes that left the group (setsid, a double fork:
// while the caller lives its subreaper catches them, below) are found by it and killed too.
constexpr const char* kWrapper =
    "exec 3<&0; ODC_COMMAND_TAG=\"$4\" sh -c \"$1\" <&3 3<&- 4<&- & command=$!; exec 3<&-; "
    "{ read -r _ <&4 || { rm -f \"$2\" \"$3\"; for e in /proc/[0-9]*/environ; do "
    "tr '\\000' '\\n' 2>/dev/null <\"$e\" | grep -qxF \"ODC_COMMAND_TAG=$4\" && "
    "{ p=${e#/proc/}; kill -KILL \"${p%/environ}\" 2>/dev/null; }; done; }; kill -KILL 0; } & "
    "exec 4<&-; wait \"$command\"";

// The caller's end of the watcher's socket: "done" (a line, then closed) on every way out of the
// call, so that only the caller's death reads as one. A socket, not a pipe: a send to a watcher
// already killed fails with EPIPE instead of raising SIGPIPE in the caller.
class Lifeline {
 public:
  explicit Lifeline(int fd) : fd_(fd) {}
  ~Lifeline() { ::send(fd_.get(), "\n", 1, MSG_NOSIGNAL); }
  Lifeline(const Lifeline&) = delete;
  Lifeline& operator=(const Lifeline&) = delete;

 private:
  FileDescriptor fd_;
};

// This process's children now (/proc/PID/stat's ppid).
std::set<pid_t> children() {
  std::set<pid_t> found;
  const pid_t self = ::getpid();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    const auto stat = read_process_stat(std::stol(name));
    if (stat && stat->parent == self) found.insert(static_cast<pid_t>(std::stol(name)));
  }
  return found;
}

// While a command runs this process is a child subreaper (PR_SET_CHILD_SUBREAPER): what the
// command started that left its group (setsid, a daemon's double fork) is reparented here, not to
// init, once its parent ends, so the group's kill does not miss it. On the way out every child that
// was not one before is killed and reaped, pass after pass (a killed one's children come here in
// turn), and the setting is restored.
class ChildSubreaper {
 public:
  ChildSubreaper() {
    int was = 0;
    prctl(PR_GET_CHILD_SUBREAPER, &was);
    was_ = was != 0;
    if (!was_) prctl(PR_SET_CHILD_SUBREAPER, 1);
    before_ = children();
  }
  ~ChildSubreaper() {
    for (bool any = true; any;) {
      std::vector<pid_t> escaped;
      for (const pid_t pid : children()) {
        if (!before_.contains(pid)) escaped.push_back(pid);
      }
      for (const pid_t pid : escaped) ::kill(pid, SIGKILL);
      for (const pid_t pid : escaped) {
        while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {}
      }
      any = !escaped.empty();
    }
    if (!was_) prctl(PR_SET_CHILD_SUBREAPER, 0);
  }
  ChildSubreaper(const ChildSubreaper&) = delete;
  ChildSubreaper& operator=(const ChildSubreaper&) = delete;

 private:
  bool was_ = false;
  std::set<pid_t> before_;
};

// posix_spawn's attribute objects, destroyed on every path.
struct SpawnSetup {
  posix_spawn_file_actions_t actions{};
  posix_spawnattr_t attributes{};
  SpawnSetup() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attributes);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;
};

// The running command's process group: killed and reaped when it is left running (a timeout, a
// stop, or an exception on the way out), so no path leaves it behind.
class RunningGroup {
 public:
  explicit RunningGroup(pid_t leader) : leader_(leader) {}
  ~RunningGroup() {
    if (!reaped_) kill_and_reap();
  }
  RunningGroup(const RunningGroup&) = delete;
  RunningGroup& operator=(const RunningGroup&) = delete;

  // True once the leader (the shell) ended; its wait status in `status`.
  bool poll(int& status) {
    const pid_t done = waitpid(leader_, &status, WNOHANG);
    // ECHILD: reaped elsewhere (SIGCHLD ignored); its status is lost.
    if (done == leader_ || (done < 0 && errno == ECHILD)) reaped_ = true;
    if (done < 0 && errno == ECHILD) status = -1;
    return reaped_;
  }
  // SIGTERM to the whole group, SIGKILL to what is left after kKillGrace; the leader reaped.
  void kill_and_reap() {
    ::kill(-leader_, SIGTERM);
    const auto deadline = Clock::now() + kKillGrace;
    int status = 0;
    while (!poll(status) && Clock::now() < deadline) std::this_thread::sleep_for(kPoll);
    ::kill(-leader_, SIGKILL);  // members that outlived the shell or ignore SIGTERM
    while (!reaped_) {
      if (waitpid(leader_, &status, 0) == leader_ || errno != EINTR) reaped_ = true;
    }
  }

 private:
  pid_t leader_;
  bool reaped_ = false;
};

}  // namespace

ShellCommandResult run_shell_command(const std::string& command, const std::string& stdin_path,
                                     const std::string& stdout_path, double timeout_s,
                                     const std::function<bool()>& stop_requested) {
  int ends[2] = {-1, -1};
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) {
    fail("cannot start '{}': socketpair: {}", command, std::strerror(errno));
  }
  const FileDescriptor lifeline_read(ends[0]);
  const ChildSubreaper subreaper;    // declared first: it sweeps up last, after the group's kill
  const Lifeline lifeline(ends[1]);  // held while the command runs; its end ends the group
  SpawnSetup setup;
  posix_spawn_file_actions_addopen(&setup.actions, STDIN_FILENO, stdin_path.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&setup.actions, STDOUT_FILENO, stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  posix_spawn_file_actions_adddup2(&setup.actions, lifeline_read.get(), 4);
  sigset_t none;
  sigemptyset(&none);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (const int sig : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&setup.attributes, &none);
  posix_spawnattr_setsigdefault(&setup.attributes, &defaults);
  posix_spawnattr_setpgroup(&setup.attributes, 0);  // a group of its own, led by the shell
  posix_spawnattr_setflags(&setup.attributes, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::string sh = "sh", dash_c = "-c", wrapper = kWrapper, name = "odc-shell-command", line = command;
  std::string in = stdin_path, out = stdout_path;
  // This call's tag: the caller's pid and the time, unique among the calls of every process.
  std::string tag = std::to_string(::getpid()) + "." + std::to_string(Clock::now().time_since_epoch().count());
  char* argv[] = {sh.data(), dash_c.data(), wrapper.data(), name.data(), line.data(),
                  in.data(), out.data(),    tag.data(),     nullptr};
  pid_t pid = 0;
  const auto start = Clock::now();
  if (const int error = posix_spawn(&pid, "/bin/sh", &setup.actions, &setup.attributes, argv, environ); error != 0) {
    fail("cannot start '{}' with /bin/sh (stdin {}, stdout {}): {}", command, stdin_path, stdout_path,
         std::strerror(error));
  }
  RunningGroup group(pid);  // declared after `lifeline`: reaped before it closes
  ShellCommandResult result;
  const auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  while (!group.poll(result.wait_status)) {
    if (timeout_s > 0 && elapsed() >= timeout_s) {
      result.ended = ShellCommandResult::Ended::timed_out;
    } else if (stop_requested && stop_requested()) {
      result.ended = ShellCommandResult::Ended::stopped;
    }
    if (result.ended != ShellCommandResult::Ended::exited) {
      group.kill_and_reap();
      break;
    }
    std::this_thread::sleep_for(kPoll);
  }
  result.seconds = elapsed();
  return result;
}

}  // namespace odc
