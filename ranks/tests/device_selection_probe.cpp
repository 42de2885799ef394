// The harness's GPU choice under a real launcher, without GPUs: each rank splits its node the way
// make_rank_context does, counts the GPUs the CUDA runtime would report from CUDA_VISIBLE_DEVICES
// (the variable Slurm's gres/gpu plugin and mpirun's environment hand over), picks its device with
// select_device and maps it back to the node's GPU index. Rank 0 prints one line per rank and
// exits 2 when two ranks of a node would share a GPU (what make_rank_context refuses by UUID).
// Used by tests/integration/test_slurm_devices.py.
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "core/checked_call.h"
#include "ranks/rank_context.h"
#include "store/mpi_gather.h"

namespace {

std::vector<std::string> visible_gpus() {
  std::vector<std::string> ids;
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  if (env == nullptr) return ids;
  std::stringstream list(env);
  for (std::string id; std::getline(list, id, ',');)
    if (!id.empty()) ids.push_back(id);
  return ids;
}

int probe(MPI_Comm world) {
  int rank = 0;
  MPI_Comm node = MPI_COMM_NULL;
  int node_rank = 0, node_size = 0;
  HARNESS_CHECK_MPI(MPI_Comm_rank(world, &rank));
  HARNESS_CHECK_MPI(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  HARNESS_CHECK_MPI(MPI_Comm_rank(node, &node_rank));
  HARNESS_CHECK_MPI(MPI_Comm_size(node, &node_size));
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const auto gpus = visible_gpus();
  std::string line, gpu;
  try {
    const int device = moe::select_device(node_rank, node_size, static_cast<int>(gpus.size()));
    gpu = gpus.at(static_cast<std::size_t>(device));
    line = "device " + std::to_string(device) + " gpu " + gpu;
  } catch (const std::exception& e) {
    line = std::string("refused: ") + e.what();
  }
  line = "rank " + std::to_string(rank) + " host " + host + " local " + std::to_string(node_rank) +
         "/" + std::to_string(node_size) + " CUDA_VISIBLE_DEVICES=" +
         (std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "") + " " +
         line;
  const auto node_gpus =
      moe::gather_strings(node, gpu.empty() ? "rank" + std::to_string(rank) : gpu);
  const auto shared = moe::shared_device(node_gpus);
  HARNESS_CHECK_MPI(MPI_Comm_free(&node));
  const auto lines = moe::gather_strings(world, line + (shared ? " SHARED" : ""));
  int status = shared ? 2 : 0;
  HARNESS_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &status, 1, MPI_INT, MPI_MAX, world));
  if (rank == 0)
    for (const auto& l : lines) std::printf("%s\n", l.c_str());
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  int status = 1;
  try {
    HARNESS_CHECK_MPI(MPI_Init(&argc, &argv));
    status = probe(MPI_COMM_WORLD);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "device_selection_probe: %s\n", e.what());
  }
  MPI_Finalize();
  return status;
}
