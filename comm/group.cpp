// comm::Group: MPI collectives with byte counters, plus the hand-written ring all-reduce
// (reduce-scatter then all-gather over MPI_Sendrecv, Patarasuk & Yuan 2009) and a naive
// gather-scatter all-reduce. Byte conventions are stated once, in group.hpp.
#include "comm/group.hpp"

#include <algorithm>
#include <climits>
#include <string>

#include "comm/mpi_check.hpp"

namespace mpitron::comm {

namespace {

template <class T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() {
  return MPI_FLOAT;
}
template <>
MPI_Datatype mpi_type<double>() {
  return MPI_DOUBLE;
}
template <>
MPI_Datatype mpi_type<unsigned char>() {
  return MPI_BYTE;
}
template <>
MPI_Datatype mpi_type<int64_t>() {
  return MPI_INT64_T;
}
template <>
MPI_Datatype mpi_type<uint64_t>() {
  return MPI_UINT64_T;
}

// MPI counts are int; larger buffers are a caller's bug here (1.5e9 params still fit).
int to_count(size_t n) {
  MPITRON_REQUIRE(n <= static_cast<size_t>(INT_MAX),
                  "element count " + std::to_string(n) + " exceeds MPI's int count limit");
  return static_cast<int>(n);
}

void check_tag(int tag) {
  MPITRON_REQUIRE(tag >= 0 && tag < kReservedTag,
                  "tag " + std::to_string(tag) + " outside [0, kReservedTag)");
}

// Tags of the hand-written algorithms; messages between a pair on one communicator do not overtake
// each other, so one tag per algorithm is enough.
constexpr int kRingTag = kReservedTag + 1;
constexpr int kGatherScatterTag = kReservedTag + 2;

bool mpi_finalized() {
  int down = 0;
  MPI_Finalized(&down);
  return down != 0;
}

}  // namespace

std::pair<size_t, size_t> ring_chunk_range(size_t n, int p, int r) {
  MPITRON_REQUIRE(p >= 1 && r >= 0 && r < p, "ring_chunk_range needs p >= 1 and 0 <= r < p");
  const size_t pp = static_cast<size_t>(p), rr = static_cast<size_t>(r);
  const size_t base = n / pp, rem = n % pp;
  const size_t begin = rr * base + std::min(rr, rem);
  return {begin, begin + base + (rr < rem ? 1 : 0)};
}

uint64_t allreduce_bytes_sent(size_t n, size_t elem_size, int p, int r) {
  auto len = [&](int k) {
    auto [b, e] = ring_chunk_range(n, p, k);
    return e - b;
  };
  return static_cast<uint64_t>(2 * n - len(r) - len((r + 1) % p)) * elem_size;
}

uint64_t broadcast_bytes_sent(size_t n_bytes, int p, int r, int root) {
  // The chain root -> root+1 -> ... ends at root-1 (mod p), the only rank that forwards nothing.
  return r == (root + p - 1) % p ? 0 : n_bytes;
}

// ---- Request ----

Request& Request::operator=(Request&& o) noexcept {
  if (this != &o) {
    wait();
    req_ = std::exchange(o.req_, MPI_REQUEST_NULL);
    log_ = o.log_;
    what_ = o.what_;
    group_ = o.group_;
  }
  return *this;
}

Request::~Request() {
  if (pending() && !mpi_finalized()) wait();
}

void Request::wait() {
  if (req_ == MPI_REQUEST_NULL) return;
  if (log_) log_->note(what_, group_);
  MPI_CHECK(MPI_Wait(&req_, MPI_STATUS_IGNORE));
}

bool Request::test() {
  if (req_ == MPI_REQUEST_NULL) return true;
  int done = 0;
  MPI_CHECK(MPI_Test(&req_, &done, MPI_STATUS_IGNORE));
  return done != 0;
}

void wait_all(std::span<Request> reqs) {
  for (Request& r : reqs) r.wait();
}

// ---- Group lifetime ----

Group::Group(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
  MPITRON_REQUIRE(comm != MPI_COMM_NULL, "Group over MPI_COMM_NULL");
  MPITRON_REQUIRE(!(owned && comm == MPI_COMM_WORLD), "a Group cannot own MPI_COMM_WORLD");
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  // Our own communicators return errors so MPI_CHECK reports them with rank and call site; the
  // world's error handler belongs to whoever initialised MPI.
  if (owned_) MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
}

Group Group::solo() {
  Group g;
  g.comm_ = MPI_COMM_SELF;
  g.size_ = 1;
  g.rank_ = 0;
  return g;
}

Group::Group(Group&& o) noexcept
    : bytes_sent(o.bytes_sent),
      comm_(std::exchange(o.comm_, MPI_COMM_NULL)),
      log_(std::exchange(o.log_, nullptr)),
      name_(std::exchange(o.name_, "")),
      owned_(std::exchange(o.owned_, false)),
      size_(std::exchange(o.size_, 0)),
      rank_(std::exchange(o.rank_, -1)),
      scratch_(std::move(o.scratch_)) {}

Group& Group::operator=(Group&& o) noexcept {
  if (this != &o) {
    Group old(std::move(*this));  // frees our communicator, if owned, at the end of this scope
    bytes_sent = o.bytes_sent;
    comm_ = std::exchange(o.comm_, MPI_COMM_NULL);
    log_ = std::exchange(o.log_, nullptr);
    name_ = std::exchange(o.name_, "");
    owned_ = std::exchange(o.owned_, false);
    size_ = std::exchange(o.size_, 0);
    rank_ = std::exchange(o.rank_, -1);
    scratch_ = std::move(o.scratch_);
  }
  return *this;
}

Group::~Group() {
  // After MPI_Finalize the communicator is gone with MPI itself; freeing it then is an error.
  if (owned_ && comm_ != MPI_COMM_NULL && !mpi_finalized()) MPI_CHECK(MPI_Comm_free(&comm_));
}

std::byte* Group::scratch(size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return scratch_.data();
}

// ---- MPI collectives ----

// One template per operation, shared by the float and double members below.
namespace {

template <class T>
void allreduce_sum_t(Group& g, T* buf, size_t n) {
  g.note_call("MPI_Allreduce");
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, to_count(n), mpi_type<T>(), MPI_SUM, g.comm()));
  g.bytes_sent += allreduce_bytes_sent(n, sizeof(T), g.size(), g.rank());
}

