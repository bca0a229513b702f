#include "base/staged_memory.hpp"

#include <execinfo.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

#include "base/allocator.hpp"
#include "base/human_units.hpp"

namespace mpitron::staged_memory {

namespace {

constexpr size_t kPage = 4096;

struct Arena {
  std::once_flag reserved;
  std::atomic<uintptr_t> real{0}, device{0};  // the two ranges' starts; device = real + size
  size_t size = 0;
  std::mutex m;
  size_t top = 0;                   // pages past it never handed out
  std::map<size_t, size_t> free_;   // offset -> bytes below top, coalesced
  std::map<size_t, size_t> taken_;  // offset -> bytes
  struct sigaction previous {};
};

Arena& arena() {
  static Arena a;  // the process's device memory, as a GPU's is the process's
  return a;
}

void write_all(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    const ssize_t w = write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= size_t(w);
  }
}

// A fault in the device range: the host touched a device buffer outside a device call. Other
// faults go to the handler that was there before (or the default action).
void on_segv(int sig, siginfo_t* info, void* context) {
  Arena& a = arena();
  const uintptr_t at = reinterpret_cast<uintptr_t>(info->si_addr);
  const uintptr_t d = a.device.load();
  if (d != 0 && at >= d && at < d + a.size) {
    char line[320];
    std::snprintf(
        line, sizeof line,
        "cpu-staged: pid %d read or wrote device memory at offset %zu of the device "
        "arena, outside a device call: a GPU run faults there too (a download or upload "
        "is missing, or a device pointer reached host code or MPI). Stack (addr2line -Cfe "
        "on the binary names its offsets):\n",
        int(getpid()), size_t(at - d));
    write_all(line);
    void* frames[64];
    backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
    signal(SIGSEGV, SIG_DFL);
    abort();
  }
  if (a.previous.sa_flags & SA_SIGINFO) {
    if (a.previous.sa_sigaction) return a.previous.sa_sigaction(sig, info, context);
  } else if (a.previous.sa_handler != SIG_DFL && a.previous.sa_handler != SIG_IGN) {
    return a.previous.sa_handler(sig);
  }
  signal(SIGSEGV, SIG_DFL);  // the instruction faults again, now with the default action
}

void reserve(Arena& a) {
  // As much address space as the machine's memory could need, without committing any (the pages
  // a run touches are what it uses); halved where the system refuses so much.
  for (size_t size = size_t(64) << 30; size >= (size_t(1) << 30) && a.size == 0; size /= 2) {
    void* p =
        mmap(nullptr, 2 * size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) continue;
    if (mprotect(p, size, PROT_READ | PROT_WRITE) != 0) {
      munmap(p, 2 * size);
      continue;
    }
    a.size = size;
    a.real.store(reinterpret_cast<uintptr_t>(p));
    a.device.store(reinterpret_cast<uintptr_t>(p) + size);
  }
  if (a.size == 0) throw DeviceOutOfMemory("cpu-staged: no address space for its device memory");
  struct sigaction act {};
  act.sa_sigaction = on_segv;
  act.sa_flags = SA_SIGINFO;
  sigemptyset(&act.sa_mask);
  sigaction(SIGSEGV, &act, &a.previous);
}

}  // namespace

Range device_range() {
  const Arena& a = arena();
  const uintptr_t d = a.device.load(std::memory_order_acquire);
  return d == 0 ? Range{} : Range{d, d + a.size};
}

void* allocate(size_t bytes) {
  Arena& a = arena();
  std::call_once(a.reserved, [&] { reserve(a); });
  const size_t n = (std::max<size_t>(bytes, 1) + kPage - 1) / kPage * kPage;
  std::lock_guard lock(a.m);
  size_t at = a.top;
  auto it = a.free_.begin();
  while (it != a.free_.end() && it->second < n) ++it;
  if (it != a.free_.end()) {  // first fit; the rest stays free
    at = it->first;
    if (it->second > n) a.free_[at + n] = it->second - n;
    a.free_.erase(it);
  } else {
    if (a.size - a.top < n)
      throw DeviceOutOfMemory(fmt::format(
          "cpu-staged: {} asked, {} of its {} arena free at the top", human_bytes(double(n)),
          human_bytes(double(a.size - a.top)), human_bytes(double(a.size))));
    a.top += n;
  }
  a.taken_[at] = n;
  return reinterpret_cast<void*>(a.device.load() + at);
}

void release(void* device_address) {
  if (!device_address) return;
  Arena& a = arena();
  std::lock_guard lock(a.m);
  const size_t at = reinterpret_cast<uintptr_t>(device_address) - a.device.load();
  auto t = a.taken_.find(at);
  MPITRON_REQUIRE(t != a.taken_.end(), "cpu-staged: released memory it did not allocate");
  size_t begin = at, n = t->second;
  a.taken_.erase(t);
  // Zero again for the next allocation: the kernel hands fresh pages to the next toucher.
  madvise(reinterpret_cast<void*>(a.real.load() + at), n, MADV_DONTNEED);
  auto next = a.free_.lower_bound(begin);
  if (next != a.free_.end() && begin + n == next->first) {
    n += next->second;
    next = a.free_.erase(next);
  }
  if (next != a.free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == begin) {
      begin = prev->first;
      n += prev->second;
      a.free_.erase(prev);
    }
  }
  if (begin + n == a.top)
    a.top = begin;
  else
    a.free_[begin] = n;
}

}  // namespace mpitron::staged_memory
