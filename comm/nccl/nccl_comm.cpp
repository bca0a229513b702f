// NcclComm: NCCL collectives on device buffers with Group's byte convention; select_local_device:
// one CUDA device per rank, agreed on (or refused) by every rank together.
#include "comm/nccl/nccl_comm.hpp"

#include <climits>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/cuda_check.hpp"
#include "comm/mpi_check.hpp"
#include "comm/world.hpp"

namespace mpitron::comm {

// ---- NcclComm lifetime ----

NcclComm::NcclComm(Group& group) : size_(group.size()), rank_(group.rank()) {
  MPITRON_REQUIRE(size_ >= 1 && rank_ >= 0 && rank_ < size_, "NcclComm over a null Group");
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  if (size_ > 1) {
    // Setup traffic, not training traffic: keep it out of the group's counter too.
    const uint64_t before = group.bytes_sent;
    group.broadcast_bytes(&id, sizeof id, 0);
    group.bytes_sent = before;
  }
  NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
  int count = 0, me = -1;
  NCCL_CHECK(ncclCommCount(comm_, &count));
  NCCL_CHECK(ncclCommUserRank(comm_, &me));
  MPITRON_REQUIRE(count == size_ && me == rank_, "NCCL communicator disagrees with its Group");
}

NcclComm::NcclComm(NcclComm&& o) noexcept
    : bytes_sent(std::exchange(o.bytes_sent, 0)),
      comm_(std::exchange(o.comm_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      rank_(std::exchange(o.rank_, -1)) {}

NcclComm& NcclComm::operator=(NcclComm&& o) noexcept {
  if (this != &o) {
    destroy();
    bytes_sent = std::exchange(o.bytes_sent, 0);
    comm_ = std::exchange(o.comm_, nullptr);
    size_ = std::exchange(o.size_, 0);
    rank_ = std::exchange(o.rank_, -1);
  }
  return *this;
}

NcclComm::~NcclComm() {
  destroy();
}

void NcclComm::destroy() noexcept {
  if (comm_ == nullptr) return;
  ncclComm_t c = std::exchange(comm_, nullptr);
  size_ = 0;
  rank_ = -1;
  ncclResult_t async = ncclSuccess;
  NCCL_CHECK(ncclCommGetAsyncError(c, &async));
  // After an asynchronous error the peers may be gone; the collective teardown would wait for them.
  if (async != ncclSuccess
#if MPITRON_NCCL_HAS_FINALIZE
      && async != ncclInProgress
#endif
  ) {
    NCCL_CHECK(ncclCommAbort(c));
    return;
  }
#if MPITRON_NCCL_HAS_FINALIZE
  // Blocking communicator: returns once this rank's operations are flushed.
  NCCL_CHECK(ncclCommFinalize(c));
#endif
  NCCL_CHECK(ncclCommDestroy(c));
}

void NcclComm::require_live(const char* what) const {
  MPITRON_REQUIRE(comm_ != nullptr, std::string(what) + " on a null NcclComm");
}

// ---- collectives ----

void NcclComm::allreduce_sum(float* buf, size_t n, cudaStream_t s) {
  require_live("allreduce_sum");
  if (n == 0) return;
  NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm_, s));
  bytes_sent += allreduce_bytes_sent(n, sizeof(float), size_, rank_);
}

void NcclComm::allreduce_max(float* buf, size_t n, cudaStream_t s) {
  require_live("allreduce_max");
  if (n == 0) return;
  NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat, ncclMax, comm_, s));
  bytes_sent += allreduce_bytes_sent(n, sizeof(float), size_, rank_);
}

void NcclComm::reduce_scatter_sum(const float* send, float* recv, size_t recv_count,
                                  cudaStream_t s) {
  require_live("reduce_scatter_sum");
  if (recv_count == 0) return;
  NCCL_CHECK(ncclReduceScatter(send, recv, recv_count, ncclFloat, ncclSum, comm_, s));
  // (p-1)/p of the send buffer: every block but this rank's own.
  bytes_sent += static_cast<uint64_t>(size_ - 1) * recv_count * sizeof(float);
}

void NcclComm::all_gather(const float* send, float* recv, size_t send_count, cudaStream_t s) {
  require_live("all_gather");
  if (send_count == 0) return;
  NCCL_CHECK(ncclAllGather(send, recv, send_count, ncclFloat, comm_, s));
  // (p-1)/p of the receive buffer: each block passes on to the next rank but one.
  bytes_sent += static_cast<uint64_t>(size_ - 1) * send_count * sizeof(float);
}

