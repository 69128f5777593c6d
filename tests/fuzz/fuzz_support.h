#pragma once
// Shared by the fuzz targets whose readers only take a path: a per-process scratch directory that
// each iteration overwrites, removed when the fuzzer exits normally. It lives on /dev/shm when that
// is a writable directory (a memory file system: no disk traffic, and the fsync of the binary
// dataset writer costs nothing), else under the system temporary directory ($TMPDIR or /tmp).
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "odc/core/error.h"
#include "odc/data/bin_dataset.h"
#include "odc/data/bin_dataset_writer.h"
#include "odc/data/dataset.h"

namespace odc::fuzz {

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name) {
    std::error_code ec;
    std::filesystem::path base = "/dev/shm";
    if (!std::filesystem::is_directory(base, ec) || ::access(base.c_str(), W_OK) != 0) {
      base = std::filesystem::temp_directory_path();
    }
    path_ = base / ("odc_fuzz_" + name + "_" + std::to_string(::getpid()));
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  // Replaces NAME in the directory with `bytes`; returns its path.
  std::string write(const std::string& name, std::string_view bytes) const {
    const std::string file = (path_ / name).string();
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) __builtin_trap();  // the harness itself failed: nothing below would mean anything
    return file;
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// An odc::Error whose message marks a broken internal invariant (ODC_CHECK) is a bug, not a
// rejection of bad input. With ODC_FUZZ_VERBOSE set, every rejection is printed (to check which
// error a seed reaches: ODC_FUZZ_VERBOSE=1 OUT/fuzz_NAME tests/fuzz/corpus/NAME/*).
inline void check_rejection(const odc::Error& error) {
  static const bool verbose = std::getenv("ODC_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "rejected: %s\n", error.what());
  // ODC_CHECK's message starts so; a rejection may quote the input anywhere after its own prefix.
  if (std::string_view(error.what()).starts_with("internal check failed at ")) __builtin_trap();
}

// Writes `dataset` as a binary pair under `prefix` (odc-data convert's step) and traps unless it
// reads back as the same sequences, masks and target counts.
inline void check_binary_round_trip(const odc::data::TokenDataset& dataset, std::int64_t vocab,
                                    const std::string& prefix) {
  odc::data::write_bin_dataset(prefix, dataset);
  const odc::data::BinTokenDataset binary(prefix, vocab);
  if (binary.size() != dataset.size()) __builtin_trap();
  for (std::int64_t i = 0; i < dataset.size(); ++i) {
    const auto a = dataset.get(i);
    const auto b = binary.get(i);
    if (!std::equal(a.tokens.begin(), a.tokens.end(), b.tokens.begin(), b.tokens.end()) ||
        !std::equal(a.target_mask.begin(), a.target_mask.end(), b.target_mask.begin(),
                    b.target_mask.end()) ||
        binary.target_count(i) != dataset.target_count(i)) {
      __builtin_trap();
    }
  }
}

}  // namespace odc::fuzz
