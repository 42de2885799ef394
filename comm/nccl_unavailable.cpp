// NCCL entry points in a build without CUDA (HARNESS_WITH_CUDA=OFF).
#include <stdexcept>

#include "comm/collectives.h"

namespace moe {

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm, int) {
  throw std::runtime_error(
      "NCCL needs a harness built with HARNESS_WITH_CUDA=ON; use the mpi_host backend");
}

std::string nccl_version() {
  return "unavailable";
}

}  // namespace moe