template <class T>
void allreduce_max_t(Group& g, T* buf, size_t n) {
  g.note_call("MPI_Allreduce");
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, to_count(n), mpi_type<T>(), MPI_MAX, g.comm()));
  g.bytes_sent += allreduce_bytes_sent(n, sizeof(T), g.size(), g.rank());
}

template <class T>
Request iallreduce_sum_t(Group& g, T* buf, size_t n) {
  MPI_Request r;
  g.note_call("MPI_Iallreduce");
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, to_count(n), mpi_type<T>(), MPI_SUM, g.comm(), &r));
  g.bytes_sent += allreduce_bytes_sent(n, sizeof(T), g.size(), g.rank());
  return g.request(r, "MPI_Wait for MPI_Iallreduce");
}

template <class T>
void reduce_scatter_sum_t(Group& g, const T* send, T* recv, size_t recv_count) {
  g.note_call("MPI_Reduce_scatter_block");
  MPI_CHECK(
      MPI_Reduce_scatter_block(send, recv, to_count(recv_count), mpi_type<T>(), MPI_SUM, g.comm()));
  g.bytes_sent += static_cast<uint64_t>(g.size() - 1) * recv_count * sizeof(T);
}

template <class T>
Request ireduce_scatter_sum_t(Group& g, const T* send, T* recv, size_t recv_count) {
  MPI_Request r;
  g.note_call("MPI_Ireduce_scatter_block");
  MPI_CHECK(MPI_Ireduce_scatter_block(send, recv, to_count(recv_count), mpi_type<T>(), MPI_SUM,
                                      g.comm(), &r));
  g.bytes_sent += static_cast<uint64_t>(g.size() - 1) * recv_count * sizeof(T);
  return g.request(r, "MPI_Wait for MPI_Ireduce_scatter_block");
}

