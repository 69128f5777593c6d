// DirectoryLock: one holder at a time per directory (flock on DIR/.lock), the second refused with
// the first one's run, host, pid and start time; released when the holder goes.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include <catch2/catch.hpp>

#include "odc/core/error.h"
#include "odc/io/directory_lock.h"
#include "unit/temp_dir.h"

using namespace odc;

TEST_CASE("directory lock: a second holder is refused naming the first, released on destruction", "[io][lock]") {
  const test::TempDir tmp("dirlock");
  const std::string dir = tmp.file("ckpt");  // created by the lock
  {
    io::DirectoryLock first(dir, io::this_process(""));
    REQUIRE(first.locked());
    REQUIRE(std::filesystem::is_directory(dir));
    first.update(io::this_process("run-A"));
    std::ifstream in(std::filesystem::path(dir) / ".lock");
    const auto text = nlohmann::json::parse(in);
    CHECK(text["run_id"] == "run-A");
    CHECK(text["pid"] == static_cast<long>(::getpid()));

    // flock treats every open of the file apart, so a second holder in this process is refused
    // just as a second job would be.
    try {
      io::DirectoryLock second(dir, io::this_process("run-B"));
      FAIL("the second lock was granted");
    } catch (const Error& e) {
      const std::string message = e.what();
      CHECK_THAT(message, Catch::Contains("checkpoint directory '" + dir + "' is in use by run run-A (host "));
      CHECK_THAT(message, Catch::Contains(", pid " + std::to_string(::getpid()) + ", since 20"));
      CHECK_THAT(message, Catch::Contains("another checkpoint.dir"));
    }
  }
  // The first holder is gone: the lock is free again (the .lock file stays, its text is stale).
  io::DirectoryLock again(dir, io::this_process("run-C"));
  CHECK(again.locked());
}

TEST_CASE("directory lock: holder text that is torn or missing reads as unknown fields", "[io][lock]") {
  const auto torn = io::LockHolder::from_text("{\"run_id\": \"r1\", \"ho");
  CHECK((torn.run_id == "?" && torn.host == "?" && torn.pid == 0 && torn.since == "?"));
  const auto partial = io::LockHolder::from_text(R"({"run_id": "r2", "pid": 42})");
  CHECK((partial.run_id == "r2" && partial.host == "?" && partial.pid == 42 && partial.since == "?"));
}

TEST_CASE("directory lock: a directory that cannot be created is an error naming it", "[io][lock]") {
  const test::TempDir tmp("dirlock_file");
  const std::string file = tmp.write("plain", "x");
  CHECK_THROWS_WITH(io::DirectoryLock(file + "/ckpt", io::this_process("")),
                    Catch::Contains("checkpoint: cannot create '" + file + "/ckpt'"));
}
