#pragma once
// Helpers for the multi-rank tests: a shared ragged dataset, a small model config, and gathering
// sharded weights to rank 0.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <mpi.h>

#include "odc/core/config.h"
#include "odc/distributed/group/mpi_host_group.h"
#include "odc/distributed/shard/shard_store.h"

namespace odc::test {

int mpi_rank();
int mpi_world();
// The group of every rank of the test job (collective), watched with comm.timeout_s's default.
std::unique_ptr<distributed::MpiHostGroup> world_group();

// Writes (on rank 0) a dataset whose lengths vary from 3 to ~60 tokens, so ranks get different
// amounts of work; returns its path on every rank.
// `seed` picks another set of the same shape (a held-out set).
std::filesystem::path ragged_dataset(const std::string& name, int sequences, std::uint32_t seed = 2024);

Config small_config(const std::filesystem::path& data, int minibatch_size, const std::vector<std::string>& extra);

// Full unit buffers reassembled from every rank's shard (valid on rank 0).
std::vector<std::vector<float>> gather_weights(distributed::ShardStore& store);

// max |a - b| / max |b| over one buffer.
double relative_difference(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace odc::test