template <class T>
void all_gather_t(Group& g, const T* send, T* recv, size_t send_count) {
  const int c = to_count(send_count);
  g.note_call("MPI_Allgather");
  MPI_CHECK(MPI_Allgather(send, c, mpi_type<T>(), recv, c, mpi_type<T>(), g.comm()));
  g.bytes_sent += static_cast<uint64_t>(g.size() - 1) * send_count * sizeof(T);
}

template <class T>
Request iall_gather_t(Group& g, const T* send, T* recv, size_t send_count) {
  const int c = to_count(send_count);
  MPI_Request r;
  g.note_call("MPI_Iallgather");
  MPI_CHECK(MPI_Iallgather(send, c, mpi_type<T>(), recv, c, mpi_type<T>(), g.comm(), &r));
  g.bytes_sent += static_cast<uint64_t>(g.size() - 1) * send_count * sizeof(T);
  return g.request(r, "MPI_Wait for MPI_Iallgather");
}

template <class T>
void broadcast_t(Group& g, T* buf, size_t n, int root) {
  g.note_call("MPI_Bcast");
  MPI_CHECK(MPI_Bcast(buf, to_count(n), mpi_type<T>(), root, g.comm()));
  g.bytes_sent += broadcast_bytes_sent(n * sizeof(T), g.size(), g.rank(), root);
}

template <class T>
void gather_t(Group& g, const T* send, T* recv, size_t count, int root) {
  const int c = to_count(count);
  g.note_call("MPI_Gather");
  MPI_CHECK(MPI_Gather(send, c, mpi_type<T>(), recv, c, mpi_type<T>(), root, g.comm()));
  if (g.rank() != root) g.bytes_sent += count * sizeof(T);
}

template <class T>
void scatter_t(Group& g, const T* send, T* recv, size_t count, int root) {
  const int c = to_count(count);
  g.note_call("MPI_Scatter");
  MPI_CHECK(MPI_Scatter(send, c, mpi_type<T>(), recv, c, mpi_type<T>(), root, g.comm()));
  if (g.rank() == root) g.bytes_sent += static_cast<uint64_t>(g.size() - 1) * count * sizeof(T);
}

template <class T>
void send_t(Group& g, const T* buf, size_t n, int dest, int tag) {
  check_tag(tag);
  g.note_call("MPI_Send");
  MPI_CHECK(MPI_Send(buf, to_count(n), mpi_type<T>(), dest, tag, g.comm()));
  g.bytes_sent += n * sizeof(T);
}

template <class T>
void recv_t(Group& g, T* buf, size_t n, int src, int tag) {
  check_tag(tag);
  g.note_call("MPI_Recv");
  MPI_CHECK(MPI_Recv(buf, to_count(n), mpi_type<T>(), src, tag, g.comm(), MPI_STATUS_IGNORE));
}

template <class T>
Request isend_t(Group& g, const T* buf, size_t n, int dest, int tag) {
  check_tag(tag);
  MPI_Request r;
  g.note_call("MPI_Isend");
  MPI_CHECK(MPI_Isend(buf, to_count(n), mpi_type<T>(), dest, tag, g.comm(), &r));
  g.bytes_sent += n * sizeof(T);
  return g.request(r, "MPI_Wait for MPI_Isend");
}

template <class T>
Request irecv_t(Group& g, T* buf, size_t n, int src, int tag) {
  check_tag(tag);
  MPI_Request r;
  g.note_call("MPI_Irecv");
  MPI_CHECK(MPI_Irecv(buf, to_count(n), mpi_type<T>(), src, tag, g.comm(), &r));
  return g.request(r, "MPI_Wait for MPI_Irecv");
}

template <class T>
T allreduce_scalar_t(Group& g, T v, MPI_Op op) {
  T out{};
  g.note_call("MPI_Allreduce");
  MPI_CHECK(MPI_Allreduce(&v, &out, 1, mpi_type<T>(), op, g.comm()));
  g.bytes_sent += allreduce_bytes_sent(1, sizeof(T), g.size(), g.rank());
  return out;
}

}  // namespace

