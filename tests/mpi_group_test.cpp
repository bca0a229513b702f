// MPI test of comm::Group and comm::make_grid, run by CTest at 1-4 ranks: every collective
// (blocking and not), the ring and gather-scatter all-reduces and the byte counters, against
// references computed locally from known per-rank data (integer-valued floats, so sums are exact).
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/check.hpp"
#include "comm/grid.hpp"
#include "comm/group.hpp"
#include "comm/mpi_check.hpp"
#include "comm/world.hpp"

namespace {

using namespace mpitron::comm;

int g_failures = 0;
int g_rank = 0;

// Records a failure and carries on: control flow never depends on a check, so every rank still
// makes the same collective calls and a failure cannot turn into a hang.
void expect(bool ok, const std::string& what, int line) {
  if (ok) return;
  ++g_failures;
  std::fprintf(stderr, "[rank %d] mpi_group_test.cpp:%d FAILED: %s\n", g_rank, line, what.c_str());
}
#define EXPECT(cond, what) expect((cond), std::string(#cond " -- ") + (what), __LINE__)

const std::vector<size_t> kSizes = {0, 1, 2, 3, 5, 17, 1000, 4099};

// Rank r's contribution at global index i: small integers, so every sum below is exact in float.
float value(int r, size_t i) {
  return static_cast<float>((r + 1) * 3 + static_cast<int>(i % 11));
}

std::vector<float> data(int r, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = value(r, i);
  return v;
}

std::vector<float> reference_sum(int p, size_t n) {
  std::vector<float> v(n, 0.0f);
  for (int r = 0; r < p; ++r)
    for (size_t i = 0; i < n; ++i) v[i] += value(r, i);
  return v;
}

size_t chunk_len(size_t n, int p, int r) {
  auto [b, e] = ring_chunk_range(n, p, r);
  return e - b;
}

std::string ctx(const char* what, size_t n) {
  return std::string(what) + " n=" + std::to_string(n);
}

// FNV-1a over the bit patterns, folded to 62 bits so that its negation is representable.
int64_t bit_hash(const std::vector<float>& v) {
  uint64_t h = 1469598103934665603ull;
  for (float f : v) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    h = (h ^ u) * 1099511628211ull;
  }
  return static_cast<int64_t>(h >> 2);
}

// True on every rank iff x is the same on every rank of g. Both reductions always run: a
// short-circuit here would let ranks disagree on the number of collectives (a hang).
bool same_everywhere(Group& g, int64_t x) {
  const int64_t hi = g.allreduce_max(x);
  const int64_t lo = -g.allreduce_max(-x);
  return hi == x && lo == x;
}

// ---- all-reduce: MPI blocking / non-blocking, ring, gather-scatter ----

void test_allreduce(Group& g) {
  const int p = g.size(), r = g.rank();
  for (size_t n : kSizes) {
    const auto ref = reference_sum(p, n);
    const uint64_t ring_bytes = allreduce_bytes_sent(n, sizeof(float), p, r);
    const uint64_t gs_bytes = p == 1 ? 0 : (r == 0 ? (p - 1) * n * 4 : n * 4);
    for (int variant = 0; variant < 4; ++variant) {
      static const char* names[] = {"allreduce_sum", "iallreduce_sum", "ring_allreduce_sum",
                                    "gather_scatter_allreduce_sum"};
      auto buf = data(r, n);
      const uint64_t before = g.bytes_sent;
      switch (variant) {
        case 0:
          g.allreduce_sum(buf.data(), n);
          break;
        case 1: {
          Request req = g.iallreduce_sum(buf.data(), n);
          req.wait();
          EXPECT(!req.pending(), ctx(names[variant], n));
          break;
        }
        case 2:
          g.ring_allreduce_sum(buf.data(), n);
          break;
        case 3:
          g.gather_scatter_allreduce_sum(buf.data(), n);
          break;
      }
      const uint64_t sent = g.bytes_sent - before;
      EXPECT(buf == ref, ctx(names[variant], n));
      EXPECT(sent == (variant == 3 ? gs_bytes : ring_bytes),
             ctx(names[variant], n) + " bytes " + std::to_string(sent));
      // The ring's counter adds up what it actually sent; over the group that is 2(p-1)·n floats.
      if (variant == 2) {
        const int64_t total = g.allreduce_sum(static_cast<int64_t>(sent));
        EXPECT(total == 2 * (p - 1) * static_cast<int64_t>(n) * 4, ctx("ring total bytes", n));
        if (n % p == 0) EXPECT(sent == 2 * (p - 1) * (n / p) * 4, ctx("ring 2(p-1)/p·n", n));
      }
    }
    // Double forms.
    std::vector<double> d(n), dref(n);
    for (size_t i = 0; i < n; ++i) d[i] = value(r, i) + 0.25, dref[i] = ref[i] + 0.25 * p;
    auto d2 = d, d3 = d;
    g.allreduce_sum(d.data(), n);
    g.ring_allreduce_sum(d2.data(), n);
    g.gather_scatter_allreduce_sum(d3.data(), n);
    EXPECT(d == dref && d2 == dref && d3 == dref, ctx("double allreduce variants", n));
  }
}

