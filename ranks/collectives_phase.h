// The collectives phase of `acquire` (docs/bundle-format.md): for every deployment of the plan that
// fits on the ranks, ranks [0, EP) form the deployment, split into TP and gather groups, and time
// the collectives of each target over the local token axis. Tables go to the shared HDF5 file.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "comm/collectives.h"
#include "core/planner.h"
#include "ranks/forward_timer.h"
#include "ranks/watchdog.h"
#include "store/acquisition_file.h"

namespace moe {

struct CollectivesReport {
  int tables = 0;                    // target tables written by this run
  std::vector<std::string> skipped;  // deployments that need more ranks than the job has
};

// Kernel time (µs) of `iterations` ops after `warmup` untimed ones, timed by `timer` (CUPTI: the
// NCCL kernel; host clock: the blocking MPI op). Every op starts after a barrier of the group, so
// a rank that arrives late is not timed as the collective.
[[nodiscard]] std::vector<double> collective_kernel_times(Communicator& c, ForwardTimer& timer,
                                                          CollectiveOp op, std::int64_t bytes,
                                                          int iterations, int warmup);

// Collective over `comm`. `nccl_device` >= 0 selects NCCL on that device, else mpi_host. `timer`
// times each op (the rank's forward timer: CUPTI kernel time with NCCL, host clock on mpi_host).
// `watchdog` (optional) watches each collective case.
CollectivesReport measure_collectives(MPI_Comm comm, const Plan& plan, int nccl_device,
                                      AcquisitionFile& file, ForwardTimer& timer,
                                      Watchdog* watchdog = nullptr);

}  // namespace moe
