// What every measuring rank sets up first: its node-local rank, its backend (one GPU per rank by
// node-local rank, never by global rank), its CPU binding local to the GPU's NUMA node, and its
// forward timer.
#pragma once

#include <mpi.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/workload.h"
#include "ranks/affinity.h"
#include "ranks/forward_timer.h"

namespace moe {

struct RankContext {
  int rank = 0, size = 1;                   // in the job's communicator
  int node_rank = 0, node_size = 1;         // on this node
  int device = -1;                          // CUDA device of a GPU backend (select_device), else -1
  MPI_Comm node = MPI_COMM_NULL;            // ranks of this node (owned)
  std::string host;                         // gethostname
  std::vector<std::string> node_gpu_uuids;  // the GPUs of this node's ranks, sorted (GPU backends)
  std::unique_ptr<Backend> backend;
  std::unique_ptr<ForwardTimer> timer;
  CpuBinding binding;
  std::string locality;  // "verified numa N" | "unknown (no NUMA information)" | "cpu backend"
  [[nodiscard]] bool gpu() const { return backend->timing() == "cupti_activity"; }

  RankContext() = default;
  RankContext(const RankContext&) = delete;
  RankContext& operator=(const RankContext&) = delete;
  ~RankContext();
};

// The CUDA device of node-local rank `node_rank` of `node_size` when `visible` devices are
// visible to the process: with at least one per rank (mpirun, srun --gpus-per-node) the node-local
// rank's; with exactly one (srun --gpus-per-task=1 gives each task its own GPU as device 0)
// device 0. Throws naming the counts otherwise.
[[nodiscard]] int select_device(int node_rank, int node_size, int visible);
// The first two node-local ranks whose device ids are equal (ranks that would share a GPU).
[[nodiscard]] std::optional<std::pair<int, int>> shared_device(const std::vector<std::string>& ids);

// The backend a job resolves to on this machine ("auto" -> native with a GPU, the faster CUDA
// backend at every size `harness bench experts` measures; else cpu_reference).
[[nodiscard]] std::string resolve_backend(const std::string& requested);

// Collective over `comm`. `requested_backend` as in the job ("auto" resolves per machine).
// Throws when a node runs more ranks than it has GPUs in GPU mode, or when the CPUs the rank may
// use have none on its GPU's NUMA node. The ranks of a node whose GPUs share a NUMA node split
// its CPUs (bind_to_cpus).
[[nodiscard]] std::unique_ptr<RankContext> make_rank_context(MPI_Comm comm,
                                                             const std::string& requested_backend,
                                                             bool keep_launcher_binding);

}  // namespace moe
