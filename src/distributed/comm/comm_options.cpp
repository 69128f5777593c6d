#include "odc/distributed/comm/comm_options.h"

#include <utility>

namespace odc::distributed {

CommFacts comm_facts(const CommOptions& options, int world_size, std::string state_device, bool over_mpi, int hosts) {
  CommFacts facts;
  facts.world_size = world_size;
  facts.kind = options.kind;
  facts.transport = options.odc_transport;
  facts.gather_dtype = options.gather_dtype;
  facts.host_staging = options.host_staging;
  facts.state_device = std::move(state_device);
  facts.over_mpi = over_mpi;
  facts.hosts = hosts;
#if defined(ODC_HAVE_CUDA)
  facts.cuda_build = true;
#endif
  return facts;
}

}  // namespace odc::distributed
