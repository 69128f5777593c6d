#pragma once
// The config's key paths as text (config.cpp): sections and last parts of dotted paths, the
// declaration of a path, the message for an unknown key with its nearest declared one, and the
// environment variable of a key (ODC_<PATH>) with the ODC_ variables that are not keys.
#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "odc/core/config.h"

namespace odc::config_keys {

// "a.b.c" -> {"a", "b", "c"}.
std::vector<std::string> split_path(std::string_view path);
// "train.lr" -> "train"; "train.lr" -> "lr".
std::string section_of(const std::string& path);
std::string key_of(const std::string& path);
// The sections of `specs`, in declaration order, once each.
std::vector<std::string> section_names(const std::vector<TunableSpec>& specs);
// The declaration of `path`, or nullptr.
const TunableSpec* find_spec(const std::vector<TunableSpec>& specs, const std::string& path);

// "unknown config key 'train.lrr' in run.yaml:3; did you mean 'train.lr'?" A typo anywhere in the
// path is caught by edit distance; a right key in the wrong section by matching the last part. An
// empty `where` means the program itself asked for an undeclared key.
std::string unknown_key_message(const std::string& key, const std::string& where,
                                const std::vector<TunableSpec>& specs);

// train.lr -> ODC_TRAIN_LR.
std::string environment_variable(const std::string& path);
std::string upper(std::string_view text);

// ODC_ variables that are not config keys (launcher, logging, build and test hooks): never
// reported, whatever the sections. Keep in sync with docs/training.md ("Environment variables").
inline constexpr std::array<std::string_view, 9> kNonConfigVariables = {
    "ODC_LOCAL_JOB", "ODC_LOCAL_RANK", "ODC_LOCAL_SIZE",  "ODC_LAUNCHER",    "ODC_LOG_ALL_RANKS",
    "ODC_MPIRUN",    "ODC_PYTHON_ENV", "ODC_TORCH_PYTHON", "ODC_BUILD_DIR"};

}  // namespace odc::config_keys
