#pragma once
// The contract between `odc-run --local N` and the processes it starts (ShmHostGroup,
// make_local_group_from_env): the environment variables that name the job and each rank, and the
// shared-memory name a job's ranks meet at. Header-only, no dependencies: odc-run uses it without
// linking the library.
#include <string>
#include <string_view>

namespace odc::distributed {

inline constexpr const char* kLocalJobVariable = "ODC_LOCAL_JOB";    // the job's id, unique on the host
inline constexpr const char* kLocalRankVariable = "ODC_LOCAL_RANK";  // 0 .. size - 1
inline constexpr const char* kLocalSizeVariable = "ODC_LOCAL_SIZE";  // the number of ranks
inline constexpr int kMaxLocalRanks = 256;

// The POSIX shared-memory name of a job's rendezvous segment (/dev/shm/odc-host-group-JOB). The
// ranks unlink it once all have joined; odc-run removes it again after its children ended, in case
// rank 0 died before that.
inline std::string local_segment_name(std::string_view job) { return "/odc-host-group-" + std::string(job); }

}  // namespace odc::distributed
