// comm::NcclComm: the NCCL communicator beside a comm::Group over the same ranks, for collectives
// on device buffers (--comm nccl). bytes_sent follows Group's convention (comm/group.hpp), the
// bytes NCCL's ring sends, so the counters compare with the MPI path. select_local_device picks one
// CUDA device per process from its node-local rank. NCCL_CHECK reports a failing NCCL call like
// CUDA_CHECK (base/cuda_check.hpp). Compiled only where CMake found NCCL (MPITRON_HAVE_NCCL).
#pragma once
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/check.hpp"
#include "comm/group.hpp"

// Version guards compare NCCL_VERSION_CODE with literals: releases from 2.9 code X*10000+Y*100+Z,
// older ones X*1000+Y*100+Z (below 3000), so ">= 21300" means "2.13 or later" under both schemes.
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 21300
#define MPITRON_NCCL_HAS_LAST_ERROR 1  // ncclGetLastError (and ncclRemoteError): NCCL 2.13
#else
#define MPITRON_NCCL_HAS_LAST_ERROR 0
#endif
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 21400
#define MPITRON_NCCL_HAS_FINALIZE 1  // ncclCommFinalize (and ncclInProgress): NCCL 2.14
#else
#define MPITRON_NCCL_HAS_FINALIZE 0
#endif

namespace mpitron::comm {

// ncclGetErrorString, plus NCCL's last logged message where the library keeps one (2.13+): the code
// alone ("unhandled system error", "invalid usage") does not say which peer, socket or GPU failed.
// Added for every code, not only system/internal/remote errors: "Duplicate GPU detected" is an
// invalid usage. NCCL never clears that message, so it is labelled as NCCL's last, not as the
// cause.
inline std::string nccl_error_string(ncclResult_t r) {
  std::string s = ncclGetErrorString(r);
#if MPITRON_NCCL_HAS_LAST_ERROR
  // NCCL ignores the comm argument (documented: may be NULL); the message is the library's last.
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') s += std::string(" (NCCL's last message: ") + last + ")";
#endif
  return s;
}

}  // namespace mpitron::comm

// A failing NCCL call prints "[rank r] file:line call: reason" and aborts the job (fail_at).
// Asynchronous failures (a peer gone, a network error) do not show here, since a collective only
// enqueues work: NcclComm::synchronize / check_async_error report those.
#define NCCL_CHECK(call)                                                       \
  do {                                                                         \
    const ncclResult_t nccl_check_err_ = (call);                               \
    if (nccl_check_err_ != ncclSuccess)                                        \
      ::mpitron::fail_at(__FILE__, __LINE__, #call,                            \
                         ::mpitron::comm::nccl_error_string(nccl_check_err_)); \
  } while (0)

namespace mpitron::comm {

// An NCCL communicator over the ranks of a Group, each rank on its own GPU (NCCL refuses two ranks
// on one device). Move-only. Construction and destruction are collective over the group: every
// rank must create (and destroy) its NcclComms in the same order, as for MPI communicators.
//
// The collectives take device float pointers and are asynchronous on the given stream: they return
// once enqueued, the buffers must stay valid until the stream has run them, and every rank must
// issue the same collectives in the same order. An empty call (n = 0) is a no-op on every rank.
// bytes_sent counts what this rank sends under Group's convention (see comm/group.hpp), with
// n = the buffer's bytes, p = size(), r = rank():
//   allreduce_sum/max   2n - c(r) - c(r+1 mod p)   c(k) = bytes of ring_chunk_range(n, p, k)
//   reduce_scatter_sum  (p-1)/p·n                  n = the whole send buffer
//   all_gather          (p-1)/p·n                  n = the whole receive buffer
//   broadcast           n on every rank but (root-1 mod p), which forwards nothing
// and 0 for p = 1. It is the convention, not a measurement: NCCL may pick a tree or NVLS algorithm.
class NcclComm {
 public:
  // A null communicator (size 0); only assignment and destruction are valid on it.
  NcclComm() = default;
  // Collective over group's ranks, blocking until all have joined. Each rank's CUDA device must be
  // current already (select_local_device). Rank 0 makes the NCCL id and broadcasts it over
  // group; that setup broadcast counts in neither counter (group.bytes_sent is left unchanged),
  // so --comm mpi and --comm nccl runs report the same totals. A 1-rank group needs no MPI call.
  explicit NcclComm(Group& group);
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  NcclComm(NcclComm&& o) noexcept;
  NcclComm& operator=(NcclComm&& o) noexcept;
  // Collective: ncclCommFinalize (NCCL 2.14+) then ncclCommDestroy; ncclCommAbort instead, locally,
  // when NCCL has reported an asynchronous error (a graceful teardown would wait for dead peers).
  // Destroy before main returns (not from a static), while the CUDA runtime is still up.
  ~NcclComm();

  int size() const { return size_; }
  int rank() const { return rank_; }
  // The raw handle, for calls this class does not wrap (ncclGroupStart/End batches and the like).
  ncclComm_t handle() const { return comm_; }

  uint64_t bytes_sent = 0;

  // Sum over ranks, in place.
  void allreduce_sum(float* buf, size_t n, cudaStream_t s);
  // Maximum over ranks, in place (counted as allreduce_sum).
  void allreduce_max(float* buf, size_t n, cudaStream_t s);
  // send has size()*recv_count elements, block r goes to rank r. Out of place (buffers must not
  // overlap) or in place with recv == send + rank()*recv_count, as NCCL requires.
  void reduce_scatter_sum(const float* send, float* recv, size_t recv_count, cudaStream_t s);
  // recv has size()*send_count elements; rank r's send lands in block r. Out of place or in place
  // with send == recv + rank()*send_count.
  void all_gather(const float* send, float* recv, size_t send_count, cudaStream_t s);
  // root's buf to every rank, in place; 0 <= root < size().
  void broadcast(float* buf, size_t n, int root, cudaStream_t s);

  // Aborts the job (fail_at) when NCCL has recorded an asynchronous error on this communicator.
  void check_async_error();
  // Waits for stream s like cudaStreamSynchronize, checking check_async_error while it waits, so a
  // lost peer or network error aborts with NCCL's reason instead of hanging in the wait.
  void synchronize(cudaStream_t s);

 private:
  void destroy() noexcept;
  void require_live(const char* what) const;

  ncclComm_t comm_ = nullptr;
  int size_ = 0;
  int rank_ = -1;
};

// Why this node's ranks cannot run on its CUDA devices, or "" when they can. local_ranks: the
// ranks on this node; devices: the distinct GPUs they have; exclusive: each rank needs its own GPU
// (NCCL). devices <= 0 means none, with no_device_reason saying why (cudaGetDeviceCount's words;
// "found 0 devices" when empty). Pure, for select_local_device and its tests.
std::string local_device_error(int local_ranks, int devices, bool exclusive,
                               std::string_view no_device_reason = {});

// Collective over world: picks this process's CUDA device, node-local rank % visible devices
// (node-local rank from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)), makes it current
// (cudaSetDevice) and returns it. Ranks that see one GPU each (CUDA_VISIBLE_DEVICES set per rank
// by the launcher) get device 0, and their GPUs are told apart by PCI bus id. Throws UsageError
// with the same one-line message on every rank (the lowest failing rank's) when a rank has no
// usable device, or with exclusive when two ranks of a node would share a GPU.
int select_local_device(MPI_Comm world, bool exclusive);

}  // namespace mpitron::comm