// The halves of the ring alone, as ZeRO uses them.
void test_ring_halves(Group& g) {
  const int p = g.size(), r = g.rank();
  for (size_t n : kSizes) {
    const auto ref = reference_sum(p, n);
    auto buf = data(r, n);
    uint64_t before = g.bytes_sent;
    g.ring_reduce_scatter_sum(buf.data(), n);
    EXPECT(g.bytes_sent - before == (n - chunk_len(n, p, r)) * 4, ctx("ring RS bytes", n));
    const auto [b, e] = ring_chunk_range(n, p, r);
    bool ok = true;
    for (size_t i = b; i < e; ++i) ok = ok && buf[i] == ref[i];
    EXPECT(ok, ctx("ring_reduce_scatter_sum own chunk", n));

    // All-gather: only our own chunk is valid on entry (the rest is NaN), all of it on exit.
    std::vector<float> ag(n, std::numeric_limits<float>::quiet_NaN());
    for (size_t i = b; i < e; ++i) ag[i] = value(7, i);
    before = g.bytes_sent;
    g.ring_all_gather(ag.data(), n);
    EXPECT(g.bytes_sent - before == (n - chunk_len(n, p, (r + 1) % p)) * 4,
           ctx("ring AG bytes", n));
    EXPECT(ag == data(7, n), ctx("ring_all_gather", n));
  }
}

// Reduce-scatter over uneven cut points (ZeRO 2 segments cut by shard boundaries), both forms:
// chunk rank() ends holding the exact sum; bytes are n minus the own chunk.
void test_reduce_scatter_v(Group& g) {
  const int p = g.size(), r = g.rank();
  for (size_t n : kSizes) {
    const auto ref = reference_sum(p, n);
    // Uneven cuts: chunk k gets a share growing with k, the first one possibly empty.
    std::vector<size_t> bounds(p + 1, 0);
    for (int k = 1; k <= p; ++k) bounds[k] = std::min(n, n * size_t(k * k) / size_t(p * p));
    bounds[p] = n;
    for (int form = 0; form < 2; ++form) {
      auto buf = data(r, n);
      const uint64_t before = g.bytes_sent;
      if (form == 0)
        g.reduce_scatter_sum_v(buf.data(), bounds);
      else
        g.ring_reduce_scatter_sum_v(buf.data(), bounds);
      const size_t own = bounds[r + 1] - bounds[r];
      EXPECT(g.bytes_sent - before == (p == 1 ? 0 : (n - own) * 4),
             ctx(form == 0 ? "reduce_scatter_sum_v bytes" : "ring_reduce_scatter_sum_v bytes", n));
      bool ok = true;
      for (size_t i = bounds[r]; i < bounds[r + 1]; ++i) ok = ok && buf[i] == ref[i];
      EXPECT(ok, ctx(form == 0 ? "reduce_scatter_sum_v" : "ring_reduce_scatter_sum_v", n));
    }
  }
}

