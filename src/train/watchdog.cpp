#include "src/train/watchdog.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace mpitron {

Watchdog::Watchdog(const Progress& progress, double timeout_s, int rank)
    : progress_(progress), timeout_s_(timeout_s), rank_(rank) {
  if (timeout_s_ > 0) thread_ = std::thread([this] { watch(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::watch() {
  using Clock = std::chrono::steady_clock;
  uint64_t seen = progress_.beats.load(std::memory_order_acquire);
  Clock::time_point since = Clock::now();
  const auto poll = std::chrono::duration<double>(std::min(1.0, timeout_s_ / 4));
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, poll, [this] { return stopping_; })) {
    const uint64_t now = progress_.beats.load(std::memory_order_acquire);
    if (now != seen) {
      seen = now;
      since = Clock::now();
      continue;
    }
    const double idle = std::chrono::duration<double>(Clock::now() - since).count();
    if (idle < timeout_s_) continue;
    const char* group = progress_.calls.group.load();
    std::fprintf(stderr,
                 "[rank %d] error: no progress for %.0f s (--hang-timeout) at step %lld in %s; "
                 "last MPI call entered: %s%s%s: ending the job\n",
                 rank_, idle, static_cast<long long>(progress_.step.load()), progress_.phase.load(),
                 progress_.calls.call.load(), *group ? " on the " : "",
                 *group ? (std::string(group) + " group").c_str() : "");
    std::fflush(stderr);
    alarm(30);  // should MPI_Abort itself hang, SIGALRM still ends this process
    MPI_Abort(MPI_COMM_WORLD, 4);
    std::_Exit(4);
  }
}

}  // namespace mpitron
