#pragma once
// Output paths that name a rank: train.metrics_file and train.trace_file take "{rank}".
#include <string>
#include <string_view>

namespace odc::train {

// An output path with "{rank}" replaced by `rank` ("metrics-{rank}.jsonl" gives every rank its own
// file); without the placeholder only rank 0 writes it, and every other rank gets "". Used for
// train.metrics_file (every rank) and train.trace_file (rank 0 writes the merged trace).
std::string rank_output_path(const std::string& pattern, int rank);
// odc::Error naming `key` for a brace in `pattern` that is not "{rank}" ("tr-{Rank}.json" was
// written under that very name): {rank} is the one placeholder.
void check_output_pattern(std::string_view key, const std::string& pattern);

}  // namespace odc::train