// Replicated parameters stay identical across DP ranks only if a reduction is bitwise the same on
// every rank; non-integer data makes the summation order matter.
void test_bitwise_agreement(Group& g) {
  const int p = g.size(), r = g.rank();
  for (size_t n : {size_t{1000}, size_t{4099}}) {
    std::mt19937 gen(1234 + r);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> x(n);
    for (auto& v : x) v = u(gen);
    // Reference in double from every rank's data, regenerated locally.
    std::vector<double> ref(n, 0.0);
    for (int q = 0; q < p; ++q) {
      std::mt19937 gq(1234 + q);
      for (size_t i = 0; i < n; ++i) ref[i] += u(gq);
    }
    auto a = x, b = x, c = x;
    g.ring_allreduce_sum(a.data(), n);
    g.gather_scatter_allreduce_sum(b.data(), n);
    g.allreduce_sum(c.data(), n);
    EXPECT(same_everywhere(g, bit_hash(a)), ctx("ring result differs across ranks", n));
    EXPECT(same_everywhere(g, bit_hash(b)), ctx("gather-scatter result differs across ranks", n));
    EXPECT(same_everywhere(g, bit_hash(c)), ctx("MPI_Allreduce result differs across ranks", n));
    double worst = 0;
    for (size_t i = 0; i < n; ++i)
      worst = std::max({worst, std::abs(a[i] - ref[i]), std::abs(b[i] - ref[i])});
    EXPECT(worst < 1e-5 * p, ctx("ring/gather-scatter accuracy", n) + " " + std::to_string(worst));
    // Determinism: the same input gives the same bits again.
    auto a2 = x;
    g.ring_allreduce_sum(a2.data(), n);
    EXPECT(a2 == a, ctx("ring is not deterministic", n));
  }
}

// ---- reduce-scatter, all-gather ----

void test_reduce_scatter_all_gather(Group& g) {
  const int p = g.size(), r = g.rank();
  for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{257}}) {
    const size_t total = count * p;
    const auto send = data(r, total);
    const auto ref = reference_sum(p, total);
    const std::vector<float> want(ref.begin() + r * count, ref.begin() + (r + 1) * count);
    const uint64_t bytes = (p - 1) * count * 4;

    std::vector<float> recv(count, -1.0f);
    uint64_t before = g.bytes_sent;
    g.reduce_scatter_sum(send.data(), recv.data(), count);
    EXPECT(recv == want && g.bytes_sent - before == bytes, ctx("reduce_scatter_sum", count));

    std::fill(recv.begin(), recv.end(), -1.0f);
    before = g.bytes_sent;
    {
      Request req = g.ireduce_scatter_sum(send.data(), recv.data(), count);
    }  // the destructor waits
    EXPECT(recv == want && g.bytes_sent - before == bytes, ctx("ireduce_scatter_sum", count));

    std::vector<double> dsend(send.begin(), send.end()), drecv(count);
    g.reduce_scatter_sum(dsend.data(), drecv.data(), count);
    EXPECT(std::vector<float>(drecv.begin(), drecv.end()) == want, ctx("double RS", count));

    // All-gather: block q of the result is rank q's contribution.
    const auto mine = data(r, count);
    std::vector<float> gathered_ref(total);
    for (int q = 0; q < p; ++q)
      for (size_t j = 0; j < count; ++j) gathered_ref[q * count + j] = value(q, j);
    std::vector<float> all(total, -1.0f);
    before = g.bytes_sent;
    g.all_gather(mine.data(), all.data(), count);
    EXPECT(all == gathered_ref && g.bytes_sent - before == bytes, ctx("all_gather", count));

    std::fill(all.begin(), all.end(), -1.0f);
    before = g.bytes_sent;
    Request req = g.iall_gather(mine.data(), all.data(), count);
    while (!req.test()) {
    }
    EXPECT(!req.pending(), ctx("iall_gather test()", count));
    EXPECT(all == gathered_ref && g.bytes_sent - before == bytes, ctx("iall_gather", count));

    std::vector<double> dmine(mine.begin(), mine.end()), dall(total);
    g.all_gather(dmine.data(), dall.data(), count);
    EXPECT(std::vector<float>(dall.begin(), dall.end()) == gathered_ref, ctx("double AG", count));
  }
}

