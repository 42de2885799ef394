// Run under mpiexec with several ranks: the mpi_host communicator gives correct data for every op
// (all-to-all included) and a positive steady-state time, equal on every rank (the group mean).
#include <mpi.h>

#include <cstdio>

#include "comm/collectives.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1, failures = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  {
    auto comm = moe::make_mpi_communicator(MPI_COMM_WORLD);
    if (comm->size() != size || comm->rank() != rank || comm->backend() != "mpi_host") ++failures;
    for (auto op : {moe::CollectiveOp::all_gather, moe::CollectiveOp::reduce_scatter,
                    moe::CollectiveOp::all_reduce, moe::CollectiveOp::all_to_all})
      for (std::int64_t bytes : {std::int64_t{64}, std::int64_t{4096 * 4}, std::int64_t{1 << 20}}) {
        if (!comm->check(op, bytes)) {
          std::fprintf(stderr, "rank %d: %s of %lld bytes returned wrong data\n", rank,
                       std::string(moe::to_string(op)).c_str(), static_cast<long long>(bytes));
          ++failures;
        }
        const double t = moe::steady_state_us(*comm, op, bytes, 5);
        double lo = 0, hi = 0;
        MPI_Allreduce(&t, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(&t, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (!(t > 0) || lo != hi) ++failures;
      }
  }
  int all = 0;
  MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf(all ? "FAILED: %d failures\n" : "ok: %d failures on %d ranks\n", all, size);
  MPI_Finalize();
  return all ? 1 : 0;
}
