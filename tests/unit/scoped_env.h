#pragma once
// Sets an environment variable for one scope, so a failing test cannot leak it into the next.
#include <cstdlib>
#include <string>
#include <utility>

namespace odc::test {

class ScopedEnv {
 public:
  ScopedEnv(std::string name, const std::string& value) : name_(std::move(name)) {
    setenv(name_.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() { unsetenv(name_.c_str()); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
};

}  // namespace odc::test
