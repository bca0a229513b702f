// A hung rank must not hold a job's allocation for ever: a rank stopped by SIGSTOP, a dead NFS
// mount or a stuck device leaves every other rank waiting in a collective. Each rank's trainer
// marks its progress (step and phase); a watchdog thread ends the job when nothing moves for
// the timeout: one line naming the rank, the step, the phase and the last MPI call the rank entered
// (and on which group), then MPI_Abort, so mpirun and srun end every rank (the stopped one
// included).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "comm/group.hpp"

namespace mpitron {

// What a rank is doing, for its watchdog. Phases are string literals (never freed).
struct Progress {
  std::atomic<uint64_t> beats{0};
  std::atomic<int64_t> step{0};
  std::atomic<const char*> phase{"start-up"};
  comm::CallLog calls;  // the last MPI call the grid's groups entered (Group::set_call_log)
  void mark(const char* p) {
    phase.store(p, std::memory_order_relaxed);
    beats.fetch_add(1, std::memory_order_release);
  }
};

class Watchdog {
 public:
  // Watches progress from a thread of its own; timeout_s <= 0 watches nothing.
  Watchdog(const Progress& progress, double timeout_s, int rank);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  void watch();
  const Progress& progress_;
  double timeout_s_;
  int rank_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace mpitron
