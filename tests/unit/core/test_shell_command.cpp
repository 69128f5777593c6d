// run_shell_command: an external command line that can be stopped (a timeout, a stop request) with
// every process it started, whatever signal mask its caller runs with, and leaves nothing running
// when it ends; describe_wait_status tells how a command ended in words.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "odc/core/error.h"
#include "odc/core/process_stats.h"
#include "odc/core/shell_command.h"
#include "odc/core/wait_status.h"
#include "unit/temp_dir.h"

using odc::ShellCommandResult;

namespace {

// The pids a command wrote to `path`, one per line.
std::vector<int> pids_in(const std::string& path) {
  std::ifstream in(path);
  std::vector<int> pids;
  for (int pid = 0; in >> pid;) pids.push_back(pid);
  return pids;
}

bool gone(int pid) {
  const auto stat = odc::read_process_stat(pid);
  return !stat || stat->exited();
}

}  // namespace

TEST_CASE("describe_wait_status: how a command ended, as a person says it", "[core]") {
  using odc::describe_wait_status;
  CHECK(describe_wait_status(0) == "exit status 0");
  CHECK(describe_wait_status(3 << 8) == "exit status 3");  // std::system's 768
  CHECK(describe_wait_status(127 << 8) == "not found (exit 127)");
  CHECK(describe_wait_status(126 << 8) == "not executable (exit 126)");
  CHECK(describe_wait_status(SIGKILL) == "killed by SIGKILL");
  CHECK(describe_wait_status(SIGSEGV | 0x80) == "killed by SIGSEGV (core dumped)");  // WCOREDUMP's bit
  CHECK(describe_wait_status(139 << 8) == "exit status 139 (128 + SIGSEGV: a command the shell ran was killed by SIGSEGV)");
  CHECK(describe_wait_status(200 << 8) == "exit status 200");
}

TEST_CASE("run_shell_command: stdin and stdout files, the exit status, whatever the caller blocks", "[core]") {
  const odc::test::TempDir dir("shell_command");
  const std::string in = dir.write("in.txt", "a\nb\n"), out = dir.file("out.txt");
  // The caller blocks SIGTERM (as odc-train does in every thread): the command still gets it by default.
  sigset_t term, before;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &term, &before);
  const auto r = odc::run_shell_command("wc -l; kill -TERM $$; echo not reached", in, out, 10, {});
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  CHECK(r.ended == ShellCommandResult::Ended::exited);
  CHECK(odc::describe_wait_status(r.wait_status) == "exit status 143 (128 + SIGTERM: a command the shell ran was killed by SIGTERM)");
  std::ifstream written(out);
  std::string line;
  REQUIRE(std::getline(written, line));
  CHECK(line == "2");
  CHECK_FALSE(std::getline(written, line));
  CHECK(odc::run_shell_command("exit 3", in, out, 10, {}).wait_status == (3 << 8));
  CHECK_THROWS_WITH(odc::run_shell_command("true", dir.file("missing.txt"), out, 10, {}),
                    Catch::Contains("cannot start 'true' with /bin/sh") && Catch::Contains("missing.txt"));
  // What it leaves running when it ends is killed with it.
  const std::string pids = dir.file("pids.txt");
  CHECK(odc::run_shell_command("sleep 60 & echo $! > " + pids, in, out, 10, {}).wait_status == 0);
  const auto left = pids_in(pids);
  REQUIRE(left.size() == 1);
  for (int i = 0; i < 100 && !gone(left[0]); ++i) usleep(10'000);  // the group's watcher acts a moment later
  CHECK(gone(left[0]));
}

TEST_CASE("run_shell_command: a timeout or a stop kills the whole group, at once", "[core]") {
  const odc::test::TempDir dir("shell_command_kill");
  const std::string in = dir.write("in.txt", ""), out = dir.file("out.txt"), pids = dir.file("pids.txt");
  // The shell, a background child and one that ignores SIGTERM (SIGKILL after the grace ends it).
  const std::string command = "echo $$ > " + pids + "; sleep 60 & echo $! >> " + pids +
                              "; (trap '' TERM; sleep 60) & echo $! >> " + pids + "; wait";
  const auto start = std::chrono::steady_clock::now();
  const auto r = odc::run_shell_command(command, in, out, 0.3, {});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(r.ended == ShellCommandResult::Ended::timed_out);
  // 0.3 s, then at most the kill grace (2 s) for the one that ignores SIGTERM; 1 s of slack for a
  // loaded machine.
  CHECK(seconds < 0.3 + 2.0 + 1.0);
  const auto started = pids_in(pids);
  REQUIRE(started.size() == 3);
  // Reparented children are reaped by init a moment later: wait up to 1 s for them.
  for (int i = 0; i < 100 && !(gone(started[1]) && gone(started[2])); ++i) usleep(10'000);
  for (const int pid : started) CHECK(gone(pid));

  int asked = 0;
  const auto stopped = odc::run_shell_command("sleep 60", in, out, 0, [&] { return ++asked > 5; });
  CHECK(stopped.ended == ShellCommandResult::Ended::stopped);
  CHECK(stopped.seconds < 2.0);  // 5 polls of 20 ms, then sleep dies of SIGTERM
}

// `setsid sleep 100009 &` left the group, so the group's kill missed it: it outlived the call, on a
// normal end and on a timeout alike, while the error said every process was killed.
TEST_CASE("run_shell_command: a process that left the group (setsid, a double fork) is killed too", "[core]") {
  const odc::test::TempDir dir("shell_command_setsid");
  const std::string in = dir.write("in.txt", ""), out = dir.file("out.txt"), pids = dir.file("pids.txt");
  // A new session, and a double fork inside one: both leave the group and lose their parent.
  const std::string escape = "setsid sh -c 'echo $$ >> " + pids + "; exec sleep 60' & (setsid sh -c 'sleep 60 & echo $! >> " +
                             pids + "' &); until [ \"$(wc -l < " + pids + ")\" = 2 ]; do sleep 0.01; done";
  for (const double timeout : {0.0, 2.0}) {
    std::remove(pids.c_str());
    const auto r = odc::run_shell_command(escape + (timeout > 0 ? "; sleep 60" : ""), in, out, timeout, {});
    CHECK(r.ended == (timeout > 0 ? ShellCommandResult::Ended::timed_out : ShellCommandResult::Ended::exited));
    const auto escaped = pids_in(pids);
    REQUIRE(escaped.size() == 2);
    for (const int pid : escaped) CHECK(gone(pid));  // at once: reaped before the call returned
  }
}
