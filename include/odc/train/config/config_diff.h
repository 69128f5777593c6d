#pragma once
// What a resume changes: the keys of this job's configuration whose values differ from the
// configuration a checkpoint saved (its manifest's "config", the effective YAML of the job that
// wrote it). Values are compared in Config's canonical form, so 3e-4 and 0.0003 are the same.
#include <string>
#include <vector>

#include "odc/core/config.h"

namespace odc::train {

struct ConfigChange {
  std::string key;    // "train.lr"
  std::string saved;  // the checkpoint's value, canonical ("0.001", "null" for unset)
  std::string now;    // this job's
};

// The keys (in declaration order) whose saved value differs from `current`'s. Keys that are
// meant to change between the jobs of a run (checkpoint.resume, train.stop_at_step) are not
// compared, nor keys the saved text does not hold or this version no longer declares (named in
// `skipped` when given). odc::Error when `saved_yaml` is not a YAML mapping.
std::vector<ConfigChange> config_changes(const std::string& saved_yaml, const Config& current,
                                         std::vector<std::string>* skipped = nullptr);

// "train.lr 0.001 -> 0.002, train.schedule cosine -> linear"
std::string describe_changes(const std::vector<ConfigChange>& changes);

}  // namespace odc::train
