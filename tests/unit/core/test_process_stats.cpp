#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include <catch2/catch.hpp>

#include "odc/core/process_stats.h"

TEST_CASE("process stats follow open descriptors and resident memory") {
  const auto before = odc::read_process_stats();
  REQUIRE(before.rss_bytes > 0);
  REQUIRE(before.peak_rss_bytes >= before.rss_bytes);
  REQUIRE(before.open_fds >= 3);  // stdin, stdout, stderr at least
  REQUIRE(before.threads >= 1);

  std::vector<int> fds;
  for (int i = 0; i < 5; ++i) fds.push_back(open("/dev/null", O_RDONLY));
  CHECK(odc::read_process_stats().open_fds == before.open_fds + 5);
  for (int fd : fds) close(fd);
  CHECK(odc::read_process_stats().open_fds == before.open_fds);

  // Touch 64 MiB: the resident set grows by about that much (page cache and allocator slack aside).
  std::vector<char> block(64u << 20);
  for (std::size_t i = 0; i < block.size(); i += 4096) block[i] = static_cast<char>(i);
  const auto after = odc::read_process_stats();
  CHECK(after.rss_bytes - before.rss_bytes >= (60 << 20));
  CHECK(after.peak_rss_bytes >= after.rss_bytes);
}

TEST_CASE("read_process_stat: name, state and start time of a process, an exited child is a zombie, none for a gone pid",
          "[core]") {
  const auto self = odc::read_process_stat(static_cast<long>(getpid()));
  REQUIRE(self);
  CHECK(self->name == "odc_unit_tests");  // comm: the executable name, at most 15 bytes
  CHECK_FALSE(self->exited());
  CHECK(self->state == 'R');  // reading its own stat, this thread runs
  CHECK_FALSE(self->start_time.empty());
  CHECK(odc::read_process_stat(static_cast<long>(getpid()))->start_time == self->start_time);

  const pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(child > 0);
  // Not reaped yet: a zombie until waitpid (polled: the child needs a moment to exit).
  bool zombie = false;
  for (int i = 0; i < 500 && !zombie; ++i) {
    const auto stat = odc::read_process_stat(static_cast<long>(child));
    zombie = stat && stat->exited();
    if (!zombie) usleep(10'000);
  }
  CHECK(zombie);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK_FALSE(odc::read_process_stat(static_cast<long>(child)));
}
