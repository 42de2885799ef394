#include "ranks/rank_context.h"

#include <stdexcept>
#include <vector>

#include "core/checked_call.h"

namespace moe {

std::string resolve_backend(const std::string& requested) {
  if (requested != "auto") return requested;
  return cuda_device_count() > 0 ? "native" : "cpu_reference";
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
  const auto name = resolve_backend(requested_backend);
  std::optional<int> numa;
  if (host_backend(name)) {
    ctx->backend = make_backend(name, -1);
    ctx->locality = "cpu backend";
  } else {
    const int devices = cuda_device_count();
    if (ctx->node_size > devices)
      throw std::runtime_error("backend " + name + " needs one GPU per rank, but this node runs " +
                               std::to_string(ctx->node_size) + " ranks and has " +
                               std::to_string(devices) + " GPUs");
    ctx->backend = make_backend(name, ctx->node_rank);
    const auto props = ctx->backend->device_properties();
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
