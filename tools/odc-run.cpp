// odc-run [--mpirun PATH] MPIRUN-ARGUMENTS...: mpirun with a graceful stop.
// odc-run --local N [--] PROGRAM ARGUMENTS...: N ranks of PROGRAM on this host, without MPI.
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
//
// --local N (a machine without an MPI runtime): odc-run itself starts N processes of PROGRAM with
// ODC_LOCAL_JOB (unique), ODC_LOCAL_RANK and ODC_LOCAL_SIZE set (odc/distributed/group/local_launch.h;
// the ranks meet through ShmHostGroup) and sends the same requests to each of them directly. When
// a rank fails, the others get SIGUSR2 after a grace of 5 s (time to print their own errors) and
// SIGKILL 5 s after that; odc-run exits with the first failing rank's status. If odc-run itself is
// killed, the kernel kills the ranks (PR_SET_PDEATHSIG); they start with the stop signals blocked.
//
// Both ways, ODC_LAUNCHER_PID tells the ranks odc-run's pid: odc-train stops gracefully when odc-run
// is gone, even killed by SIGKILL, and mpirun exits with its ranks (odc::train::StopSignals). A stop
// signal sent to mpirun alone (it stays blocked there) is read from /proc and acted on as a request.
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "odc/core/wait_status.h"
#include "odc/distributed/group/local_launch.h"

namespace {

constexpr const char* kUsage = R"(usage: odc-run [--mpirun PATH] MPIRUN-ARGUMENTS...
       odc-run --local N [--] PROGRAM ARGUMENTS...

Runs `mpirun MPIRUN-ARGUMENTS...` so that Ctrl-C (SIGINT), SIGTERM or SIGHUP stop the job
gracefully: the first asks every rank to finish its minibatch, save a checkpoint (with
checkpoint.dir set) and exit 0; a second stops the job at once. Without odc-run, mpirun kills the
ranks about one second after a signal, whether or not their checkpoint is written.

With --local N, odc-run starts N processes of PROGRAM on this host itself, without MPI (for a
machine without an MPI runtime); they find each other through shared memory (ODC_LOCAL_JOB,
ODC_LOCAL_RANK, ODC_LOCAL_SIZE). Signals work as above, sent to every rank directly. When a rank
fails, the others are stopped (SIGUSR2) 5 s later, killed 5 s after that if still running.

examples:
  odc-run -np 2 --bind-to none odc-train config.yaml
  odc-run --local 2 odc-train config.yaml

options (before the mpirun arguments or the program):
  --mpirun PATH   the mpirun to run (default: $ODC_MPIRUN, else mpirun from PATH)
  --local N       run N ranks (1 to 256) of PROGRAM here, without mpirun
  -h, --help      this text
exit status: mpirun's (with --local: 0 when every rank exits 0, else the first failing rank's);
128 + N if it died of signal N; 2 for a usage error; 127 if mpirun or PROGRAM cannot be started.
)";

constexpr int kExitUsage = 2;
using Clock = std::chrono::steady_clock;
constexpr auto kRankStartup = std::chrono::seconds(5);
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

// Execs `args` (args[0] looked up in PATH) with the signals of `unblocked` unblocked; prints why
// not and exits 127 when it cannot start.
[[noreturn]] void exec_program(const std::vector<std::string>& args, const sigset_t& unblocked) {
  sigprocmask(SIG_UNBLOCK, &unblocked, nullptr);
  setenv("ODC_LAUNCHER", "odc-run", 1);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "odc-run: error: cannot start '%s': %s\n", argv[0], std::strerror(errno));
  std::fflush(stderr);
  _exit(kExitNotStarted);
}

[[noreturn]] void exec_mpirun(const std::string& mpirun, const std::vector<std::string>& args) {
  // The child keeps SIGINT/SIGTERM/SIGHUP blocked across exec (that is the shield) and gets
  // SIGCHLD and SIGUSR1 (the request it forwards) back as mpirun expects them.
  sigset_t unblocked;
  sigemptyset(&unblocked);
  sigaddset(&unblocked, SIGCHLD);
  sigaddset(&unblocked, SIGUSR1);
  std::vector<std::string> all = {mpirun};
  all.insert(all.end(), args.begin(), args.end());
  exec_program(all, unblocked);
}

