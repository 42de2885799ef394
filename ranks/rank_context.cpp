#include "ranks/rank_context.h"

#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "core/checked_call.h"
#include "core/job_spec.h"
#include "store/mpi_gather.h"

namespace moe {

std::string resolve_backend(const std::string& requested) {
  if (requested != "auto") return requested;
  return cuda_device_count() > 0 ? "native" : "cpu_reference";
}

int select_device(int node_rank, int node_size, int visible) {
  if (visible >= node_size) return node_rank;
  if (visible == 1) return 0;
  throw std::runtime_error(
      "this node runs " + std::to_string(node_size) + " ranks and each sees " +
      std::to_string(visible) + " GPUs: give every rank its own GPU (one visible GPU per task, " +
      "e.g. srun --gpus-per-task=1, or at least one visible GPU per rank of the node)");
}

std::optional<std::pair<int, int>> shared_device(const std::vector<std::string>& ids) {
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (std::size_t j = i + 1; j < ids.size(); ++j)
      if (ids[i] == ids[j]) return std::pair{static_cast<int>(i), static_cast<int>(j)};
  return std::nullopt;
}

RankContext::~RankContext() {
  if (node != MPI_COMM_NULL) HARNESS_CHECK_MPI_NOTHROW(MPI_Comm_free(&node));
}

std::unique_ptr<RankContext> make_rank_context(MPI_Comm comm, const std::string& requested_backend,
                                               bool keep_launcher_binding) {
  auto ctx = std::make_unique<RankContext>();
  HARNESS_CHECK_MPI(MPI_Comm_rank(comm, &ctx->rank));
  HARNESS_CHECK_MPI(MPI_Comm_size(comm, &ctx->size));
  HARNESS_CHECK_MPI(
      MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, ctx->rank, MPI_INFO_NULL, &ctx->node));
  HARNESS_CHECK_MPI(MPI_Comm_rank(ctx->node, &ctx->node_rank));
  HARNESS_CHECK_MPI(MPI_Comm_size(ctx->node, &ctx->node_size));
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  ctx->host = host;
  const auto name = resolve_backend(requested_backend);
  std::optional<int> numa;
  if (host_backend(name)) {
    ctx->backend = make_backend(name, -1);
    ctx->locality = "cpu backend";
  } else {
    const int devices = cuda_device_count();
    if (devices == 0) throw std::runtime_error("backend " + name + " needs a GPU; none is visible");
    ctx->device = select_device(ctx->node_rank, ctx->node_size, devices);
    ctx->backend = make_backend(name, ctx->device);
    const auto props = ctx->backend->device_properties();
    // Each task seeing one GPU as device 0 is only right when the launcher gave them different
    // GPUs: compare the UUIDs of the node's ranks.
    const auto uuids = gather_strings(ctx->node, props.count("uuid") ? props.at("uuid") : "");
    ctx->node_gpu_uuids = uuids;
    std::sort(ctx->node_gpu_uuids.begin(), ctx->node_gpu_uuids.end());
    if (const auto pair = shared_device(uuids))
      throw std::runtime_error("node-local ranks " + std::to_string(pair->first) + " and " +
                               std::to_string(pair->second) + " would share GPU " +
                               uuids[static_cast<std::size_t>(pair->first)] +
                               ": give every rank its own GPU");
    if (auto it = props.find("pci_bus_id"); it != props.end()) numa = numa_node_of_pci(it->second);
    ctx->locality = numa ? "verified numa " + std::to_string(*numa)
                         : "unknown (no NUMA information for the GPU)";
  }
  // The node's ranks whose GPUs share this rank's NUMA node split its CPUs.
  std::vector<int> nodes(static_cast<std::size_t>(ctx->node_size));
  const int mine = numa.value_or(-1);
  HARNESS_CHECK_MPI(MPI_Allgather(&mine, 1, MPI_INT, nodes.data(), 1, MPI_INT, ctx->node));
  int peers = 0, index = 0;
  for (int r = 0; r < ctx->node_size; ++r)
    if (nodes[static_cast<std::size_t>(r)] == mine) {
      if (r < ctx->node_rank) ++index;
      ++peers;
    }
  ctx->binding = bind_to_cpus(index, peers, numa, keep_launcher_binding);
  ctx->timer = make_forward_timer(ctx->backend->timing());
  return ctx;
}

}  // namespace moe
