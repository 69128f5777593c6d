#pragma once
// Outputs a run writes only at its end (the trace, the Hugging Face export) are proven writable
// before training starts, so a typo or a read-only path costs seconds, not the run.
#include <string>

namespace odc::train {

// `path` will be written as a file: its directory is created if missing, and the file itself is
// opened for appending (created and removed again when it did not exist). odc::Error naming
// `key`, the path and the reason otherwise.
void probe_output_file(const std::string& path, const std::string& key);

// `dir` will be created (or replaced) as a directory: it exists as a directory, or its nearest
// existing ancestor is one, and a file can be created there (removed again at once). Nothing is
// left behind. odc::Error naming `key`, the path and the reason otherwise.
void probe_output_directory(const std::string& dir, const std::string& key);

}  // namespace odc::train