int exit_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// The request a signal odc-run received becomes for the ranks (0: none), said on stderr: SIGUSR1
// is forwarded as it is and never escalates; the first SIGINT/SIGTERM/SIGHUP becomes SIGUSR1
// (finish the minibatch, checkpoint, exit), a later one SIGUSR2 (stop at once). `received` counts
// the SIGINT/SIGTERM/SIGHUP so far.
int request_for(int sig, int& received) {
  if (sig == SIGUSR1) {
    if (received == 0) std::fprintf(stderr, "odc-run: SIGUSR1: asking every rank to finish its minibatch, checkpoint and exit\n");
    return SIGUSR1;
  }
  if (sig != SIGINT && sig != SIGTERM && sig != SIGHUP) return 0;
  if (++received == 1) {
    std::fprintf(stderr,
                 "odc-run: %s: asking every rank to finish its minibatch, checkpoint and exit "
                 "(send it again to stop at once)\n",
                 strsignal(sig));
    return SIGUSR1;
  }
  std::fprintf(stderr, "odc-run: %s again: stopping every rank now\n", strsignal(sig));
  return SIGUSR2;
}

// True when mpirun has a SIGINT, SIGTERM or SIGHUP pending (sent to mpirun alone, e.g. `kill
// <mpirun pid>`): they stay blocked in mpirun (its own answer, aborting the ranks a second later,
// would lose their checkpoint and, to a rank that also got the scheduler's SIGTERM, be a second
// SIGTERM), so odc-run reads them from /proc/PID/status ("ShdPnd", a hex mask) and acts on them.
bool mpirun_signalled(pid_t child) {
  FILE* f = std::fopen(("/proc/" + std::to_string(child) + "/status").c_str(), "r");
  if (f == nullptr) return false;
  char line[256];
  unsigned long long mask = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "ShdPnd:", 7) == 0) mask = std::strtoull(line + 7, nullptr, 16);
  }
  std::fclose(f);
  const auto bit = [](int sig) { return 1ULL << (sig - 1); };
  return (mask & (bit(SIGINT) | bit(SIGTERM) | bit(SIGHUP))) != 0;
}

