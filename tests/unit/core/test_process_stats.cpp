#include <fcntl.h>
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
