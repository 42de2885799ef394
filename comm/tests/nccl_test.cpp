// GPU test (label `gpu`): the NCCL communicator bootstrapped over MPI on this process' GPU
// (a one-rank communicator when run directly; any number of ranks under mpiexec).
#include <gtest/gtest.h>
#include <mpi.h>

#include "comm/collectives.h"
#include "kernels/workload.h"

namespace moe {
namespace {

TEST(Nccl, CommunicatorChecksAndTimesEveryOpIncludingAllToAll) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  auto comm = make_nccl_communicator(MPI_COMM_WORLD, rank % cuda_device_count());
  EXPECT_EQ(comm->backend(), "nccl");
  EXPECT_NE(nccl_version(), "unavailable");
  for (auto op : {CollectiveOp::all_gather, CollectiveOp::reduce_scatter, CollectiveOp::all_reduce,
                  CollectiveOp::all_to_all})
    for (std::int64_t bytes : {std::int64_t{4096}, std::int64_t{8} << 20}) {
      EXPECT_TRUE(comm->check(op, bytes)) << to_string(op) << " " << bytes;
      EXPECT_GT(steady_state_us(*comm, op, bytes, 5), 0.0) << to_string(op) << " " << bytes;
    }
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  MPI_Finalize();
  return rc;
}
