// Walks one rank's action list (src/pipeline/schedule.hpp) over its pipeline stage: receives
// with MPI_Irecv, completed just before the forward or backward that reads them; sends with
// MPI_Isend from a pool of message buffers, so a send never waits for its receiver (the semantics
// the simulator proved deadlock-free). A buffer is reused where the list proves its send received
// (send_plan), not when a test finds it done, so the pool's size is the plan's, whatever the
// timing. Messages between two ranks match in list order on both sides, one tag per kind. It
// knows no model: StageWork says what forward and backward do.
//
// Activation sets (slots): a micro-batch takes a free slot of its chunk at its forward and gives
// it back after its backward, so a stage keeps at most the schedule's peak in flight (1F1B: pp -
// rank; GPipe: m) however many micro-batches run. Forward only (evaluation), a stage starts a
// micro-batch once its sends of the one before were received, so message buffers stay bounded.
//
// A model whose memory MPI cannot read (a GPU's; Open MPI here is not CUDA-aware): every message
// passes through host buffers, downloaded before its send, uploaded once its receive completed.
//
// Failure: an exception inside the pipeline on one rank would leave its neighbours waiting for
// messages that never come, so it ends the whole job (MPI_Abort) after printing the error.
#pragma once
#include <cstddef>
#include <functional>
#include <utility>
#include <vector>

#include "base/allocator.hpp"
#include "comm/group.hpp"
#include "src/model/model.hpp"
#include "src/pipeline/schedule.hpp"

namespace mpitron::pipeline {

struct StageWork {
  // Forward of micro-batch mb (0..m-1 in the step) of a chunk in a slot; returns its loss sum
  // (0 on stages without the loss).
  std::function<double(int mb, int chunk, int slot)> forward;
  // Backward of the last forward of (mb, chunk) in that slot.
  std::function<void(int mb, int chunk, int slot)> backward;
  std::function<StageBoundary(int chunk, int slot)> boundary;
  std::function<int(int mb)> rows;  // samples of micro-batch mb
};

// Copies between the model's memory and the host's, where they differ (null: the same memory).
struct StageTransfers {
  void (*download)(void* host_dst, const void* src, size_t bytes) = nullptr;  // waits for it
  void (*upload)(void* dst, const void* host_src, size_t bytes) = nullptr;
  bool staged() const { return download != nullptr; }
};

struct PipelineTiming {
  double busy_s = 0;   // in forward and backward
  double wait_s = 0;   // waiting for messages (receives, and the last sends at the end)
  double total_s = 0;  // the whole walk
};

class PipelineExecutor {
 public:
  // pp: the pipeline group (its rank is this stage); slots per chunk as the model was built;
  // message_bytes: the largest message (a full micro-batch's boundary tensor, in the model's
  // storage type); alloc: where the message buffers live (the host's memory); transfers: how
  // boundary tensors reach them; plans: those of every list the executor will walk (their most
  // sends, and with transfers their most receives, in flight: the buffers allocated here).
  PipelineExecutor(comm::Group& pp, int chunks, int slots, size_t message_bytes,
                   DeviceAllocator& alloc, StageTransfers transfers,
                   const std::vector<const SendPlan*>& plans);

  // Runs the actions (training: rank_actions; otherwise forward_only_actions) with their send
  // plan; returns the sum of the forwards' results. Ends the job on any exception.
  double run(const std::vector<Action>& actions, const SendPlan& plan, const StageWork& work,
             bool training);
  const PipelineTiming& timing() const { return timing_; }
  // Message buffers (send_buffers(plans) sends, and staged receives).
  size_t send_buffer_bytes() const {
    return (send_buffers_.size() + recv_buffers_.size()) * message_bytes_;
  }
  // The message buffers the plans need: sends, and with staged transfers receives as well.
  static int message_buffers(const std::vector<const SendPlan*>& plans, bool staged);

 private:
  double walk(const std::vector<Action>& actions, const SendPlan& plan, const StageWork& work,
              bool training);
  void retire(size_t send_action);  // waits for that action's send and frees its buffer
  void finish_sends();
  // Staged: a receive into a host buffer, uploaded to dst by finish_receives.
  comm::Request staged_irecv(void* dst, size_t bytes, int peer, int tag);
  void finish_receives();  // waits for every posted receive (and uploads the staged ones)

  comm::Group& pp_;
  int slots_;
  size_t message_bytes_;
  DeviceAllocator& alloc_;
  std::vector<std::vector<int>> slot_of_;     // [chunk][mb], -1: not in flight
  std::vector<std::vector<int>> free_slots_;  // [chunk]
  std::vector<Buffer<unsigned char>> send_buffers_;
  std::vector<comm::Request> sends_;  // sends_[i] uses send_buffers_[i]
  std::vector<size_t> free_send_buffers_;
  std::vector<std::pair<size_t, size_t>> in_flight_;  // (send action index, its buffer)
  std::vector<comm::Request> recvs_;                  // posted, not yet needed
  StageTransfers transfers_;
  struct StagedReceive {
    void* dst;
    size_t buffer, bytes;  // recv_buffers_[buffer], bytes of it
  };
  std::vector<Buffer<unsigned char>> recv_buffers_;
  std::vector<size_t> free_recv_buffers_;
  std::vector<StagedReceive> staged_recvs_;  // of the posted receives, in posting order
  PipelineTiming timing_;
};

}  // namespace mpitron::pipeline