void NcclComm::broadcast(float* buf, size_t n, int root, cudaStream_t s) {
  require_live("broadcast");
  MPITRON_REQUIRE(root >= 0 && root < size_, "broadcast root " + std::to_string(root) +
                                                 " outside [0, " + std::to_string(size_) + ")");
  if (n == 0) return;
  NCCL_CHECK(ncclBroadcast(buf, buf, n, ncclFloat, root, comm_, s));
  bytes_sent += broadcast_bytes_sent(n * sizeof(float), size_, rank_, root);
}

// ---- asynchronous errors ----

void NcclComm::check_async_error() {
  require_live("check_async_error");
  ncclResult_t async = ncclSuccess;
  NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
#if MPITRON_NCCL_HAS_FINALIZE
  if (async == ncclInProgress) return;  // only non-blocking communicators report it; not a failure
#endif
  if (async != ncclSuccess)
    fail_at(__FILE__, __LINE__,
            "ncclCommGetAsyncError (rank " + std::to_string(rank_) + " of " +
                std::to_string(size_) + ")",
            nccl_error_string(async));
}

void NcclComm::synchronize(cudaStream_t s) {
  require_live("synchronize");
  for (;;) {
    const cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady)
      fail_at(__FILE__, __LINE__, "cudaStreamQuery(s)", cudaGetErrorString(e));
    // "Not ready" is no error; clear it so that a later CUDA_CHECK_LAUNCH() does not report it.
    (void)cudaGetLastError();
    check_async_error();
    std::this_thread::yield();
  }
}

// ---- device choice ----

std::string local_device_error(int local_ranks, int devices, bool exclusive,
                               std::string_view no_device_reason) {
  if (devices <= 0)
    return "--device cuda: no CUDA device (cudaGetDeviceCount: " +
           (no_device_reason.empty() ? std::string("found 0 devices")
                                     : std::string(no_device_reason)) +
           ")";
  if (exclusive && local_ranks > devices)
    return "--comm nccl needs one GPU per rank: this node runs " + std::to_string(local_ranks) +
           (local_ranks == 1 ? " rank" : " ranks") + " and has " + std::to_string(devices) +
           (devices == 1 ? " GPU" : " GPUs") + " (use --comm mpi to share a GPU)";
  return "";
}

namespace {
constexpr int kBusIdBytes = 64;  // "0000:00:00.0" and longer forms fit, NUL included
}  // namespace

int select_local_device(MPI_Comm world, bool exclusive) {
  int world_rank = 0;
  MPI_CHECK(MPI_Comm_rank(world, &world_rank));
  MPI_Comm local = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &local));
  int local_rank = 0, local_size = 1;
  MPI_CHECK(MPI_Comm_rank(local, &local_rank));
  MPI_CHECK(MPI_Comm_size(local, &local_size));

  // A missing driver or device, or a GPU taken by another process, is the user's setup: reported
  // as a UsageError below, not a crash.
  std::string error;
  int count = 0;
  const cudaError_t count_err = cudaGetDeviceCount(&count);
  if (count_err != cudaSuccess || count <= 0)
    error = local_device_error(local_size, 0, exclusive,
                               count_err != cudaSuccess ? cudaGetErrorString(count_err) : "");
  int device = -1;
  char bus[kBusIdBytes] = {};  // stays "" when this rank has no device
  if (error.empty()) {
    device = local_rank % count;
    // Creates the context (CUDA 12+), so it fails when the GPU is taken (exclusive-process mode).
    const cudaError_t set_err = cudaSetDevice(device);
    if (set_err != cudaSuccess)
      error = "--device cuda: cannot use CUDA device " + std::to_string(device) +
              " (cudaSetDevice: " + cudaGetErrorString(set_err) + ")";
    else
      CUDA_CHECK(cudaDeviceGetPCIBusId(bus, kBusIdBytes, device));
  }
  // Distinct GPUs among the node's ranks, by bus id: right also when each rank sees only its own.
  std::vector<char> all(static_cast<size_t>(local_size) * kBusIdBytes);
  MPI_CHECK(MPI_Allgather(bus, kBusIdBytes, MPI_CHAR, all.data(), kBusIdBytes, MPI_CHAR, local));
  MPI_CHECK(MPI_Comm_free(&local));
  if (error.empty()) {
    // Ranks without a device report their own error; the others are counted here.
    int with_device = 0;
    std::set<std::string> distinct;
    for (int k = 0; k < local_size; ++k) {
      const char* id = all.data() + static_cast<size_t>(k) * kBusIdBytes;
      if (*id == '\0') continue;
      ++with_device;
      distinct.insert(std::string(id, strnlen(id, kBusIdBytes)));
    }
    error = local_device_error(with_device, static_cast<int>(distinct.size()), exclusive);
  }

  // Every rank stops together, with the lowest failing rank's message, instead of some going on to
  // wait in ncclCommInitRank for ranks that stopped.
  throw_first_error(error, world);
  return device;
}

}  // namespace mpitron::comm
