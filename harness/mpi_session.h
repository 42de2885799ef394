// MPI lifetime for one subcommand, and the rule that a failing rank aborts the job (it cannot
// leave the others waiting at the next collective).
#pragma once

#include <mpi.h>

#include <functional>
#include <iostream>
#include <string>

namespace moe::cli {

class MpiSession {
 public:
  MpiSession() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) MPI_Init(nullptr, nullptr);
  }
  ~MpiSession() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  // Runs `body(rank)`; on an exception prints one error line and aborts every rank with 1.
  int run_or_abort(const std::string& command, const std::function<void(int)>& body) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    try {
      body(rank);
    } catch (const std::exception& e) {
      std::cerr << "harness " << command << " (rank " << rank << "): error: " << e.what()
                << std::endl;
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return 0;
  }
};

}  // namespace moe::cli