// Several non-blocking collectives in flight at once, completed in reverse order.
void test_overlapping_nonblocking(Group& g) {
  const int p = g.size(), r = g.rank();
  const size_t n = 1000, count = 100;
  auto a = data(r, n);
  const auto rs_send = data(r, count * p);
  std::vector<float> rs_recv(count);
  const auto ag_send = data(r, count);
  std::vector<float> ag_recv(count * p);
  std::vector<Request> reqs;
  reqs.push_back(g.iallreduce_sum(a.data(), n));
  reqs.push_back(g.ireduce_scatter_sum(rs_send.data(), rs_recv.data(), count));
  reqs.push_back(g.iall_gather(ag_send.data(), ag_recv.data(), count));
  for (int i = 2; i >= 0; --i) reqs[i].wait();
  EXPECT(a == reference_sum(p, n), "overlapped iallreduce");
  const auto rs_ref = reference_sum(p, count * p);
  EXPECT(std::equal(rs_recv.begin(), rs_recv.end(), rs_ref.begin() + r * count),
         "overlapped ireduce_scatter");
  bool ok = true;
  for (int q = 0; q < p; ++q)
    for (size_t j = 0; j < count; ++j) ok = ok && ag_recv[q * count + j] == value(q, j);
  EXPECT(ok, "overlapped iall_gather");
  // Move-assigning over a pending request completes the old one first.
  auto b = data(r, n);
  Request x = g.iallreduce_sum(b.data(), n);
  x = Request();
  EXPECT(b == reference_sum(p, n) && !x.pending(), "move-assign waits");
}

// ---- broadcast, gather, scatter ----

void test_broadcast_gather_scatter(Group& g) {
  const int p = g.size(), r = g.rank();
  for (int root = 0; root < p; ++root) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{1000}}) {
      const auto src = data(root, n);
      auto buf = r == root ? src : std::vector<float>(n, -1.0f);
      uint64_t before = g.bytes_sent;
      g.broadcast(buf.data(), n, root);
      EXPECT(buf == src, ctx("broadcast", n));
      EXPECT(g.bytes_sent - before == broadcast_bytes_sent(n * 4, p, r, root),
             ctx("broadcast bytes", n));
      // The chain convention: everyone but the rank before root forwards n bytes.
      EXPECT(g.bytes_sent - before == ((r == (root + p - 1) % p) ? 0 : n * 4),
             ctx("broadcast chain figure", n));

      buf = r == root ? src : std::vector<float>(n, -1.0f);
      Request req = g.ibroadcast(buf.data(), n, root);
      req.wait();
      EXPECT(buf == src, ctx("ibroadcast", n));

      std::vector<double> d(n, -1.0);
      if (r == root)
        for (size_t i = 0; i < n; ++i) d[i] = src[i] + 0.5;
      g.broadcast(d.data(), n, root);
      bool ok = true;
      for (size_t i = 0; i < n; ++i) ok = ok && d[i] == src[i] + 0.5;
      EXPECT(ok, ctx("broadcast double", n));
    }
    // 64-bit integers beyond double's 53-bit mantissa, and raw bytes.
    int64_t i64[2] = {0, 0};
    uint64_t u64[2] = {0, 0};
    if (r == root) {
      i64[0] = (int64_t{1} << 60) + 1 + root, i64[1] = -(int64_t{1} << 62) - 3;
      u64[0] = ~uint64_t{0} - root, u64[1] = (uint64_t{1} << 63) + 7;
    }
    g.broadcast(i64, 2, root);
    g.broadcast(u64, 2, root);
    EXPECT(i64[0] == (int64_t{1} << 60) + 1 + root && i64[1] == -(int64_t{1} << 62) - 3,
           "broadcast int64");
    EXPECT(u64[0] == ~uint64_t{0} - root && u64[1] == (uint64_t{1} << 63) + 7, "broadcast uint64");
    std::string text(1001, ' ');
    const std::string want = std::string(1000, 'a' + root) + "!";
    if (r == root) text = want;
    const uint64_t before = g.bytes_sent;
    g.broadcast_bytes(text.data(), text.size(), root);
    EXPECT(text == want, "broadcast_bytes");
    EXPECT(g.bytes_sent - before == broadcast_bytes_sent(text.size(), p, r, root),
           "broadcast_bytes bytes");

    // Gather and scatter, float and double.
    for (size_t count : {size_t{0}, size_t{1}, size_t{129}}) {
      const auto mine = data(r, count);
      std::vector<float> all(r == root ? count * p : 0, -1.0f);
      uint64_t b0 = g.bytes_sent;
      g.gather(mine.data(), r == root ? all.data() : nullptr, count, root);
      EXPECT(g.bytes_sent - b0 == (r == root ? 0 : count * 4), ctx("gather bytes", count));
      if (r == root) {
        bool ok = true;
        for (int q = 0; q < p; ++q)
          for (size_t j = 0; j < count; ++j) ok = ok && all[q * count + j] == value(q, j);
        EXPECT(ok, ctx("gather", count));
      }
      std::vector<double> dmine(mine.begin(), mine.end()), dall(r == root ? count * p : 0);
      g.gather(dmine.data(), r == root ? dall.data() : nullptr, count, root);
      if (r == root) {
        bool ok = true;
        for (int q = 0; q < p; ++q)
          for (size_t j = 0; j < count; ++j) ok = ok && dall[q * count + j] == value(q, j);
        EXPECT(ok, ctx("gather double", count));
      }

      // Scatter: root's block q (rank q's data, scaled) goes to rank q.
      std::vector<float> blocks;
      if (r == root)
        for (int q = 0; q < p; ++q)
          for (size_t j = 0; j < count; ++j) blocks.push_back(2 * value(q, j));
      std::vector<float> got(count, -1.0f), want_blk(count);
      for (size_t j = 0; j < count; ++j) want_blk[j] = 2 * value(r, j);
      b0 = g.bytes_sent;
      g.scatter(r == root ? blocks.data() : nullptr, got.data(), count, root);
      EXPECT(got == want_blk, ctx("scatter", count));
      EXPECT(g.bytes_sent - b0 == (r == root ? (p - 1) * count * 4 : 0),
             ctx("scatter bytes", count));
      std::vector<double> dblocks(blocks.begin(), blocks.end()), dgot(count);
      g.scatter(r == root ? dblocks.data() : nullptr, dgot.data(), count, root);
      EXPECT(std::vector<float>(dgot.begin(), dgot.end()) == want_blk,
             ctx("scatter double", count));
    }
  }
}

