// Variable-length byte strings between the ranks of a communicator: gathered from every rank
// (HDF5 metadata that must be created collectively, provenance, per-node verdicts) or broadcast
// from one (decisions rank 0 derives from files only it reads).
#pragma once

#include <mpi.h>

#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace moe {

// Element i is rank i's `mine`. root < 0: every rank receives all; else only `root` does (the
// others get an empty vector).
[[nodiscard]] std::vector<std::string> gather_strings(MPI_Comm comm, const std::string& mine,
                                                      int root = -1);

// Every rank returns root's `text` (the others' argument is ignored). Collective.
[[nodiscard]] std::string broadcast_string(MPI_Comm comm, std::string text, int root = 0);

// The same for a vector of trivially copyable values (sent as bytes).
template <class T>
[[nodiscard]] std::vector<std::vector<T>> gather_vectors(MPI_Comm comm, const std::vector<T>& mine,
                                                         int root = -1) {
  static_assert(std::is_trivially_copyable_v<T>);
  std::string bytes(mine.size() * sizeof(T), '\0');
  if (!mine.empty()) std::memcpy(bytes.data(), mine.data(), bytes.size());
  std::vector<std::vector<T>> out;
  for (const auto& part : gather_strings(comm, bytes, root)) {
    std::vector<T> values(part.size() / sizeof(T));
    if (!values.empty()) std::memcpy(values.data(), part.data(), part.size());
    out.push_back(std::move(values));
  }
  return out;
}

}  // namespace moe
