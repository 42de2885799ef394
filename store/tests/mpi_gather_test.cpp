// Run under mpiexec with several ranks: every rank contributes a different amount (rank r sends r
// bytes, and r values), including an empty part on rank 0; broadcasts replace every rank's text.
#include "store/mpi_gather.h"

#include <cstdio>
#include <string>

namespace {

int failures = 0;

void expect(bool ok, const std::string& what, int rank) {
  if (ok) return;
  std::fprintf(stderr, "rank %d: %s\n", rank, what.c_str());
  ++failures;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::string mine(static_cast<std::size_t>(rank), static_cast<char>('a' + rank));
  const auto all = moe::gather_strings(MPI_COMM_WORLD, mine);
  expect(static_cast<int>(all.size()) == size, "all-gather returned the wrong count", rank);
  for (int r = 0; r < size && r < static_cast<int>(all.size()); ++r)
    expect(all[r] == std::string(static_cast<std::size_t>(r), static_cast<char>('a' + r)),
           "all-gather part " + std::to_string(r) + " is wrong", rank);
  const auto at_root = moe::gather_strings(MPI_COMM_WORLD, mine, size - 1);
  expect(rank == size - 1 ? static_cast<int>(at_root.size()) == size : at_root.empty(),
         "gather to the last rank delivered to the wrong ranks", rank);
  std::vector<long long> values(static_cast<std::size_t>(rank), 1000LL * rank);
  const auto vectors = moe::gather_vectors(MPI_COMM_WORLD, values);
  for (int r = 0; r < size; ++r)
    expect(vectors[r] == std::vector<long long>(static_cast<std::size_t>(r), 1000LL * r),
           "vector part " + std::to_string(r) + " is wrong", rank);
  // Broadcast from the last rank: the others pass text of other lengths, all receive root's.
  const std::string sent = rank == size - 1 ? std::string(37, 'z') + "end" : mine;
  expect(moe::broadcast_string(MPI_COMM_WORLD, sent, size - 1) == std::string(37, 'z') + "end",
         "broadcast from the last rank is wrong", rank);
  expect(moe::broadcast_string(MPI_COMM_WORLD, rank == 0 ? "" : "x").empty(),
         "an empty broadcast is not empty", rank);
  int any = 0;
  MPI_Allreduce(&failures, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) std::printf("gather helper: %d failures over %d ranks\n", any, size);
  MPI_Finalize();
  return any == 0 ? 0 : 1;
}
