// comm::Group: an MPI communicator with the collectives mpitron uses, each counting the bytes this
// rank sends; plus a hand-written ring all-reduce (reduce-scatter then all-gather, Patarasuk & Yuan
// 2009: 2(p-1)/p·n bytes per rank) and a naive gather-scatter one, for study.
#pragma once
#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace mpitron::comm {

// Chunk r of n elements split over p parts: [begin, end). The first n % p chunks are one element
// longer, so chunks differ by at most one and cover [0, n) in order. Used by the ring collectives
// and for ZeRO shards (rank r owns chunk r). Requires p >= 1 and 0 <= r < p.
std::pair<size_t, size_t> ring_chunk_range(size_t n, int p, int r);

// Tags at or above this value are reserved for the hand-written algorithms of Group; send/recv/
// isend/irecv require 0 <= tag < kReservedTag. (MPI guarantees tags up to 32767.)
inline constexpr int kReservedTag = 32000;

// What a rank is waiting in, for a hang watchdog (another thread reads it): the last MPI call a
// Group entered, or the non-blocking operation a Request waits for, and the group's name.
struct CallLog {
  std::atomic<const char*> call{"no collective yet"};
  std::atomic<const char*> group{""};
  void note(const char* c, const char* g) {
    group.store(g, std::memory_order_relaxed);
    call.store(c, std::memory_order_relaxed);
  }
};

// A pending non-blocking operation. Move-only; the destructor waits if it is still pending, so a
// buffer handed to a non-blocking call must outlive its Request.
class Request {
 public:
  Request() = default;
  explicit Request(MPI_Request r) : req_(r) {}
  // One whose wait() is noted in log (if any) as waiting for what on group.
  Request(MPI_Request r, CallLog* log, const char* what, const char* group)
      : req_(r), log_(log), what_(what), group_(group) {}
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  Request(Request&& o) noexcept
      : req_(std::exchange(o.req_, MPI_REQUEST_NULL)),
        log_(o.log_),
        what_(o.what_),
        group_(o.group_) {}
  Request& operator=(Request&& o) noexcept;
  ~Request();

  // Blocks until the operation completes; a no-op when it already has (or for an empty Request).
  void wait();
  // True once the operation has completed (then wait() is a no-op); never blocks.
  bool test();
  bool pending() const { return req_ != MPI_REQUEST_NULL; }

 private:
  MPI_Request req_ = MPI_REQUEST_NULL;
  CallLog* log_ = nullptr;
  const char* what_ = "";
  const char* group_ = "";
};

// Waits for every request; all are already in flight, so the order of waiting does not matter.
void wait_all(std::span<Request> reqs);

// An MPI communicator with the collectives and point-to-point calls of the trainer. Owns the
// communicator when it was created by split (freed in the destructor); a Group over MPI_COMM_WORLD
// does not own it. Move-only. All ranks of the group must make the same collective calls in the
// same order (non-blocking ones included), as MPI requires.
//
// bytes_sent counts what THIS rank sends, in bytes, summed over operations; the trainer reads and
// resets it. Convention, with n the bytes of the full buffer, p = size(), r = rank(), and
// c(k) = the bytes of chunk k under ring_chunk_range:
//   allreduce           2n - c(r) - c(r+1 mod p)   the ring: reduce-scatter sends every chunk but
//                                                   its own, all-gather every chunk but r+1's
//                                                   (= 2(p-1)/p·n when p divides n; sum over ranks
//                                                   is exactly 2(p-1)·n). Scalars count the same.
//   reduce_scatter      (p-1)/p·n   (ring; n = the whole send buffer, p equal blocks)
//   all_gather          (p-1)/p·n   (ring; n = the whole receive buffer)
//   broadcast           n on every rank but the one before root in ring order (a pipelined chain
//                       root -> root+1 -> ...; bandwidth-optimal, (p-1)·n in total); 0 when p = 1
//   gather              count bytes on non-roots, 0 on root (its own block is a local copy)
//   scatter             (p-1)·count bytes on root, 0 elsewhere
//   send / isend        the message; recv/irecv and barrier count 0
// The hand-written ring and gather-scatter count the bytes they actually send. Zero for p = 1.
class Group {
 public:
  // A null group (size 0); only assignment and destruction are valid on it.
  Group() = default;
  // Wraps comm. owned: free it with MPI_Comm_free in the destructor (the communicator must not be
  // MPI_COMM_WORLD). Not collective.
  Group(MPI_Comm comm, bool owned);
  // The world group: MPI_COMM_WORLD, not owned.
  static Group world() { return Group(MPI_COMM_WORLD, false); }
  // This process alone (MPI_COMM_SELF, size 1), made without any MPI call, so it also serves
  // code that runs before MPI_Init or without it (single-process tools, unit tests).
  static Group solo();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  Group(Group&& o) noexcept;
  Group& operator=(Group&& o) noexcept;
  ~Group();

