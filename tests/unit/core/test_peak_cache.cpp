// The cached best FMA peak (core/peak_cache.h): reused and only raised, kept per key, a broken
// file or entry ignored with a warning (never an exception), an unusable location reported.
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "odc/core/cpu_features.h"
#include "odc/core/peak_cache.h"
#include "unit/log_capture.h"
#include "unit/temp_dir.h"

using namespace odc;

namespace {

constexpr double kCeiling = 1e12;

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// Sets an environment variable for one scope and puts the old value back.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value == nullptr) {
      ::unsetenv(name);
    } else {
      ::setenv(name, value, 1);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

TEST_CASE("peak cache: the cached best is reused and only raised, per key", "[core][peak_cache]") {
  const test::TempDir dir("peak_cache");
  const std::string file = dir.file("sub/dir/cpu-peak.json");  // the directories are created
  const test::LogCapture log;

  const CachedPeak first = fold_peak_into_cache(file, "cpu A | avx2 fp32 | 1 thread", 100e9, kCeiling);
  CHECK(first.flops == 100e9);
  CHECK(first.measured == 100e9);
  CHECK(first.previous == 0.0);
  CHECK(first.measurements == 1);
  CHECK(first.file == file);

  // A slower measurement (a busy machine) does not lower the peak: the cached best is reused.
  const CachedPeak slower = fold_peak_into_cache(file, "cpu A | avx2 fp32 | 1 thread", 62e9, kCeiling);
  CHECK(slower.flops == 100e9);
  CHECK(slower.measured == 62e9);
  CHECK(slower.previous == 100e9);
  CHECK(slower.measurements == 2);
  CHECK(slower.describe().find("best of 2 measurements") != std::string::npos);
  CHECK(slower.describe().find("this run measured 62.0 GFLOP/s") != std::string::npos);

  // A faster one raises it.
  const CachedPeak faster = fold_peak_into_cache(file, "cpu A | avx2 fp32 | 1 thread", 120e9, kCeiling);
  CHECK(faster.flops == 120e9);
  CHECK(faster.previous == 100e9);
  CHECK(faster.measurements == 3);
  CHECK(faster.describe().find("raised from 100.0 GFLOP/s by this run") != std::string::npos);

  // Another key (another thread count) is a separate entry.
  const CachedPeak two_threads = fold_peak_into_cache(file, "cpu A | avx2 fp32 | 2 threads", 150e9, kCeiling);
  CHECK(two_threads.flops == 150e9);
  CHECK(two_threads.measurements == 1);

  const auto cache = read_json(file);
  CHECK(cache["peaks"]["cpu A | avx2 fp32 | 1 thread"]["flops"].get<double>() == 120e9);
  CHECK(cache["peaks"]["cpu A | avx2 fp32 | 1 thread"]["measurements"].get<int>() == 3);
  CHECK(cache["peaks"]["cpu A | avx2 fp32 | 2 threads"]["flops"].get<double>() == 150e9);
  CHECK(log.count("[warning]") == 0);
}

TEST_CASE("peak cache: a corrupt file is ignored with a warning and rewritten, not a crash", "[core][peak_cache]") {
  const test::TempDir dir("peak_cache_corrupt");
  const test::LogCapture log;
  for (const std::string content : {"{not json", "[1, 2]", "{\"peaks\": 7}", ""}) {
    INFO("cache file content: " << content);
    const std::string file = dir.write("cpu-peak.json", content);
    CachedPeak peak;
    REQUIRE_NOTHROW(peak = fold_peak_into_cache(file, "k", 90e9, kCeiling));
    CHECK(peak.flops == 90e9);
    CHECK(peak.measurements == 1);
    CHECK(read_json(file)["peaks"]["k"]["flops"].get<double>() == 90e9);  // rewritten, valid again
  }
  CHECK(log.count("is not a JSON object with a \"peaks\" object: ignored") == 4);
}

TEST_CASE("peak cache: an entry that is no plausible rate is ignored with a warning", "[core][peak_cache]") {
  const test::TempDir dir("peak_cache_entry");
  const test::LogCapture log;
  // A string, a negative rate, a rate above the ceiling (an edited file: it would shrink every MFU).
  for (const std::string entry : {"{\"flops\": \"fast\"}", "{\"flops\": -5}", "{\"flops\": 5e13, \"measurements\": 9}"}) {
    INFO("entry: " << entry);
    const std::string file = dir.write("cpu-peak.json", "{\"peaks\": {\"k\": " + entry + "}}");
    const CachedPeak peak = fold_peak_into_cache(file, "k", 80e9, kCeiling);
    CHECK(peak.flops == 80e9);
    CHECK(peak.previous == 0.0);
    CHECK(peak.measurements == 1);
  }
  CHECK(log.count("holds no usable rate for 'k'") == 3);
}

TEST_CASE("peak cache: an implausible measurement is used but not cached", "[core][peak_cache]") {
  const test::TempDir dir("peak_cache_ceiling");
  const std::string file = dir.file("cpu-peak.json");
  fold_peak_into_cache(file, "k", 100e9, kCeiling);
  const test::LogCapture log;
  const CachedPeak peak = fold_peak_into_cache(file, "k", 2 * kCeiling, kCeiling);
  CHECK(peak.flops == 100e9);  // the cached best: the measurement is not believed
  CHECK(log.count("is not a rate this CPU can reach") == 1);
  CHECK(read_json(file)["peaks"]["k"]["flops"].get<double>() == 100e9);
  CHECK(read_json(file)["peaks"]["k"]["measurements"].get<int>() == 1);
}

TEST_CASE("peak cache: no file, or one that cannot be made, gives the measurement alone", "[core][peak_cache]") {
  const test::TempDir dir("peak_cache_unusable");
  const test::LogCapture log;
  const CachedPeak none = fold_peak_into_cache("", "k", 70e9, kCeiling);
  CHECK(none.flops == 70e9);
  CHECK(none.file.empty());
  CHECK(none.describe() == "this measurement alone (no peak cache)");
  CHECK(log.count("[warning]") == 0);

  const std::string blocker = dir.write("a-file", "x");  // a regular file where a directory should be
  const CachedPeak blocked = fold_peak_into_cache(blocker + "/odc/cpu-peak.json", "k", 70e9, kCeiling);
  CHECK(blocked.flops == 70e9);
  CHECK(blocked.file.empty());
  CHECK(log.count("cannot be used") == 1);
}

TEST_CASE("peak cache: the path follows ODC_PEAK_CACHE, XDG_CACHE_HOME, HOME", "[core][peak_cache]") {
  {
    const ScopedEnv explicit_path("ODC_PEAK_CACHE", "/tmp/x/peaks.json");
    CHECK(peak_cache_path() == "/tmp/x/peaks.json");
  }
  {
    const ScopedEnv off("ODC_PEAK_CACHE", "off");
    CHECK(peak_cache_path().empty());
  }
  const ScopedEnv unset("ODC_PEAK_CACHE", nullptr);
  {
    const ScopedEnv xdg("XDG_CACHE_HOME", "/tmp/xdg");
    CHECK(peak_cache_path() == "/tmp/xdg/odc/cpu-peak.json");
  }
  const ScopedEnv no_xdg("XDG_CACHE_HOME", nullptr);
  const ScopedEnv home("HOME", "/home/someone");
  CHECK(peak_cache_path() == "/home/someone/.cache/odc/cpu-peak.json");
}

TEST_CASE("peak cache: the key names the CPU, the FMA loop, the dtype and the threads", "[core][peak_cache]") {
  CpuFeatures cpu;
  cpu.name = "Intel(R) Xeon(R) Processor";
  cpu.family = 6;
  cpu.model = 207;
  cpu.fma_path = "avx512f";
  CHECK(peak_cache_key(cpu, 1) == "Intel(R) Xeon(R) Processor (family 6 model 207) | avx512f fp32 | 1 thread");
  CHECK(peak_cache_key(cpu, 4) == "Intel(R) Xeon(R) Processor (family 6 model 207) | avx512f fp32 | 4 threads");
  // 16 lanes x 2 FLOPs x 2 FMA units x 6 GHz per thread.
  CHECK(plausible_peak_ceiling("avx512f", 1) == 384e9);
  CHECK(plausible_peak_ceiling("avx2", 2) == 384e9);
  CHECK(plausible_peak_ceiling("sse", 1) == 96e9);
}

TEST_CASE("cpu_peak_flops measures, caches, and a second call reuses the best", "[core][peak_cache]") {
  const test::TempDir dir("peak_cache_cpu");
  const ScopedEnv cache("ODC_PEAK_CACHE", dir.file("cpu-peak.json").c_str());
  const CachedPeak first = cpu_peak_flops(1);
  CHECK(first.flops > 0.0);
  CHECK(first.flops <= plausible_peak_ceiling(detect_cpu_features().fma_path, 1));
  CHECK(first.measurements == 1);
  const CachedPeak second = cpu_peak_flops(1);
  CHECK(second.measurements == 2);
  CHECK(second.previous == first.flops);
  CHECK(second.flops >= first.flops);  // never lowered, whatever this measurement gave
  const auto entry = read_json(dir.file("cpu-peak.json"))["peaks"][peak_cache_key(detect_cpu_features(), 1)];
  CHECK(entry["flops"].get<double>() == second.flops);
}