void Group::allreduce_sum(float* buf, size_t n) {
  allreduce_sum_t(*this, buf, n);
}
void Group::allreduce_sum(double* buf, size_t n) {
  allreduce_sum_t(*this, buf, n);
}
void Group::allreduce_max(float* buf, size_t n) {
  allreduce_max_t(*this, buf, n);
}
void Group::allreduce_max(double* buf, size_t n) {
  allreduce_max_t(*this, buf, n);
}
Request Group::iallreduce_sum(float* buf, size_t n) {
  return iallreduce_sum_t(*this, buf, n);
}
Request Group::iallreduce_sum(double* buf, size_t n) {
  return iallreduce_sum_t(*this, buf, n);
}
double Group::allreduce_sum(double v) {
  return allreduce_scalar_t(*this, v, MPI_SUM);
}
int64_t Group::allreduce_sum(int64_t v) {
  return allreduce_scalar_t(*this, v, MPI_SUM);
}
double Group::allreduce_max(double v) {
  return allreduce_scalar_t(*this, v, MPI_MAX);
}
int64_t Group::allreduce_max(int64_t v) {
  return allreduce_scalar_t(*this, v, MPI_MAX);
}

void Group::reduce_scatter_sum(const float* send, float* recv, size_t recv_count) {
  reduce_scatter_sum_t(*this, send, recv, recv_count);
}
void Group::reduce_scatter_sum(const double* send, double* recv, size_t recv_count) {
  reduce_scatter_sum_t(*this, send, recv, recv_count);
}
Request Group::ireduce_scatter_sum(const float* send, float* recv, size_t recv_count) {
  return ireduce_scatter_sum_t(*this, send, recv, recv_count);
}
Request Group::ireduce_scatter_sum(const double* send, double* recv, size_t recv_count) {
  return ireduce_scatter_sum_t(*this, send, recv, recv_count);
}
void Group::all_gather(const float* send, float* recv, size_t send_count) {
  all_gather_t(*this, send, recv, send_count);
}
void Group::all_gather(const double* send, double* recv, size_t send_count) {
  all_gather_t(*this, send, recv, send_count);
}
Request Group::iall_gather(const float* send, float* recv, size_t send_count) {
  return iall_gather_t(*this, send, recv, send_count);
}
Request Group::iall_gather(const double* send, double* recv, size_t send_count) {
  return iall_gather_t(*this, send, recv, send_count);
}

void Group::broadcast(float* buf, size_t n, int root) {
  broadcast_t(*this, buf, n, root);
}
void Group::broadcast(double* buf, size_t n, int root) {
  broadcast_t(*this, buf, n, root);
}
void Group::broadcast(int64_t* buf, size_t n, int root) {
  broadcast_t(*this, buf, n, root);
}
void Group::broadcast(uint64_t* buf, size_t n, int root) {
  broadcast_t(*this, buf, n, root);
}

void Group::gather(const float* send, float* recv, size_t count, int root) {
  gather_t(*this, send, recv, count, root);
}
void Group::gather(const double* send, double* recv, size_t count, int root) {
  gather_t(*this, send, recv, count, root);
}
void Group::scatter(const float* send, float* recv, size_t count, int root) {
  scatter_t(*this, send, recv, count, root);
}
void Group::scatter(const double* send, double* recv, size_t count, int root) {
  scatter_t(*this, send, recv, count, root);
}

void Group::send(const float* buf, size_t n, int dest, int tag) {
  send_t(*this, buf, n, dest, tag);
}
void Group::send(const double* buf, size_t n, int dest, int tag) {
  send_t(*this, buf, n, dest, tag);
}
void Group::recv(float* buf, size_t n, int src, int tag) {
  recv_t(*this, buf, n, src, tag);
}
void Group::recv(double* buf, size_t n, int src, int tag) {
  recv_t(*this, buf, n, src, tag);
}
Request Group::isend(const float* buf, size_t n, int dest, int tag) {
  return isend_t(*this, buf, n, dest, tag);
}
Request Group::isend(const double* buf, size_t n, int dest, int tag) {
  return isend_t(*this, buf, n, dest, tag);
}
Request Group::irecv(float* buf, size_t n, int src, int tag) {
  return irecv_t(*this, buf, n, src, tag);
}
Request Group::irecv(double* buf, size_t n, int src, int tag) {
  return irecv_t(*this, buf, n, src, tag);
}
Request Group::isend_bytes(const void* buf, size_t bytes, int dest, int tag) {
  return isend_t(*this, static_cast<const unsigned char*>(buf), bytes, dest, tag);
}
Request Group::irecv_bytes(void* buf, size_t bytes, int src, int tag) {
  return irecv_t(*this, static_cast<unsigned char*>(buf), bytes, src, tag);
}