// Waits for mpirun, turning stop signals into forwarded requests; returns mpirun's exit status.
int supervise(pid_t child, const sigset_t& waited) {
  int received = 0;
  const auto started = Clock::now();
  bool pending_usr1 = false;
  // A stop request also renames odc-run (the ranks' launcher watch reads its name, see
  // odc::train::StopSignals): a rank that mpirun has not started yet, or that has not reached
  // main(), still sees it. mpirun forwards SIGUSR1 to whatever ranks exist, and SIGUSR1's default
  // action kills a rank before its main() blocks it, so within kRankStartup of the launch the
  // SIGUSR1 (for ranks on other hosts and programs that do not watch) waits until then.
  const auto forward = [&](int request) {
    if (request == SIGUSR1) {
      prctl(PR_SET_NAME, "odc-run:stop");
      if (Clock::now() - started < kRankStartup) {
        pending_usr1 = true;
        return;
      }
    }
    kill(child, request);
  };
  bool mpirun_request = false;
  for (;;) {
    siginfo_t info{};
    const timespec tick{0, 200'000'000};
    const int sig = sigtimedwait(&waited, &info, &tick);
    if (const int request = request_for(sig, received); request != 0) {
      forward(request);
      continue;
    }
    if (pending_usr1 && Clock::now() - started >= kRankStartup) {
      pending_usr1 = false;
      kill(child, SIGUSR1);
    }
    if (!mpirun_request && mpirun_signalled(child)) {
      // One request, like SIGUSR1: never counted as a second signal (a scheduler's SIGTERM to
      // odc-run and mpirun at once is one stop). A pending signal stays pending: acted on once.
      mpirun_request = true;
      if (received == 0) {
        std::fprintf(stderr, "odc-run: mpirun got a stop signal: asking every rank to finish its minibatch, checkpoint and exit\n");
        forward(SIGUSR1);
      }
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

// ---- --local N: the ranks are odc-run's own children ----

constexpr auto kFailureGrace = std::chrono::seconds(5);  // a failed rank's peers print their errors
constexpr auto kKillGrace = std::chrono::seconds(5);     // after SIGUSR2, before SIGKILL

struct Rank {
  pid_t pid = -1;
  bool running = true;
};

// "exit status 3", "killed by SIGKILL" (wait_status.h, as every external command's status is told).
std::string describe_status(int status) { return odc::describe_wait_status(status); }

void signal_running(const std::vector<Rank>& ranks, int sig) {
  for (const auto& r : ranks) {
    if (r.running) kill(r.pid, sig);
  }
}

int count_running(const std::vector<Rank>& ranks) {
  int n = 0;
  for (const auto& r : ranks) n += r.running ? 1 : 0;
  return n;
}

[[noreturn]] void exec_rank(const std::vector<std::string>& program, const std::string& job, int rank, int size,
                            const sigset_t& unblocked, pid_t launcher) {
  // Killed with odc-run, should odc-run itself be killed; and if it already was, do not start.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(kExitNotStarted);
  setenv(odc::distributed::kLocalJobVariable, job.c_str(), 1);
  setenv(odc::distributed::kLocalRankVariable, std::to_string(rank).c_str(), 1);
  setenv(odc::distributed::kLocalSizeVariable, std::to_string(size).c_str(), 1);
  exec_program(program, unblocked);
}

// Waits for every rank, forwarding stop signals to each, stopping the others when one fails;
// returns the first failing rank's exit status (0 if none failed).
int supervise_local(std::vector<Rank>& ranks, const sigset_t& waited) {
  int received = 0;
  int first_failure = 0;
  Clock::time_point failed_at{};
  bool stopping = false;  // SIGUSR2 sent
  Clock::time_point stopped_at{};
  bool killed = false;
  const auto stop_now = [&](Clock::time_point now) {
    signal_running(ranks, SIGUSR2);
    stopping = true;
    stopped_at = now;
  };
  while (count_running(ranks) > 0) {
    siginfo_t info{};
    const timespec tick{0, 100'000'000};  // deadlines below are checked at least this often
    const int request = request_for(sigtimedwait(&waited, &info, &tick), received);
    if (request == SIGUSR2) {
      stop_now(Clock::now());
    } else if (request != 0) {
      signal_running(ranks, request);
    }
    int status = 0;
    for (pid_t done; (done = waitpid(-1, &status, WNOHANG)) > 0;) {
      for (std::size_t r = 0; r < ranks.size(); ++r) {
        if (ranks[r].pid != done) continue;
        ranks[r].running = false;
        const int code = exit_status(status);
        if (code == 0 || first_failure != 0) break;
        first_failure = code;
        failed_at = Clock::now();
        if (count_running(ranks) > 0 && !stopping) {
          std::fprintf(stderr, "odc-run: rank %zu (pid %d) failed (%s); stopping the other ranks in 5 s\n", r,
                       static_cast<int>(done), describe_status(status).c_str());
        } else {
          std::fprintf(stderr, "odc-run: rank %zu (pid %d) failed (%s)\n", r, static_cast<int>(done),
                       describe_status(status).c_str());
        }
        break;
      }
    }
    const auto now = Clock::now();
    if (count_running(ranks) == 0) break;
    if (first_failure != 0 && !stopping && now - failed_at >= kFailureGrace) {
      std::fprintf(stderr, "odc-run: stopping the %d rank(s) still running (SIGUSR2)\n", count_running(ranks));
      stop_now(now);
    }
    if (stopping && !killed && now - stopped_at >= kKillGrace) {
      std::fprintf(stderr, "odc-run: %d rank(s) still running 5 s after SIGUSR2: killing them (SIGKILL)\n",
                   count_running(ranks));
      signal_running(ranks, SIGKILL);
      killed = true;
    }
  }
  return first_failure;
}

int run_local(int size, const std::vector<std::string>& program, sigset_t waited) {
  const std::string job = "odc-" + std::to_string(getpid()) + "-" + std::to_string(std::time(nullptr));
  const pid_t launcher = getpid();
  std::vector<Rank> ranks;
  for (int r = 0; r < size; ++r) {
    const pid_t child = fork();
    if (child < 0) {
      std::fprintf(stderr, "odc-run: error: fork: %s\n", std::strerror(errno));
      signal_running(ranks, SIGKILL);
      for (const auto& started : ranks) waitpid(started.pid, nullptr, 0);
      return kExitNotStarted;
    }
    // The ranks start with the stop signals still blocked (a mask survives exec): a request that
    // arrives before a rank's main() sets up StopSignals stays pending instead of killing it.
    sigset_t unblocked;
    sigemptyset(&unblocked);
    sigaddset(&unblocked, SIGCHLD);
    if (child == 0) exec_rank(program, job, r, size, unblocked, launcher);
    ranks.push_back({child});
  }
  const int code = supervise_local(ranks, waited);
  // The ranks remove it once all have joined; this covers a rank 0 that died before that.
  shm_unlink(odc::distributed::local_segment_name(job).c_str());
  return code;
}

// The rank count of --local: 1 to kMaxLocalRanks; -1 if `text` is not one.
int parse_rank_count(const std::string& text) {
  int n = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return -1;
  return n >= 1 && n <= odc::distributed::kMaxLocalRanks ? n : -1;
}

int usage_error(const std::string& message) {
  std::fprintf(stderr, "odc-run: %s\n\n%s", message.c_str(), kUsage);
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mpirun = std::getenv("ODC_MPIRUN") != nullptr ? std::getenv("ODC_MPIRUN") : "mpirun";
  bool mpirun_given = false;
  std::string local;  // --local's value ("" = not given)
  std::vector<std::string> args;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--mpirun" || a.rfind("--mpirun=", 0) == 0) {
      if (a == "--mpirun" && (i + 1 >= argc || argv[i + 1][0] == '\0')) return usage_error("--mpirun needs a path");
      mpirun = a == "--mpirun" ? argv[++i] : a.substr(9);
      mpirun_given = true;
      continue;
    }
    if (a == "--local" || a.rfind("--local=", 0) == 0) {
      if (a == "--local" && i + 1 >= argc) return usage_error("--local needs a number of ranks");
      local = a == "--local" ? argv[++i] : a.substr(8);
      if (parse_rank_count(local) < 0) {
        return usage_error("--local expects a number of ranks from 1 to " +
                           std::to_string(odc::distributed::kMaxLocalRanks) + ", got '" + local + "'");
      }
      continue;
    }
    if (a == "--" && !local.empty()) ++i;  // ends odc-run's options; mpirun's own "--" is passed on
    break;
  }
  for (; i < argc; ++i) args.emplace_back(argv[i]);
  if (!local.empty() && mpirun_given) return usage_error("--local runs the program without mpirun: --mpirun does not apply");
  if (args.empty()) {
    return usage_error(local.empty() ? "no mpirun arguments (e.g. odc-run -np 2 odc-train config.yaml)"
                                     : "--local " + local + " needs a program to run (e.g. odc-run --local 2 odc-train config.yaml)");
  }
  // Blocked before the fork: a signal that arrives while the children start is held, not lost.
  sigset_t waited = stop_signals();
  sigaddset(&waited, SIGCHLD);
  sigprocmask(SIG_BLOCK, &waited, nullptr);
  // The ranks watch this pid (odc::train::StopSignals): when odc-run dies, even of SIGKILL, they stop.
  setenv("ODC_LAUNCHER_PID", std::to_string(getpid()).c_str(), 1);
  if (!local.empty()) return run_local(parse_rank_count(local), args, waited);
  const pid_t child = fork();
  if (child < 0) {
    std::fprintf(stderr, "odc-run: error: fork: %s\n", std::strerror(errno));
    return kExitNotStarted;
  }
  if (child == 0) exec_mpirun(mpirun, args);
  return supervise(child, waited);
}