// ---- point-to-point ----

void test_point_to_point(Group& g) {
  const int p = g.size(), r = g.rank();
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  for (size_t n : {size_t{0}, size_t{1}, size_t{100000}}) {
    // A ring shift with non-blocking calls (p = 1 sends to itself).
    const auto mine = data(r, n);
    std::vector<float> got(n, -1.0f);
    uint64_t before = g.bytes_sent;
    {
      std::vector<Request> reqs;
      reqs.push_back(g.irecv(got.data(), n, left, 5));
      reqs.push_back(g.isend(mine.data(), n, right, 5));
      wait_all(reqs);
      EXPECT(!reqs[0].pending() && !reqs[1].pending(), ctx("wait_all", n));
    }
    EXPECT(got == data(left, n), ctx("isend/irecv ring shift", n));
    EXPECT(g.bytes_sent - before == n * 4, ctx("isend bytes", n));

    // Requests left to their destructors complete too.
    std::vector<double> dmine(mine.begin(), mine.end()), dgot(n, -1.0);
    {
      Request a = g.irecv(dgot.data(), n, left, 6);
      Request b = g.isend(dmine.data(), n, right, 6);
      Request moved = std::move(a);
      EXPECT(!a.pending(), "moved-from Request is empty");
    }
    EXPECT(std::vector<float>(dgot.begin(), dgot.end()) == data(left, n), ctx("double ring", n));

    // Blocking ping-pong between ranks 0 and 1.
    if (p >= 2 && r < 2) {
      std::vector<float> buf = r == 0 ? mine : std::vector<float>(n);
      before = g.bytes_sent;
      if (r == 0) {
        g.send(buf.data(), n, 1, 7);
        g.recv(buf.data(), n, 1, 8);
        auto want = mine;
        for (auto& v : want) v += 1;
        EXPECT(buf == want, ctx("send/recv ping-pong", n));
      } else {
        g.recv(buf.data(), n, 0, 7);
        EXPECT(buf == data(0, n), ctx("recv", n));
        for (auto& v : buf) v += 1;
        g.send(buf.data(), n, 0, 8);
      }
      EXPECT(g.bytes_sent - before == n * 4, ctx("send bytes", n));
      std::vector<double> d(n, r == 0 ? 2.5 : 0.0);
      if (r == 0) g.send(d.data(), n, 1, 9);
      if (r == 1) g.recv(d.data(), n, 0, 9);
      EXPECT(d == std::vector<double>(n, 2.5), ctx("double send/recv", n));
    }
  }
}