void Group::broadcast_bytes(void* buf, size_t bytes, int root) {
  constexpr size_t kPiece = size_t{1} << 30;  // below INT_MAX
  auto* p = static_cast<char*>(buf);
  for (size_t off = 0; off < bytes; off += kPiece) {
    const size_t len = std::min(kPiece, bytes - off);
    note_call("MPI_Bcast");
    MPI_CHECK(MPI_Bcast(p + off, static_cast<int>(len), MPI_BYTE, root, comm_));
  }
  bytes_sent += broadcast_bytes_sent(bytes, size_, rank_, root);
}

Request Group::ibroadcast(float* buf, size_t n, int root) {
  MPI_Request r;
  note_call("MPI_Ibcast");
  MPI_CHECK(MPI_Ibcast(buf, to_count(n), MPI_FLOAT, root, comm_, &r));
  bytes_sent += broadcast_bytes_sent(n * sizeof(float), size_, rank_, root);
  return request(r, "MPI_Wait for MPI_Ibcast");
}

void Group::barrier() {
  note_call("MPI_Barrier");
  MPI_CHECK(MPI_Barrier(comm_));
}

// ---- hand-written algorithms ----

// Step s = 0..p-2: send chunk r-s-1 to the right, receive chunk r-s-2 from the left and add our own
// contribution. Chunk c is summed as a left fold over ranks c+1, c+2, ..., c (mod p) and ends
// complete on rank c — a fixed order, independent of timing.
template <class T, class Chunk>
void Group::ring_reduce_scatter_impl(T* buf, Chunk chunk) {
  const int p = size_, r = rank_;
  if (p == 1) return;
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  size_t longest = 0;
  for (int k = 0; k < p; ++k) longest = std::max(longest, chunk(k).second - chunk(k).first);
  T* tmp = reinterpret_cast<T*>(scratch(longest * sizeof(T)));
  for (int s = 0; s < p - 1; ++s) {
    const auto [sb, se] = chunk(((r - s - 1) % p + p) % p);
    const auto [rb, re] = chunk(((r - s - 2) % p + p) % p);
    note_call("MPI_Sendrecv");
    MPI_CHECK(MPI_Sendrecv(buf + sb, to_count(se - sb), mpi_type<T>(), right, kRingTag, tmp,
                           to_count(re - rb), mpi_type<T>(), left, kRingTag, comm_,
                           MPI_STATUS_IGNORE));
    bytes_sent += (se - sb) * sizeof(T);
    for (size_t i = 0; i < re - rb; ++i) buf[rb + i] = tmp[i] + buf[rb + i];
  }
}

// Step s = 0..p-2: send chunk r-s (final: our own, then the one just received) to the right and
// receive chunk r-s-1 from the left straight into place.
template <class T>
void Group::ring_all_gather_impl(T* buf, size_t n) {
  const int p = size_, r = rank_;
  if (p == 1) return;
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  for (int s = 0; s < p - 1; ++s) {
    const auto [sb, se] = ring_chunk_range(n, p, ((r - s) % p + p) % p);
    const auto [rb, re] = ring_chunk_range(n, p, ((r - s - 1) % p + p) % p);
    note_call("MPI_Sendrecv");
    MPI_CHECK(MPI_Sendrecv(buf + sb, to_count(se - sb), mpi_type<T>(), right, kRingTag, buf + rb,
                           to_count(re - rb), mpi_type<T>(), left, kRingTag, comm_,
                           MPI_STATUS_IGNORE));
    bytes_sent += (se - sb) * sizeof(T);
  }
}

