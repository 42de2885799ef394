// Collectives of the MoE communication model (docs/bundle-format.md): communicators over
// MPI-bootstrapped NCCL or plain MPI (`mpi_host`, for machines without GPUs), nccl-tests bandwidth
// factors, the collective cases of a deployment target, and the analytical worst-rank ring
// envelope.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/geometry.h"

namespace moe {

// all_to_all: the EP exchange (dispatch and combine) as nccl-tests' alltoall: each rank sends an
// equal chunk of its buffer to every rank (grouped ncclSend/ncclRecv, MPI_Alltoall).
enum class CollectiveOp { all_gather, reduce_scatter, all_reduce, all_to_all };
[[nodiscard]] std::string_view to_string(CollectiveOp op);

// nccl-tests bus-bandwidth factor: AllReduce 2(n-1)/n; AllGather, ReduceScatter, AlltoAll
// (n-1)/n.
[[nodiscard]] double bus_factor(CollectiveOp op, int ranks);

struct Bandwidth {
  double algbw_gbps;  // total buffer bytes / time
  double busbw_gbps;  // algbw * bus_factor
};
// `total_bytes` is the whole buffer (nccl-tests convention: the gathered size for AllGather and
// ReduceScatter, the buffer size for AllReduce, one rank's send buffer for AlltoAll).
[[nodiscard]] Bandwidth bandwidth(CollectiveOp op, int ranks, std::int64_t total_bytes,
                                  double time_us);

// Worst-rank ring envelope for unequal per-rank contributions (bytes): a ring runs n-1 steps
// (2(n-1) for AllReduce), each as slow as the largest chunk in flight: steps * (alpha + max_chunk /
// beta). With equal chunks it is the usual ring time. `alpha_us` per step, `beta` in bytes per µs.
[[nodiscard]] double ring_envelope_us(CollectiveOp op, std::span<const std::int64_t> per_rank_bytes,
                                      double alpha_us, double beta_bytes_per_us);

// One collective of the measured sequence at one token count.
struct CollectiveCase {
  std::string name;  // allgather_hidden, allgather_topk_weights, allgather_topk_ids,
                     // reducescatter, tp_allgather, tp_allreduce
  CollectiveOp op;
  std::string group;  // gather (EP group under SP, DP group otherwise) | tp | ep (all ranks)
  int group_size;
  std::int64_t tokens;       // per-DP-rank tokens (the local components' token axis)
  std::int64_t total_bytes;  // whole buffer
};

// Ranks of `group` ("gather", "tp" or "ep") containing deployment rank `rank` (TP-major placement:
// rank = dp_index * TP + tp_index).
[[nodiscard]] std::vector<int> group_members(const Target& t, const std::string& group);

// The cases of docs/bundle-format.md for target `t` over `tokens` (per-DP-rank counts, uniform
// across DP).
[[nodiscard]] std::vector<CollectiveCase> collective_cases(const ModelGeometry& g, const Target& t,
                                                           std::span<const std::int64_t> tokens);

class Communicator {
 public:
  virtual ~Communicator() = default;
  [[nodiscard]] virtual std::string backend() const = 0;  // nccl | mpi_host
  [[nodiscard]] virtual int size() const = 0;
  [[nodiscard]] virtual int rank() const = 0;
  // Runs `op` once on patterned data and checks every element of the result.
  [[nodiscard]] virtual bool check(CollectiveOp op, std::int64_t total_bytes) = 0;
  // Queues one op on the communicator's stream (NCCL: asynchronous; MPI: complete on return).
  virtual void launch(CollectiveOp op, std::int64_t total_bytes) = 0;
  // Waits for every queued op.
  virtual void synchronize() = 0;
  // Host barrier over the group's ranks.
  virtual void barrier() = 0;
  // The mean of `value` over the group's ranks.
  [[nodiscard]] virtual double average(double value) = 0;
  // One complete op (background traffic).
  void run(CollectiveOp op, std::int64_t total_bytes) {
    launch(op, total_bytes);
    synchronize();
  }
};

// The steady-state time of `op` (µs), as nccl-tests reports it by default: one untimed op, a
// barrier, `iterations` ops back to back, host time until the last completes divided by
// `iterations`, averaged over the group's ranks (docs/bundle-format.md#collective-tables).
[[nodiscard]] double steady_state_us(Communicator& c, CollectiveOp op, std::int64_t total_bytes,
                                     int iterations);

// MPI collectives over a duplicate of `group` (float sums for reductions).
[[nodiscard]] std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm group);
// NCCL communicator bootstrapped over `group` (ncclGetUniqueId on its rank 0, MPI_Bcast,
// ncclCommInitRank) on CUDA device `device`; bf16 sums. Throws without CUDA.
[[nodiscard]] std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm group, int device);
// "nccl 2.28.3" or "unavailable".
[[nodiscard]] std::string nccl_version();

}  // namespace moe
