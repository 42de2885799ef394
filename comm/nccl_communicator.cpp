// NCCL communicators bootstrapped over MPI: ncclGetUniqueId on the group's rank 0, MPI_Bcast,
// ncclCommInitRank. Ops time with CUDA events on the communicator's stream (device time).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/collectives.h"

namespace moe {

namespace {

#define NCCL_CHECK(expr)                                                                 \
  do {                                                                                   \
    const ncclResult_t moe_rc_ = (expr);                                                 \
    if (moe_rc_ != ncclSuccess)                                                          \
      throw std::runtime_error(std::string(#expr) + ": " + ncclGetErrorString(moe_rc_)); \
  } while (false)

#define CUDA_RT_CHECK(expr)                                                              \
  do {                                                                                   \
    const cudaError_t moe_rc_ = (expr);                                                  \
    if (moe_rc_ != cudaSuccess)                                                          \
      throw std::runtime_error(std::string(#expr) + ": " + cudaGetErrorString(moe_rc_)); \
  } while (false)

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(MPI_Comm group, int device) : device_(device) {
    MPI_Comm_rank(group, &rank_);
    MPI_Comm_size(group, &size_);
    CUDA_RT_CHECK(cudaSetDevice(device_));
    ncclUniqueId id{};
    if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    if (MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, group) != MPI_SUCCESS)
      throw std::runtime_error("MPI_Bcast of the NCCL id failed");
    NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
    CUDA_RT_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_RT_CHECK(cudaEventCreate(&start_));
    CUDA_RT_CHECK(cudaEventCreate(&stop_));
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  ~NcclCommunicator() override {
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
    cudaStreamDestroy(stream_);
    if (send_) cudaFree(send_);
    if (recv_) cudaFree(recv_);
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
                                               : static_cast<float>(rank_ + 1);
    // Upload and poison on the collective's own (non-blocking) stream: legacy-stream copies and
    // memsets are not ordered before it and may still be landing when the collective runs.
    CUDA_RT_CHECK(cudaMemcpyAsync(send_, host.data(), host.size() * 4, cudaMemcpyHostToDevice,
                                  stream_));
    CUDA_RT_CHECK(cudaMemsetAsync(recv_, 0xff, total * 4, stream_));
    std::size_t out_count = total;
    switch (op) {
      case CollectiveOp::all_gather:
        NCCL_CHECK(ncclAllGather(send_, recv_, per_rank, ncclFloat, comm_, stream_));
        break;
      case CollectiveOp::reduce_scatter:
        NCCL_CHECK(ncclReduceScatter(send_, recv_, per_rank, ncclFloat, ncclSum, comm_, stream_));
        out_count = per_rank;
        break;
      case CollectiveOp::all_reduce:
        NCCL_CHECK(ncclAllReduce(send_, recv_, total, ncclFloat, ncclSum, comm_, stream_));
        break;
    }
    CUDA_RT_CHECK(cudaStreamSynchronize(stream_));
    std::vector<float> out(out_count);
    CUDA_RT_CHECK(cudaMemcpy(out.data(), recv_, out_count * 4, cudaMemcpyDeviceToHost));
    const float sum = static_cast<float>(size_ * (size_ + 1) / 2);
    for (std::size_t i = 0; i < out_count; ++i) {
      const float want = op == CollectiveOp::all_gather
                             ? static_cast<float>((i / per_rank) * 1000 + (i % per_rank) % 997)
                             : sum;
      if (out[i] != want) return false;
    }
    return true;
  }

  std::vector<double> time(CollectiveOp op, std::int64_t total_bytes, int iterations,
                           int warmup) override {
    for (int i = 0; i < warmup; ++i) run(op, total_bytes);
    std::vector<double> out;
    for (int i = 0; i < iterations; ++i) {
      CUDA_RT_CHECK(cudaEventRecord(start_, stream_));
      launch(op, total_bytes);
      CUDA_RT_CHECK(cudaEventRecord(stop_, stream_));
      CUDA_RT_CHECK(cudaEventSynchronize(stop_));
      float ms = 0;
      CUDA_RT_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
      out.push_back(ms * 1000.0);
    }
    return out;
  }

  void run(CollectiveOp op, std::int64_t total_bytes) override {
    launch(op, total_bytes);
    CUDA_RT_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  void reserve(std::size_t bytes) {
    if (bytes <= capacity_) return;
    if (send_) CUDA_RT_CHECK(cudaFree(send_));
    if (recv_) CUDA_RT_CHECK(cudaFree(recv_));
    CUDA_RT_CHECK(cudaMalloc(&send_, bytes));
    CUDA_RT_CHECK(cudaMalloc(&recv_, bytes));
    CUDA_RT_CHECK(cudaMemsetAsync(send_, 0, bytes, stream_));
    capacity_ = bytes;
  }

  // bf16 elements: the dtype of the hidden states and reductions.
  void launch(CollectiveOp op, std::int64_t total_bytes) {
    const std::size_t per_rank =
        std::max<std::size_t>(1, static_cast<std::size_t>(total_bytes) / 2 / size_);
    reserve(per_rank * size_ * 2);
    switch (op) {
      case CollectiveOp::all_gather:
        NCCL_CHECK(ncclAllGather(send_, recv_, per_rank, ncclBfloat16, comm_, stream_));
        break;
      case CollectiveOp::reduce_scatter:
        NCCL_CHECK(
            ncclReduceScatter(send_, recv_, per_rank, ncclBfloat16, ncclSum, comm_, stream_));
        break;
      case CollectiveOp::all_reduce:
        NCCL_CHECK(
            ncclAllReduce(send_, recv_, per_rank * size_, ncclBfloat16, ncclSum, comm_, stream_));
        break;
    }
  }

  int device_ = 0, rank_ = 0, size_ = 1;
  ncclComm_t comm_{};
  cudaStream_t stream_{};
  cudaEvent_t start_{}, stop_{};
  void* send_ = nullptr;
  void* recv_ = nullptr;
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