// Rank 0 receives the buffers one by one in rank order (so the sum is ((x0 + x1) + x2) + ...) and
// sends the result back to each rank; p·n traffic through one rank, which is the point of showing
// it.
template <class T>
void Group::gather_scatter_impl(T* buf, size_t n) {
  const int p = size_;
  if (p == 1) return;
  const int c = to_count(n);
  if (rank_ == 0) {
    T* tmp = reinterpret_cast<T*>(scratch(n * sizeof(T)));
    for (int src = 1; src < p; ++src) {
      note_call("MPI_Recv");
      MPI_CHECK(MPI_Recv(tmp, c, mpi_type<T>(), src, kGatherScatterTag, comm_, MPI_STATUS_IGNORE));
      for (size_t i = 0; i < n; ++i) buf[i] += tmp[i];
    }
    for (int dst = 1; dst < p; ++dst) {
      note_call("MPI_Send");
      MPI_CHECK(MPI_Send(buf, c, mpi_type<T>(), dst, kGatherScatterTag, comm_));
      bytes_sent += n * sizeof(T);
    }
  } else {
    note_call("MPI_Send");
    MPI_CHECK(MPI_Send(buf, c, mpi_type<T>(), 0, kGatherScatterTag, comm_));
    bytes_sent += n * sizeof(T);
    note_call("MPI_Recv");
    MPI_CHECK(MPI_Recv(buf, c, mpi_type<T>(), 0, kGatherScatterTag, comm_, MPI_STATUS_IGNORE));
  }
}

void Group::ring_allreduce_sum(float* buf, size_t n) {
  ring_reduce_scatter_impl(buf, [n, p = size_](int k) { return ring_chunk_range(n, p, k); });
  ring_all_gather_impl(buf, n);
}
void Group::ring_allreduce_sum(double* buf, size_t n) {
  ring_reduce_scatter_impl(buf, [n, p = size_](int k) { return ring_chunk_range(n, p, k); });
  ring_all_gather_impl(buf, n);
}
void Group::ring_reduce_scatter_sum(float* buf, size_t n) {
  ring_reduce_scatter_impl(buf, [n, p = size_](int k) { return ring_chunk_range(n, p, k); });
}
void Group::ring_reduce_scatter_sum(double* buf, size_t n) {
  ring_reduce_scatter_impl(buf, [n, p = size_](int k) { return ring_chunk_range(n, p, k); });
}
void Group::ring_all_gather(float* buf, size_t n) {
  ring_all_gather_impl(buf, n);
}
void Group::ring_all_gather(double* buf, size_t n) {
  ring_all_gather_impl(buf, n);
}
void Group::ring_reduce_scatter_sum_v(float* buf, std::span<const size_t> bounds) {
  MPITRON_REQUIRE(bounds.size() == size_t(size_) + 1, "bounds must have size()+1 entries");
  ring_reduce_scatter_impl(buf, [bounds](int k) {
    return std::pair<size_t, size_t>{bounds[k], bounds[k + 1]};
  });
}

void Group::reduce_scatter_sum_v(float* buf, std::span<const size_t> bounds) {
  MPITRON_REQUIRE(bounds.size() == size_t(size_) + 1, "bounds must have size()+1 entries");
  if (size_ == 1) return;
  counts_.resize(size_);
  for (int k = 0; k < size_; ++k) counts_[k] = to_count(bounds[k + 1] - bounds[k]);
  const size_t own = bounds[rank_ + 1] - bounds[rank_];
  float* tmp = reinterpret_cast<float*>(scratch(own * sizeof(float)));
  note_call("MPI_Reduce_scatter");
  MPI_CHECK(MPI_Reduce_scatter(buf, tmp, counts_.data(), MPI_FLOAT, MPI_SUM, comm_));
  std::copy(tmp, tmp + own, buf + bounds[rank_]);
  bytes_sent += (bounds[size_] - bounds[0] - own) * sizeof(float);
}

void Group::gather_scatter_allreduce_sum(float* buf, size_t n) {
  gather_scatter_impl(buf, n);
}
void Group::gather_scatter_allreduce_sum(double* buf, size_t n) {
  gather_scatter_impl(buf, n);
}

}  // namespace mpitron::comm
