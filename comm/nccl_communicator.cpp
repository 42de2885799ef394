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
#include "core/checked_call.h"
#include "core/unique_handle.h"

namespace moe {

namespace {

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(MPI_Comm group, int device) : device_(device) {
    HARNESS_CHECK_MPI(MPI_Comm_rank(group, &rank_));
    HARNESS_CHECK_MPI(MPI_Comm_size(group, &size_));
    HARNESS_CHECK(cudaSetDevice(device_));
    ncclUniqueId id{};
    if (rank_ == 0) HARNESS_CHECK(ncclGetUniqueId(&id));
    HARNESS_CHECK_MPI(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, group));
    HARNESS_CHECK(ncclCommInitRank(comm_.replace(), size_, id, rank_));
    HARNESS_CHECK(cudaStreamCreateWithFlags(stream_.replace(), cudaStreamNonBlocking));
    HARNESS_CHECK(cudaEventCreate(start_.replace()));
    HARNESS_CHECK(cudaEventCreate(stop_.replace()));
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  // The members release themselves (buffers, events, stream, then the communicator) once the
  // stream's work is done.
  ~NcclCommunicator() override {
    if (stream_) HARNESS_CHECK_NOTHROW(cudaStreamSynchronize(stream_.get()));
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
    }
    HARNESS_CHECK(cudaStreamSynchronize(stream_.get()));
    std::vector<float> out(out_count);
    HARNESS_CHECK(cudaMemcpy(out.data(), recv_.get(), out_count * 4, cudaMemcpyDeviceToHost));
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
      HARNESS_CHECK(cudaEventRecord(start_.get(), stream_.get()));
      launch(op, total_bytes);
      HARNESS_CHECK(cudaEventRecord(stop_.get(), stream_.get()));
      HARNESS_CHECK(cudaEventSynchronize(stop_.get()));
      float ms = 0;
      HARNESS_CHECK(cudaEventElapsedTime(&ms, start_.get(), stop_.get()));
      out.push_back(ms * 1000.0);
    }
    return out;
  }

  void run(CollectiveOp op, std::int64_t total_bytes) override {
    launch(op, total_bytes);
    HARNESS_CHECK(cudaStreamSynchronize(stream_.get()));
  }

 private:
  void reserve(std::size_t bytes) {
    if (bytes <= capacity_) return;
    HARNESS_CHECK(cudaMalloc(send_.replace(), bytes));
    HARNESS_CHECK(cudaMalloc(recv_.replace(), bytes));
    HARNESS_CHECK(cudaMemsetAsync(send_.get(), 0, bytes, stream_.get()));
    capacity_ = bytes;
  }

  // bf16 elements: the dtype of the hidden states and reductions.
  void launch(CollectiveOp op, std::int64_t total_bytes) {
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
    }
  }

  int device_ = 0, rank_ = 0, size_ = 1;
  // Declared in creation order: destroyed in reverse.
  UniqueHandle<ncclComm_t, ncclCommDestroy> comm_;
  UniqueHandle<cudaStream_t, cudaStreamDestroy> stream_;
  UniqueHandle<cudaEvent_t, cudaEventDestroy> start_, stop_;
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
