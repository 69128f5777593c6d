#pragma once
// DirectoryLock: one job at a time on a checkpoint directory. The holder keeps an exclusive
// flock(2) on DIR/.lock for its lifetime and writes who it is into the file (run id, host, pid,
// start time), so that a second job is refused with a message naming the first. The kernel drops
// the lock when the holder's process ends in any way (exit, crash, SIGKILL): a .lock file left
// behind is never stale, only its text is (and it is rewritten by the next holder).
//
// flock works on local file systems and on NFSv4 (emulated with byte-range locks); where the file
// system refuses locks altogether, acquire() reports that in `unlocked_reason` and returns an
// unlocked object instead of failing the run.
#include <string>

#include <nlohmann/json.hpp>

#include "odc/core/file_descriptor.h"

namespace odc::io {

struct LockHolder {
  std::string run_id;  // "" while the run's identity is still being decided
  std::string host;
  long pid = 0;
  std::string since;  // UTC, ISO 8601
  nlohmann::json to_json() const;
  // What the .lock file says; fields that are missing or torn read as "?".
  static LockHolder from_text(const std::string& text);
};

// This process as a lock holder: host name, pid, the current time.
LockHolder this_process(const std::string& run_id);

class DirectoryLock {
 public:
  // Creates `dir` if needed and locks `dir`/.lock without waiting. odc::Error when another
  // process holds it: "checkpoint directory '<dir>' is in use by run R (host H, pid P, since T)",
  // or when `dir` cannot be created ("checkpoint: cannot create '<dir>': <reason>").
  DirectoryLock(const std::string& dir, const LockHolder& me);
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  ~DirectoryLock() = default;  // closing the descriptor releases the lock

  bool locked() const { return locked_; }
  // Why the file system gave no lock (empty when locked).
  const std::string& unlocked_reason() const { return unlocked_reason_; }
  // Rewrites the holder's text (the run id, once decided).
  void update(const LockHolder& me);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  FileDescriptor fd_;
  bool locked_ = false;
  std::string unlocked_reason_;
};

}  // namespace odc::io
