// NCCL communicators bootstrapped over MPI: ncclGetUniqueId on the group's rank 0, MPI_Bcast,
// ncclCommInitRank. Ops are queued on the communicator's stream; the caller times them (CUPTI
// kernel durations, or steady_state_us on the host clock).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/collectives.h"
#include "core/checked_call.h"
#include "core/unique_handle.h"

namespace moe {

namespace {

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(MPI_Comm group, int device) : device_(device) {
    HARNESS_CHECK_MPI(MPI_Comm_dup(group, &group_));
    HARNESS_CHECK_MPI(MPI_Comm_rank(group_, &rank_));
    HARNESS_CHECK_MPI(MPI_Comm_size(group_, &size_));
    HARNESS_CHECK(cudaSetDevice(device_));
    ncclUniqueId id{};
    if (rank_ == 0) HARNESS_CHECK(ncclGetUniqueId(&id));
    HARNESS_CHECK_MPI(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, group_));
    HARNESS_CHECK(ncclCommInitRank(comm_.replace(), size_, id, rank_));
    HARNESS_CHECK(cudaStreamCreateWithFlags(stream_.replace(), cudaStreamNonBlocking));
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  // The members release themselves (buffers, events, stream, then the communicator) once the
  // stream's work is done.
  ~NcclCommunicator() override {
    if (stream_) HARNESS_CHECK_NOTHROW(cudaStreamSynchronize(stream_.get()));
    HARNESS_CHECK_MPI_NOTHROW(MPI_Comm_free(&group_));
  }

  std::string backend() const override { return "nccl"; }
  int size() const override { return size_; }
  int rank() const override { return rank_; }

  bool check(CollectiveOp op, std::int64_t total_bytes) override {
    const std::size_t per_rank =
        std::max<std::size_t>(1, static_cast<std::size_t>(total_bytes) / 4 / size_);
    const std::size_t total = per_rank * size_;
    reserve(total * 4);
    std::vector<float> host(op == CollectiveOp::all_gather ? per_rank : total);
    for (std::size_t i = 0; i < host.size(); ++i)
      host[i] = op == CollectiveOp::all_gather ? static_cast<float>(rank_ * 1000 + i % 997)
                : op == CollectiveOp::all_to_all
                    ? all_to_all_value(rank_, i / per_rank, i % per_rank)
                    : static_cast<float>(rank_ + 1);
    // Upload and poison on the collective's own (non-blocking) stream: legacy-stream copies and
    // memsets are not ordered before it and may still be landing when the collective runs.
    HARNESS_CHECK(cudaMemcpyAsync(send_.get(), host.data(), host.size() * 4, cudaMemcpyHostToDevice,
                                  stream_.get()));
    HARNESS_CHECK(cudaMemsetAsync(recv_.get(), 0xff, total * 4, stream_.get()));
    std::size_t out_count = total;
    switch (op) {
      case CollectiveOp::all_gather:
        HARNESS_CHECK(ncclAllGather(send_.get(), recv_.get(), per_rank, ncclFloat, comm_.get(),
                                    stream_.get()));
        break;
      case CollectiveOp::reduce_scatter:
        HARNESS_CHECK(ncclReduceScatter(send_.get(), recv_.get(), per_rank, ncclFloat, ncclSum,
                                        comm_.get(), stream_.get()));
        out_count = per_rank;
        break;
      case CollectiveOp::all_reduce:
        HARNESS_CHECK(ncclAllReduce(send_.get(), recv_.get(), total, ncclFloat, ncclSum,
                                    comm_.get(), stream_.get()));
        break;
      case CollectiveOp::all_to_all:
        exchange(per_rank, ncclFloat);
        break;
    }
    HARNESS_CHECK(cudaStreamSynchronize(stream_.get()));
    std::vector<float> out(out_count);
    HARNESS_CHECK(cudaMemcpy(out.data(), recv_.get(), out_count * 4, cudaMemcpyDeviceToHost));
    const float sum = static_cast<float>(size_ * (size_ + 1) / 2);
    for (std::size_t i = 0; i < out_count; ++i) {
      const float want = op == CollectiveOp::all_gather
                             ? static_cast<float>((i / per_rank) * 1000 + (i % per_rank) % 997)
                         : op == CollectiveOp::all_to_all
                             ? all_to_all_value(i / per_rank, rank_, i % per_rank)
                             : sum;
      if (out[i] != want) return false;
    }
    return true;
  }