  int size() const { return size_; }
  int rank() const { return rank_; }
  MPI_Comm comm() const { return comm_; }

  // Every call this group enters is noted in log under name ("tp", "dp", ...) from now on.
  void set_call_log(CallLog* log, const char* name) {
    log_ = log;
    name_ = name;
  }
  void note_call(const char* call) const {
    if (log_) log_->note(call, name_);
  }
  // r as a Request whose wait() is noted as waiting for call on this group.
  Request request(MPI_Request r, const char* call) const { return Request(r, log_, call, name_); }

  uint64_t bytes_sent = 0;

  // ---- all-reduce (sum, in place) ----
  void allreduce_sum(float* buf, size_t n);
  void allreduce_sum(double* buf, size_t n);
  Request iallreduce_sum(float* buf, size_t n);
  Request iallreduce_sum(double* buf, size_t n);
  // Scalar reductions (counted as a 1-element all-reduce). With an int argument these overloads are
  // ambiguous: cast to double or int64_t.
  double allreduce_sum(double v);
  int64_t allreduce_sum(int64_t v);
  double allreduce_max(double v);
  int64_t allreduce_max(int64_t v);
  // Element-wise maximum, in place; bytes counted as allreduce_sum of the same buffer.
  void allreduce_max(float* buf, size_t n);
  void allreduce_max(double* buf, size_t n);

  // ---- reduce-scatter / all-gather ----
  // reduce_scatter: send has size()*recv_count elements, block r goes to rank r.
  void reduce_scatter_sum(const float* send, float* recv, size_t recv_count);
  void reduce_scatter_sum(const double* send, double* recv, size_t recv_count);
  Request ireduce_scatter_sum(const float* send, float* recv, size_t recv_count);
  Request ireduce_scatter_sum(const double* send, double* recv, size_t recv_count);
  // recv has size()*send_count elements; rank r's send lands in block r.
  void all_gather(const float* send, float* recv, size_t send_count);
  void all_gather(const double* send, double* recv, size_t send_count);
  Request iall_gather(const float* send, float* recv, size_t send_count);
  Request iall_gather(const double* send, double* recv, size_t send_count);

  // ---- broadcast from root, in place ----
  void broadcast(float* buf, size_t n, int root);
  void broadcast(double* buf, size_t n, int root);
  void broadcast(int64_t* buf, size_t n, int root);
  void broadcast(uint64_t* buf, size_t n, int root);
  // Raw bytes (any size: sent in pieces below MPI's int count limit).
  void broadcast_bytes(void* buf, size_t bytes, int root);
  Request ibroadcast(float* buf, size_t n, int root);

  // ---- gather / scatter: root's buffer has size()*count elements, block r from/to rank r ----
  // recv (gather) and send (scatter) are only read on root and may be null elsewhere.
  void gather(const float* send, float* recv, size_t count, int root);
  void gather(const double* send, double* recv, size_t count, int root);
  void scatter(const float* send, float* recv, size_t count, int root);
  void scatter(const double* send, double* recv, size_t count, int root);

