#include "odc/core/peak_cache.h"

#include <fcntl.h>
#include <sys/file.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "odc/core/atomic_file.h"
#include "odc/core/error.h"
#include "odc/core/file_descriptor.h"

namespace odc {

namespace {

constexpr const char* kPeaks = "peaks";

// An entry's value when it is one a measurement could have given; 0 otherwise.
double valid_flops(const nlohmann::json& entry, double ceiling) {
  if (!entry.is_object() || !entry.contains("flops") || !entry["flops"].is_number()) return 0.0;
  const double flops = entry["flops"].get<double>();
  return std::isfinite(flops) && flops > 0 && flops <= ceiling ? flops : 0.0;
}

// The file's content as a JSON object with a "peaks" object; a broken file is reported and
// replaced by an empty one (the cache is an optimisation: it never stops a run).
nlohmann::json read_cache(const std::string& file) {
  std::ifstream in(file);
  if (!in) return {{kPeaks, nlohmann::json::object()}};  // not there yet
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json cache = nlohmann::json::parse(text.str(), nullptr, false);
  if (cache.is_discarded() || !cache.is_object() || !cache.contains(kPeaks) || !cache[kPeaks].is_object()) {
    spdlog::warn("the peak FLOP/s cache {} is not a JSON object with a \"peaks\" object: ignored, and rewritten "
                 "from this measurement",
                 file);
    return {{kPeaks, nlohmann::json::object()}};
  }
  return cache;
}

}  // namespace

std::string CachedPeak::describe() const {
  if (file.empty()) return "this measurement alone (no peak cache)";
  if (measured > previous && previous > 0) {
    return fmt::format("best of {} measurements ({}), raised from {:.1f} GFLOP/s by this run", measurements, file,
                       previous / 1e9);
  }
  return fmt::format("best of {} measurement{} ({}; this run measured {:.1f} GFLOP/s)", measurements,
                     measurements == 1 ? "" : "s", file, measured / 1e9);
}

std::string peak_cache_path() {
  if (const char* explicit_path = std::getenv("ODC_PEAK_CACHE"); explicit_path != nullptr) {
    const std::string path(explicit_path);
    return path == "off" ? std::string() : path;
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return (std::filesystem::path(xdg) / "odc" / "cpu-peak.json").string();
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return (std::filesystem::path(home) / ".cache" / "odc" / "cpu-peak.json").string();
  }
  return "";
}

std::string peak_cache_key(const CpuFeatures& cpu, int threads) {
  return fmt::format("{} (family {} model {}) | {} fp32 | {} thread{}", cpu.name, cpu.family, cpu.model,
                     cpu.fma_path, threads, threads == 1 ? "" : "s");
}

double plausible_peak_ceiling(std::string_view fma_path, int threads) {
  const double lanes = fma_path == "avx512f" ? 16 : fma_path == "avx2" ? 8 : fma_path == "sse" ? 4 : 1;
  return lanes * 2.0 * 2.0 * 6e9 * std::max(threads, 1);
}

CachedPeak fold_peak_into_cache(const std::string& file, const std::string& key, double measured, double ceiling) {
  CachedPeak peak;
  peak.flops = peak.measured = measured;
  peak.measurements = 1;
  if (file.empty()) return peak;
  const bool believable = std::isfinite(measured) && measured > 0 && measured <= ceiling;
  if (!believable) {
    spdlog::warn("the measured peak {:.1f} GFLOP/s is not a rate this CPU can reach (ceiling {:.1f}): not cached in {}",
                 measured / 1e9, ceiling / 1e9, file);
  }
  const auto unusable = [&](const std::string& why) {
    spdlog::warn("the peak FLOP/s cache {} cannot be used ({}): the peak is this run's measurement alone", file, why);
    return peak;
  };
  std::error_code ec;
  const auto parent = std::filesystem::path(file).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return unusable(fmt::format("creating its directory: {}", ec.message()));
  // The lock lives beside the file (the file itself is replaced by a rename on every update).
  const std::string lock_path = file + ".lock";
  FileDescriptor lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (lock.get() < 0) return unusable(fmt::format("opening {}: {}", lock_path, std::strerror(errno)));
  int locked = 0;
  while ((locked = ::flock(lock.get(), LOCK_EX)) != 0 && errno == EINTR) {
  }
  if (locked != 0) return unusable(fmt::format("locking {}: {}", lock_path, std::strerror(errno)));

  nlohmann::json cache = read_cache(file);
  nlohmann::json& peaks = cache[kPeaks];
  std::int64_t count = 0;
  if (peaks.contains(key)) {
    const nlohmann::json& entry = peaks[key];
    peak.previous = valid_flops(entry, ceiling);
    if (peak.previous == 0.0) {
      spdlog::warn("the peak FLOP/s cache {} holds no usable rate for '{}' ({}): ignored, and rewritten from this "
                   "measurement",
                   file, key, entry.dump());
    } else if (entry.contains("measurements") && entry["measurements"].is_number_integer()) {
      count = std::max<std::int64_t>(entry["measurements"].get<std::int64_t>(), 1);
    } else {
      count = 1;
    }
  }
  peak.flops = std::max(peak.previous, believable ? measured : 0.0);
  if (peak.flops == 0.0) peak.flops = measured;  // nothing believable anywhere: the caller's number
  peak.measurements = count + (believable ? 1 : 0);
  peak.file = file;
  if (!believable) return peak;
  peaks[key] = {{"flops", peak.flops}, {"measurements", peak.measurements}};
  try {
    write_file_atomically(file, cache.dump(2) + "\n");
  } catch (const Error& e) {
    spdlog::warn("the peak FLOP/s cache {} cannot be written ({}): later runs will not see this measurement", file,
                 e.what());
  }
  return peak;
}

CachedPeak cpu_peak_flops(int threads) {
  const CpuFeatures cpu = detect_cpu_features();
  const double measured = measure_fma_peak_flops(threads);
  return fold_peak_into_cache(peak_cache_path(), peak_cache_key(cpu, threads), measured,
                              plausible_peak_ceiling(cpu.fma_path, threads));
}

}  // namespace odc