// ---- scalars, barrier, moves ----

void test_scalars_and_moves(Group& g) {
  const int p = g.size(), r = g.rank();
  uint64_t before = g.bytes_sent;
  EXPECT(g.allreduce_sum(static_cast<double>(r + 1)) == p * (p + 1) / 2.0, "allreduce_sum double");
  EXPECT(g.bytes_sent - before == allreduce_bytes_sent(1, 8, p, r), "scalar bytes");
  const int64_t big = int64_t{1} << 60;
  EXPECT(g.allreduce_sum(big + r) == p * big + p * (p - 1) / 2, "allreduce_sum int64");
  EXPECT(g.allreduce_max(r + 0.5) == p - 0.5, "allreduce_max double");
  EXPECT(g.allreduce_max(big + r) == big + p - 1, "allreduce_max int64");
  before = g.bytes_sent;
  g.barrier();
  EXPECT(g.bytes_sent == before, "barrier counts nothing");

  // A moved Group keeps its communicator and counter; the moved-from one is null.
  Group moved = std::move(g);
  EXPECT(g.size() == 0 && g.comm() == MPI_COMM_NULL, "moved-from Group is null");
  EXPECT(moved.size() == p && moved.rank() == r && moved.bytes_sent == before, "moved Group");
  float x = 1.0f;
  moved.allreduce_sum(&x, 1);
  EXPECT(x == static_cast<float>(p), "moved Group works");
  g = std::move(moved);
  EXPECT(g.size() == p && moved.size() == 0, "move-assign back");
}

// ---- make_grid ----

void test_bad_layouts(Group& world) {
  const int p = world.size();
  struct Try {
    int dp, tp, pp;
  };
  std::vector<Try> tries = {{0, 1, p}, {p, 0, 1}, {1, 1, -1}, {2, 2, p}};
  for (int dp = 1; dp <= 5; ++dp)
    if (dp != p) tries.push_back({dp, 1, 1});
  if (p == 4) tries.push_back({3, 1, 1});
  for (const Try& t : tries) {
    const std::string want = check_grid_shape({p, t.dp, t.tp, t.pp});
    const std::string what = "make_grid(" + std::to_string(t.dp) + "," + std::to_string(t.tp) +
                             "," + std::to_string(t.pp) + ")";
    EXPECT(!want.empty(), what + " should be a bad layout");
    bool threw = false;
    try {
      Grid grid = make_grid(t.dp, t.tp, t.pp);
    } catch (const mpitron::UsageError& e) {
      threw = true;
      EXPECT(e.what() == want, what + " message: " + e.what());
    } catch (...) {
      EXPECT(false, what + " threw something other than UsageError");
    }
    EXPECT(threw, what + " did not throw");
  }
  world.barrier();  // every rank is still here and in step
}

void check_axis(Group& axis, const std::vector<int>& members, int world_rank, const char* name) {
  int index = 0;
  while (index < static_cast<int>(members.size()) && members[index] != world_rank) ++index;
  EXPECT(axis.size() == static_cast<int>(members.size()), std::string(name) + " size");
  EXPECT(axis.rank() == index, std::string(name) + " rank");
  EXPECT(axis.bytes_sent == 0, std::string(name) + " counter starts at 0");
  // The members, in group-rank order, are exactly the arithmetic's list.
  const float me = static_cast<float>(world_rank);
  std::vector<float> all(axis.size());
  axis.all_gather(&me, all.data(), 1);
  EXPECT(std::vector<float>(members.begin(), members.end()) == all, std::string(name) + " members");
  // The hand-written ring runs on the split communicator too.
  float sum = me;
  axis.ring_allreduce_sum(&sum, 1);
  float want = 0;
  for (int m : members) want += static_cast<float>(m);
  EXPECT(sum == want, std::string(name) + " ring sum");
}

