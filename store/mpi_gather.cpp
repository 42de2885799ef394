#include "store/mpi_gather.h"

#include <limits>
#include <stdexcept>

#include "core/checked_call.h"

namespace moe {

std::vector<std::string> gather_strings(MPI_Comm comm, const std::string& mine, int root) {
  int rank = 0, size = 1;
  HARNESS_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  HARNESS_CHECK_MPI(MPI_Comm_size(comm, &size));
  if (mine.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw std::length_error("gather_strings: more than 2 GiB from one rank");
  const int len = static_cast<int>(mine.size());
  const bool all = root < 0;
  std::vector<int> lens(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size));
  if (all)
    HARNESS_CHECK_MPI(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm));
  else
    HARNESS_CHECK_MPI(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, root, comm));
  long long total = 0;
  for (std::size_t i = 0; i < lens.size(); ++i) {
    if (total > std::numeric_limits<int>::max())
      throw std::length_error("gather_strings: more than 2 GiB in all");
    displs[i] = static_cast<int>(total);
    total += lens[i];
  }
  std::string joined(static_cast<std::size_t>(all || rank == root ? total : 0), '\0');
  if (all)
    HARNESS_CHECK_MPI(MPI_Allgatherv(mine.data(), len, MPI_CHAR, joined.data(), lens.data(),
                                     displs.data(), MPI_CHAR, comm));
  else
    HARNESS_CHECK_MPI(MPI_Gatherv(mine.data(), len, MPI_CHAR, joined.data(), lens.data(),
                                  displs.data(), MPI_CHAR, root, comm));
  std::vector<std::string> parts;
  if (!all && rank != root) return parts;
  for (std::size_t i = 0; i < lens.size(); ++i)
    parts.push_back(
        joined.substr(static_cast<std::size_t>(displs[i]), static_cast<std::size_t>(lens[i])));
  return parts;
}

std::string broadcast_string(MPI_Comm comm, std::string text, int root) {
  if (text.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw std::length_error("broadcast_string: more than 2 GiB");
  int len = static_cast<int>(text.size());
  HARNESS_CHECK_MPI(MPI_Bcast(&len, 1, MPI_INT, root, comm));
  text.resize(static_cast<std::size_t>(len));
  HARNESS_CHECK_MPI(MPI_Bcast(text.data(), len, MPI_CHAR, root, comm));
  return text;
}

}  // namespace moe
