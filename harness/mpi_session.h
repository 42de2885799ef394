// MPI lifetime for one subcommand, and the rule that a failing rank aborts the job (it cannot
// leave the others waiting at the next collective).
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <string>
#include <thread>

#include "core/checked_call.h"
#include "core/files.h"

namespace moe::cli {

class MpiSession {
 public:
  // Errors of MPI calls are returned, not fatal, so that every checked call names the failing
  // call and its place (core/checked_call.h) before the job is aborted.
  MpiSession() {
    int initialized = 0;
    HARNESS_CHECK_MPI(MPI_Initialized(&initialized));
    if (!initialized) HARNESS_CHECK_MPI(MPI_Init(nullptr, nullptr));
    HARNESS_CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  }
  ~MpiSession() {
    int finalized = 0;
    if (HARNESS_CHECK_MPI_NOTHROW(MPI_Finalized(&finalized)) && !finalized)
      HARNESS_CHECK_MPI_NOTHROW(MPI_Finalize());
  }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  // Runs `body(rank)`; on an exception prints one error line and aborts every rank with 1. An
  // error every rank meets (a refused plan, an unusable --out) is printed once, by rank 0: the
  // other ranks wait a moment before printing, and rank 0's abort ends them first. An error of
  // one rank alone is still printed by that rank.
  int run_or_abort(const std::string& command, const std::function<void(int)>& body) {
    int rank = 0;
    HARNESS_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    try {
      body(rank);
    } catch (const std::exception& e) {
      if (rank != 0) std::this_thread::sleep_for(std::chrono::seconds(2));
      std::cerr << "harness " << command << " (rank " << rank
                << "): error: " << printable_text(e.what()) << std::endl;
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return 0;
  }
};

}  // namespace moe::cli