void test_good_layouts(Group& world) {
  const int p = world.size(), rank = world.rank();
  for (int dp = 1; dp <= p; ++dp)
    for (int tp = 1; tp <= p; ++tp) {
      if (p % (dp * tp) != 0) continue;
      const int pp = p / (dp * tp);
      const GridShape s{p, dp, tp, pp};
      Grid grid = make_grid(dp, tp, pp);
      const std::string what = "grid dp=" + std::to_string(dp) + " tp=" + std::to_string(tp) +
                               " pp=" + std::to_string(pp);
      const GridCoords c = grid_coords(s, rank);
      EXPECT(grid.shape.world == p && grid.shape.dp == dp && grid.shape.tp == tp &&
                 grid.shape.pp == pp,
             what + " shape");
      EXPECT(grid.rank == rank && grid.coords.dp_rank == c.dp_rank &&
                 grid.coords.tp_rank == c.tp_rank && grid.coords.pp_rank == c.pp_rank,
             what + " coords");
      EXPECT(grid.world.size() == p && grid.world.rank() == rank &&
                 grid.world.comm() == MPI_COMM_WORLD,
             what + " world");
      check_axis(grid.dp, dp_group_ranks(s, rank), rank, (what + " dp").c_str());
      check_axis(grid.tp, tp_group_ranks(s, rank), rank, (what + " tp").c_str());
      check_axis(grid.pp, pp_group_ranks(s, rank), rank, (what + " pp").c_str());
      EXPECT(grid.world.bytes_sent == 0, what + " axis traffic is not counted on world");
      EXPECT(
          grid.dp.rank() == c.dp_rank && grid.tp.rank() == c.tp_rank && grid.pp.rank() == c.pp_rank,
          what + " group ranks are the coordinates");
    }
}

// throw_first_error: every rank throws the lowest failing rank's message, whichever ranks fail;
// no rank throws when none fails.
void test_first_error(Group& world) {
  const int p = world.size();
  for (int first = 0; first <= p; ++first) {  // ranks >= first fail; first == p: none
    const std::string mine =
        world.rank() >= first ? "rank " + std::to_string(world.rank()) + " failed" : "";
    std::string got = "(nothing thrown)";
    try {
      throw_first_error(mine, MPI_COMM_WORLD);
    } catch (const mpitron::UsageError& e) {
      got = e.what();
    }
    const std::string want =
        first < p ? "rank " + std::to_string(first) + " failed" : "(nothing thrown)";
    EXPECT(got == want, "throw_first_error with ranks >= " + std::to_string(first) +
                            " failing: got '" + got + "'");
  }
}

}  // namespace

int main(int argc, char** argv) {
  mpitron::init_mpi(&argc, &argv);
  int p = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &g_rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &p));
  {
    Group world = Group::world();
    test_allreduce(world);
    test_ring_halves(world);
    test_reduce_scatter_v(world);
    test_bitwise_agreement(world);
    test_reduce_scatter_all_gather(world);
    test_overlapping_nonblocking(world);
    test_broadcast_gather_scatter(world);
    test_point_to_point(world);
    test_scalars_and_moves(world);
    test_bad_layouts(world);
    test_good_layouts(world);
    test_first_error(world);

    const int64_t failed = Group::world().allreduce_sum(static_cast<int64_t>(g_failures));
    if (g_rank == 0) {
      if (failed == 0)
        std::printf("mpi_group_test: all checks passed on %d rank(s)\n", p);
      else
        std::printf("mpi_group_test: %lld check(s) FAILED on %d rank(s)\n",
                    static_cast<long long>(failed), p);
    }
    g_failures = static_cast<int>(failed);
  }
  mpitron::finalize_mpi();
  return g_failures == 0 ? 0 : 1;
}