  // ---- point-to-point (0 <= tag < kReservedTag) ----
  void send(const float* buf, size_t n, int dest, int tag);
  void send(const double* buf, size_t n, int dest, int tag);
  void recv(float* buf, size_t n, int src, int tag);
  void recv(double* buf, size_t n, int src, int tag);
  Request isend(const float* buf, size_t n, int dest, int tag);
  Request isend(const double* buf, size_t n, int dest, int tag);
  Request irecv(float* buf, size_t n, int src, int tag);
  Request irecv(double* buf, size_t n, int src, int tag);
  // The same for raw bytes (a 16-bit tensor's): MPI_BYTE, counted as bytes.
  Request isend_bytes(const void* buf, size_t bytes, int dest, int tag);
  Request irecv_bytes(void* buf, size_t bytes, int src, int tag);

  void barrier();

  // ---- hand-written algorithms (the reference paths --dp-reduce ring|gather-scatter) ----
  // Ring all-reduce, in place, sum: ring_reduce_scatter_sum then ring_all_gather. Any n, any p.
  // Each chunk's sum is formed on one rank in a fixed order and then copied to the others, so the
  // result is bitwise identical on every rank and from run to run.
  void ring_allreduce_sum(float* buf, size_t n);
  void ring_allreduce_sum(double* buf, size_t n);
  // Reduce-scatter half: afterwards buf[ring_chunk_range(n, size(), rank())] holds the full sum of
  // that chunk; the rest of buf holds partial sums (unspecified). Sends n minus its own chunk.
  void ring_reduce_scatter_sum(float* buf, size_t n);
  void ring_reduce_scatter_sum(double* buf, size_t n);
  // All-gather half: on entry rank r's chunk r of buf is valid; afterwards every chunk is, on every
  // rank. Sends n minus chunk r+1 mod p.
  void ring_all_gather(float* buf, size_t n);
  void ring_all_gather(double* buf, size_t n);
  // Reduce-scatter over chunks of any sizes, in place: chunk k of buf is [bounds[k], bounds[k+1])
  // (bounds has size()+1 entries, bounds[0] = 0, non-decreasing); afterwards chunk rank() holds
  // the full sum, the rest is unspecified. For ZeRO shards that cut a gradient bucket unevenly.
  // The MPI form (MPI_Reduce_scatter) counts the ring figure, n minus its own chunk; the ring
  // form counts what it sends, the same.
  void reduce_scatter_sum_v(float* buf, std::span<const size_t> bounds);
  void ring_reduce_scatter_sum_v(float* buf, std::span<const size_t> bounds);
  // Deliberately naive: rank 0 receives every rank's buffer, sums in rank order 0..p-1 and sends
  // the sum to every rank. Root sends (p-1)·n, the others n. Bitwise identical on every rank.
  void gather_scatter_allreduce_sum(float* buf, size_t n);
  void gather_scatter_allreduce_sum(double* buf, size_t n);

 private:
  template <class T, class Chunk>
  void ring_reduce_scatter_impl(T* buf, Chunk chunk);
  template <class T>
  void ring_all_gather_impl(T* buf, size_t n);
  template <class T>
  void gather_scatter_impl(T* buf, size_t n);
  std::vector<int> counts_;  // per-rank counts for the v-collectives, sized once
  // Receive scratch for the hand-written algorithms, grown on demand and kept.
  std::byte* scratch(size_t bytes);

  MPI_Comm comm_ = MPI_COMM_NULL;
  CallLog* log_ = nullptr;
  const char* name_ = "";
  bool owned_ = false;
  int size_ = 0;
  int rank_ = -1;
  std::vector<std::byte> scratch_;
};

// The bytes-sent figures of the convention above, for callers (a trainer's per-step estimate) and
// tests: rank r of p all-reducing n elements of elem_size bytes; broadcasting n_bytes from root.
uint64_t allreduce_bytes_sent(size_t n, size_t elem_size, int p, int r);
uint64_t broadcast_bytes_sent(size_t n_bytes, int p, int r, int root);

}  // namespace mpitron::comm
