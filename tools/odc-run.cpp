// odc-run [--mpirun PATH] MPIRUN-ARGUMENTS...: mpirun with a graceful stop.
//
// OpenMPI's mpirun answers SIGINT or SIGTERM by aborting the job: it sends the ranks SIGCONT,
// then SIGTERM after odls_base_sigkill_timeout seconds (default 1) and SIGKILL as long again later,
// and exits 1. A checkpoint that takes longer than that second is lost. odc-run starts mpirun with
// SIGINT, SIGTERM and SIGHUP blocked (mpirun keeps a blocked mask, and resets it for the ranks it
// starts), receives those signals itself and turns them into requests that mpirun forwards as it
// is:
//   first signal   SIGUSR1 to mpirun -> every rank: finish the minibatch, checkpoint, exit 0
//   second signal  SIGUSR2 to mpirun -> every rank ends at once (SIGUSR2's default action)
// SIGUSR1 to odc-run is forwarded as it is, and never counts as a second signal.
// A scheduler that signals every process of the job (odc-run, mpirun and each rank) gets the same
// graceful stop: the ranks take their own SIGTERM as the request, mpirun does not abort.
// odc-run exits with mpirun's exit status (128 + N if mpirun died of signal N).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr const char* kUsage = R"(usage: odc-run [--mpirun PATH] MPIRUN-ARGUMENTS...

Runs `mpirun MPIRUN-ARGUMENTS...` so that Ctrl-C (SIGINT), SIGTERM or SIGHUP stop the job
gracefully: the first asks every rank to finish its minibatch, save a checkpoint (with
checkpoint.dir set) and exit 0; a second stops the job at once. Without odc-run, mpirun kills the
ranks about one second after a signal, whether or not their checkpoint is written.

example:
  odc-run -np 2 --bind-to none odc-train config.yaml

options (before the mpirun arguments):
  --mpirun PATH   the mpirun to run (default: $ODC_MPIRUN, else mpirun from PATH)
  -h, --help      this text
exit status: mpirun's; 128 + N if mpirun died of signal N; 2 for a usage error; 127 if mpirun
cannot be started.
)";

constexpr int kExitUsage = 2;
constexpr int kExitNotStarted = 127;

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGUSR1);
  return set;
}

[[noreturn]] void exec_mpirun(const std::string& mpirun, const std::vector<std::string>& args) {
  // The child keeps SIGINT/SIGTERM/SIGHUP blocked across exec (that is the shield) and gets
  // SIGCHLD and SIGUSR1 (the request it forwards) back as mpirun expects them.
  sigset_t unblocked;
  sigemptyset(&unblocked);
  sigaddset(&unblocked, SIGCHLD);
  sigaddset(&unblocked, SIGUSR1);
  sigprocmask(SIG_UNBLOCK, &unblocked, nullptr);
  setenv("ODC_LAUNCHER", "odc-run", 1);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(mpirun.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(mpirun.c_str(), argv.data());
  std::fprintf(stderr, "odc-run: error: cannot start '%s': %s\n", mpirun.c_str(), std::strerror(errno));
  std::fflush(stderr);
  _exit(kExitNotStarted);
}

int exit_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// Waits for mpirun, turning stop signals into forwarded requests; returns mpirun's exit status.
int supervise(pid_t child, const sigset_t& waited) {
  int received = 0;
  for (;;) {
    siginfo_t info{};
    const timespec tick{1, 0};
    const int sig = sigtimedwait(&waited, &info, &tick);
    if (sig == SIGUSR1) {  // a request, as the ranks take it: forwarded, never escalated
      if (received == 0) std::fprintf(stderr, "odc-run: SIGUSR1: asking every rank to finish its minibatch, checkpoint and exit\n");
      kill(child, SIGUSR1);
      continue;
    }
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      ++received;
      if (received == 1) {
        std::fprintf(stderr,
                     "odc-run: %s: asking every rank to finish its minibatch, checkpoint and exit "
                     "(send it again to stop at once)\n",
                     strsignal(sig));
        kill(child, SIGUSR1);
      } else {
        std::fprintf(stderr, "odc-run: %s again: stopping every rank now\n", strsignal(sig));
        kill(child, SIGUSR2);
      }
      continue;
    }
    int status = 0;
    const pid_t done = waitpid(child, &status, WNOHANG);
    if (done == child) return exit_status(status);
    if (done < 0 && errno != EINTR) {
      std::fprintf(stderr, "odc-run: error: waiting for mpirun: %s\n", std::strerror(errno));
      return 1;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string mpirun = std::getenv("ODC_MPIRUN") != nullptr ? std::getenv("ODC_MPIRUN") : "mpirun";
  std::vector<std::string> args;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--mpirun") {
      if (i + 1 >= argc || argv[i + 1][0] == '\0') {
        std::fprintf(stderr, "odc-run: --mpirun needs a path\n\n%s", kUsage);
        return kExitUsage;
      }
      mpirun = argv[++i];
      continue;
    }
    if (a.rfind("--mpirun=", 0) == 0) {
      mpirun = a.substr(9);
      continue;
    }
    break;
  }
  for (; i < argc; ++i) args.emplace_back(argv[i]);
  if (args.empty()) {
    std::fprintf(stderr, "odc-run: no mpirun arguments (e.g. odc-run -np 2 odc-train config.yaml)\n\n%s", kUsage);
    return kExitUsage;
  }
  // Blocked before the fork: a signal that arrives while mpirun starts is held, not lost.
  sigset_t waited = stop_signals();
  sigaddset(&waited, SIGCHLD);
  sigprocmask(SIG_BLOCK, &waited, nullptr);
  const pid_t child = fork();
  if (child < 0) {
    std::fprintf(stderr, "odc-run: error: fork: %s\n", std::strerror(errno));
    return kExitNotStarted;
  }
  if (child == 0) exec_mpirun(mpirun, args);
  return supervise(child, waited);
}
