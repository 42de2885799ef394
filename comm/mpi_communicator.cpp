// The mpi_host communicator: the same collectives over MPI, for machines without GPUs. Its ops
// are blocking, so a host clock around launch() times one op.
#include <cmath>
#include <stdexcept>
#include <string>

#include "comm/collectives.h"
#include "core/checked_call.h"

namespace moe {

namespace {

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm group) {
    HARNESS_CHECK_MPI(MPI_Comm_dup(group, &comm_));
    HARNESS_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
    HARNESS_CHECK_MPI(MPI_Comm_size(comm_, &size_));
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;
  ~MpiCommunicator() override { HARNESS_CHECK_MPI_NOTHROW(MPI_Comm_free(&comm_)); }

  std::string backend() const override { return "mpi_host"; }
  int size() const override { return size_; }
  int rank() const override { return rank_; }

  bool check(CollectiveOp op, std::int64_t total_bytes) override {
    const auto per_rank = elements(total_bytes) / size_;
    if (per_rank < 1) return true;
    std::vector<float> send, recv;
    switch (op) {
      case CollectiveOp::all_gather:
        send.assign(per_rank, 0);
        for (std::int64_t i = 0; i < per_rank; ++i)
          send[i] = static_cast<float>(rank_ * 1000 + i % 997);
        recv.assign(per_rank * size_, NAN);
        HARNESS_CHECK_MPI(MPI_Allgather(send.data(), static_cast<int>(per_rank), MPI_FLOAT,
                                        recv.data(), static_cast<int>(per_rank), MPI_FLOAT, comm_));
        for (int r = 0; r < size_; ++r)
          for (std::int64_t i = 0; i < per_rank; ++i)
            if (recv[r * per_rank + i] != static_cast<float>(r * 1000 + i % 997)) return false;
        return true;
      case CollectiveOp::reduce_scatter:
        send.assign(per_rank * size_, static_cast<float>(rank_ + 1));
        recv.assign(per_rank, NAN);
        HARNESS_CHECK_MPI(MPI_Reduce_scatter_block(
            send.data(), recv.data(), static_cast<int>(per_rank), MPI_FLOAT, MPI_SUM, comm_));
        for (float v : recv)
          if (v != static_cast<float>(size_ * (size_ + 1) / 2)) return false;
        return true;
      case CollectiveOp::all_reduce:
        send.assign(per_rank * size_, static_cast<float>(rank_ + 1));
        recv.assign(send.size(), NAN);
        HARNESS_CHECK_MPI(MPI_Allreduce(send.data(), recv.data(), static_cast<int>(send.size()),
                                        MPI_FLOAT, MPI_SUM, comm_));
        for (float v : recv)
          if (v != static_cast<float>(size_ * (size_ + 1) / 2)) return false;
        return true;
      case CollectiveOp::all_to_all: {
        // total_bytes is this rank's send buffer: one chunk per destination rank.
        const auto chunk = elements(total_bytes) / size_;
        if (chunk < 1) return true;
        send.resize(static_cast<std::size_t>(chunk * size_));
        for (int to = 0; to < size_; ++to)
          for (std::int64_t i = 0; i < chunk; ++i)
            send[to * chunk + i] = static_cast<float>(rank_ * 1000 + to * 10 + i % 7);
        recv.assign(send.size(), NAN);
        HARNESS_CHECK_MPI(MPI_Alltoall(send.data(), static_cast<int>(chunk), MPI_FLOAT, recv.data(),
                                       static_cast<int>(chunk), MPI_FLOAT, comm_));
        for (int from = 0; from < size_; ++from)
          for (std::int64_t i = 0; i < chunk; ++i)
            if (recv[from * chunk + i] != static_cast<float>(from * 1000 + rank_ * 10 + i % 7))
              return false;
        return true;
      }
    }
    return false;
  }

  void synchronize() override {}
  void barrier() override { HARNESS_CHECK_MPI(MPI_Barrier(comm_)); }
  double average(double value) override {
    double sum = 0;
    HARNESS_CHECK_MPI(MPI_Allreduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, comm_));
    return sum / size_;
  }

  void launch(CollectiveOp op, std::int64_t total_bytes) override {
    const auto per_rank = std::max<std::int64_t>(1, elements(total_bytes) / size_);
    if (static_cast<std::int64_t>(buf_.size()) < per_rank * size_)
      buf_.assign(per_rank * size_, 1.0f);
    if (static_cast<std::int64_t>(out_.size()) < per_rank * size_)
      out_.assign(per_rank * size_, 0.0f);
    const int n = static_cast<int>(per_rank);
    switch (op) {
      case CollectiveOp::all_gather:
        HARNESS_CHECK_MPI(
            MPI_Allgather(buf_.data(), n, MPI_FLOAT, out_.data(), n, MPI_FLOAT, comm_));
        break;
      case CollectiveOp::reduce_scatter:
        HARNESS_CHECK_MPI(
            MPI_Reduce_scatter_block(buf_.data(), out_.data(), n, MPI_FLOAT, MPI_SUM, comm_));
        break;
      case CollectiveOp::all_reduce:
        HARNESS_CHECK_MPI(
            MPI_Allreduce(buf_.data(), out_.data(), n * size_, MPI_FLOAT, MPI_SUM, comm_));
        break;
      case CollectiveOp::all_to_all:
        HARNESS_CHECK_MPI(
            MPI_Alltoall(buf_.data(), n, MPI_FLOAT, out_.data(), n, MPI_FLOAT, comm_));
        break;
    }
  }

 private:
  // MPI has no bf16: buffers of the same byte size in fp32 elements.
  static std::int64_t elements(std::int64_t bytes) { return std::max<std::int64_t>(1, bytes / 4); }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::vector<float> buf_, out_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm group) {
  return std::make_unique<MpiCommunicator>(group);
}

}  // namespace moe