  void launch(CollectiveOp op, std::int64_t total_bytes) override {
    const std::size_t per_rank =
        std::max<std::size_t>(1, static_cast<std::size_t>(total_bytes) / 2 / size_);
    reserve(per_rank * size_ * 2);
    switch (op) {
      case CollectiveOp::all_gather:
        HARNESS_CHECK(ncclAllGather(send_.get(), recv_.get(), per_rank, ncclBfloat16, comm_.get(),
                                    stream_.get()));
        break;
      case CollectiveOp::reduce_scatter:
        HARNESS_CHECK(ncclReduceScatter(send_.get(), recv_.get(), per_rank, ncclBfloat16, ncclSum,
                                        comm_.get(), stream_.get()));
        break;
      case CollectiveOp::all_reduce:
        HARNESS_CHECK(ncclAllReduce(send_.get(), recv_.get(), per_rank * size_, ncclBfloat16,
                                    ncclSum, comm_.get(), stream_.get()));
        break;
      case CollectiveOp::all_to_all:
        exchange(per_rank, ncclBfloat16);
        break;
    }
  }
  void synchronize() override { HARNESS_CHECK(cudaStreamSynchronize(stream_.get())); }
  void barrier() override { HARNESS_CHECK_MPI(MPI_Barrier(group_)); }
  double average(double value) override {
    double sum = 0;
    HARNESS_CHECK_MPI(MPI_Allreduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, group_));
    return sum / size_;
  }

 private:
  void reserve(std::size_t bytes) {
    if (bytes <= capacity_) return;
    HARNESS_CHECK(cudaMalloc(send_.replace(), bytes));
    HARNESS_CHECK(cudaMalloc(recv_.replace(), bytes));
    HARNESS_CHECK(cudaMemsetAsync(send_.get(), 0, bytes, stream_.get()));
    capacity_ = bytes;
  }

  // Rank r's element i of the chunk it sends to rank `to` in the all-to-all check.
  static float all_to_all_value(std::size_t from, std::size_t to, std::size_t i) {
    return static_cast<float>(from * 1000 + to * 10 + i % 7);
  }

  // nccl-tests' alltoall: `chunk` elements of the send buffer to every rank, grouped.
  void exchange(std::size_t chunk, ncclDataType_t type) {
    const std::size_t bytes = chunk * (type == ncclFloat ? 4 : 2);
    HARNESS_CHECK(ncclGroupStart());
    for (int peer = 0; peer < size_; ++peer) {
      HARNESS_CHECK(ncclSend(static_cast<char*>(send_.get()) + peer * bytes, chunk, type, peer,
                             comm_.get(), stream_.get()));
      HARNESS_CHECK(ncclRecv(static_cast<char*>(recv_.get()) + peer * bytes, chunk, type, peer,
                             comm_.get(), stream_.get()));
    }
    HARNESS_CHECK(ncclGroupEnd());
  }

  MPI_Comm group_ = MPI_COMM_NULL;
  int device_ = 0, rank_ = 0, size_ = 1;
  // Declared in creation order: destroyed in reverse.
  UniqueHandle<ncclComm_t, ncclCommDestroy> comm_;
  UniqueHandle<cudaStream_t, cudaStreamDestroy> stream_;
  UniqueHandle<void*, cudaFree> send_, recv_;
  std::size_t capacity_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm group, int device) {
  return std::make_unique<NcclCommunicator>(group, device);
}

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unavailable";
  return "nccl " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

}  // namespace moe
