#include "src/pipeline/executor.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>

#include "base/check.hpp"

namespace mpitron::pipeline {

namespace {

constexpr int kActivationTag = 1, kGradientTag = 2;

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The most sends and receives in flight of any of the plans: what one pool serves them all with.
std::pair<int, int> buffer_counts(const std::vector<const SendPlan*>& plans) {
  int sends = 0, receives = 0;
  for (const SendPlan* p : plans) {
    sends = std::max(sends, p->buffers);
    receives = std::max(receives, p->receives);
  }
  return {sends, receives};
}

}  // namespace

PipelineExecutor::PipelineExecutor(comm::Group& pp, int chunks, int slots, size_t message_bytes,
                                   DeviceAllocator& alloc, StageTransfers transfers,
                                   const std::vector<const SendPlan*>& plans)
    : pp_(pp), slots_(slots), message_bytes_(message_bytes), alloc_(alloc), transfers_(transfers) {
  MPITRON_REQUIRE(chunks >= 1 && slots >= 1, "a pipeline stage needs a chunk and a slot");
  slot_of_.resize(size_t(chunks));
  free_slots_.resize(size_t(chunks));
  const auto [sends, receives] = buffer_counts(plans);
  {
    AllocationPurpose purpose(alloc_, "the pipeline send buffers");
    for (int k = 0; k < sends; ++k) {
      send_buffers_.emplace_back(alloc_, message_bytes_);
      sends_.emplace_back();
      free_send_buffers_.push_back(size_t(sends - 1 - k));
    }
  }
  if (!transfers_.staged()) return;
  AllocationPurpose purpose(alloc_, "the pipeline receive buffers");
  for (int k = 0; k < receives; ++k) {
    recv_buffers_.emplace_back(alloc_, message_bytes_);
    free_recv_buffers_.push_back(size_t(receives - 1 - k));
  }
}

int PipelineExecutor::message_buffers(const std::vector<const SendPlan*>& plans, bool staged) {
  const auto [sends, receives] = buffer_counts(plans);
  return sends + (staged ? receives : 0);
}

double PipelineExecutor::run(const std::vector<Action>& actions, const SendPlan& plan,
                             const StageWork& work, bool training) {
  try {
    return walk(actions, plan, work, training);
  } catch (const std::exception& e) {
    // The neighbours wait for this stage's messages: only ending the job avoids a hang.
    std::fprintf(stderr, "[pipeline stage %d] error: %s\n", pp_.rank(), e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 0;
  }
}

void PipelineExecutor::retire(size_t send_action) {
  const auto it = std::find_if(in_flight_.begin(), in_flight_.end(),
                               [&](const auto& f) { return f.first == send_action; });
  MPITRON_REQUIRE(it != in_flight_.end(), "the send plan retires a send not in flight");
  sends_[it->second].wait();
  free_send_buffers_.push_back(it->second);
  in_flight_.erase(it);
}

void PipelineExecutor::finish_sends() {
  for (const auto& [action, buffer] : in_flight_) {
    sends_[buffer].wait();
    free_send_buffers_.push_back(buffer);
  }
  in_flight_.clear();
}

comm::Request PipelineExecutor::staged_irecv(void* dst, size_t bytes, int peer, int tag) {
  MPITRON_REQUIRE(!free_recv_buffers_.empty(), "more receives posted than the send plan counts");
  const size_t k = free_recv_buffers_.back();
  free_recv_buffers_.pop_back();
  staged_recvs_.push_back({dst, k, bytes});
  return pp_.irecv_bytes(recv_buffers_[k].data(), bytes, peer, tag);
}

void PipelineExecutor::finish_receives() {
  for (comm::Request& r : recvs_) r.wait();
  recvs_.clear();
  for (const StagedReceive& r : staged_recvs_) {
    transfers_.upload(r.dst, recv_buffers_[r.buffer].data(), r.bytes);
    free_recv_buffers_.push_back(r.buffer);
  }
  staged_recvs_.clear();
}

double PipelineExecutor::walk(const std::vector<Action>& actions, const SendPlan& plan,
                              const StageWork& work, bool training) {
  MPITRON_REQUIRE(plan.retire_at.size() == actions.size(), "a send plan of another list");
  timing_ = {};
  const auto t_start = Clock::now();
  int mbs = 0;
  for (const Action& a : actions) {
    MPITRON_REQUIRE(a.chunk >= 0 && a.chunk < int(slot_of_.size()), "action on a chunk not held");
    mbs = std::max(mbs, a.micro_batch + 1);
  }
  for (size_t c = 0; c < slot_of_.size(); ++c) {
    slot_of_[c].assign(size_t(mbs), -1);
    free_slots_[c].clear();
    for (int s = slots_ - 1; s >= 0; --s) free_slots_[c].push_back(s);
  }
  auto slot_for = [&](const Action& a) {
    int& s = slot_of_[a.chunk][a.micro_batch];
    if (s < 0) {
      MPITRON_REQUIRE(!free_slots_[a.chunk].empty(),
                      fmt::format("micro-batch {} of chunk {}: more micro-batches in flight than "
                                  "the {} activation sets planned",
                                  a.micro_batch, a.chunk, slots_));
      s = free_slots_[a.chunk].back();
      free_slots_[a.chunk].pop_back();
    }
    return s;
  };
  auto held_slot = [&](const Action& a) {  // of a micro-batch already forwarded
    const int s = slot_of_[a.chunk][a.micro_batch];
    MPITRON_REQUIRE(s >= 0, fmt::format("{} of micro-batch {} before its forward", op_name(a.op),
                                        a.micro_batch));
    return s;
  };
  auto release = [&](int chunk, int mb) {
    int& s = slot_of_[chunk][mb];
    free_slots_[chunk].push_back(s);
    s = -1;
  };
  // Before action i (a forward or backward): its receives, then the sends the plan proves
  // received (their buffers free again).
  auto wait_receives = [&](size_t i) {
    const auto t0 = Clock::now();
    finish_receives();
    for (size_t s : plan.retire_at[i]) retire(s);
    timing_.wait_s += seconds_since(t0);
  };
  auto irecv = [&](void* dst, size_t bytes, int peer, int tag) {
    return transfers_.staged() ? staged_irecv(dst, bytes, peer, tag)
                               : pp_.irecv_bytes(dst, bytes, peer, tag);
  };
  // Bytes of micro-batch mb's message across the chunk's input (or its output) boundary.
  auto message = [&](const StageBoundary& b, size_t per_sample, int mb) {
    const size_t bytes = size_t(work.rows(mb)) * per_sample * b.element_bytes;
    MPITRON_REQUIRE(bytes <= message_bytes_, "a boundary message larger than planned");
    return bytes;
  };
  auto send = [&](size_t action, const void* data, size_t bytes, int peer, int tag) {
    MPITRON_REQUIRE(data != nullptr, "send from a chunk with no neighbour on that side");
    MPITRON_REQUIRE(!free_send_buffers_.empty(), "more sends in flight than the send plan counts");
    const size_t k = free_send_buffers_.back();
    free_send_buffers_.pop_back();
    in_flight_.push_back({action, k});
    if (transfers_.staged())
      transfers_.download(send_buffers_[k].data(), data, bytes);
    else
      std::memcpy(send_buffers_[k].data(), data, bytes);
    sends_[k] = pp_.isend_bytes(send_buffers_[k].data(), bytes, peer, tag);
  };

  double loss = 0;
  // The micro-batch whose slot is free once its send (the next action, if any) has copied out of
  // it: after its backward, or after its forward when not training.
  int released_chunk = -1, released_mb = -1;
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    const Op its_send = training ? Op::send_gradient : Op::send_activation;
    if (released_mb >= 0 &&
        !(a.op == its_send && a.micro_batch == released_mb && a.chunk == released_chunk)) {
      release(released_chunk, released_mb);
      released_mb = -1;
    }
    switch (a.op) {
      case Op::recv_activation: {
        const StageBoundary b = work.boundary(a.chunk, slot_for(a));
        MPITRON_REQUIRE(b.input != nullptr, "receive into a chunk with no previous stage");
        recvs_.push_back(
            irecv(b.input, message(b, b.input_elements, a.micro_batch), a.peer, kActivationTag));
        break;
      }
      case Op::recv_gradient: {
        const StageBoundary b = work.boundary(a.chunk, held_slot(a));
        MPITRON_REQUIRE(b.output_grad != nullptr, "receive into a chunk with no next stage");
        recvs_.push_back(irecv(b.output_grad, message(b, b.output_elements, a.micro_batch), a.peer,
                               kGradientTag));
        break;
      }
      case Op::forward: {
        wait_receives(i);  // forward only, also the last micro-batch's sends (send_plan)
        const int slot = slot_for(a);
        const auto t0 = Clock::now();
        loss += work.forward(a.micro_batch, a.chunk, slot);
        timing_.busy_s += seconds_since(t0);
        if (!training) released_chunk = a.chunk, released_mb = a.micro_batch;
        break;
      }
      case Op::backward: {
        wait_receives(i);
        const int slot = held_slot(a);
        const auto t0 = Clock::now();
        work.backward(a.micro_batch, a.chunk, slot);
        timing_.busy_s += seconds_since(t0);
        released_chunk = a.chunk;
        released_mb = a.micro_batch;
        break;
      }
      case Op::send_activation: {
        const StageBoundary b = work.boundary(a.chunk, held_slot(a));
        send(i, b.output, message(b, b.output_elements, a.micro_batch), a.peer, kActivationTag);
        break;
      }
      case Op::send_gradient: {
        const StageBoundary b = work.boundary(a.chunk, held_slot(a));
        send(i, b.input_grad, message(b, b.input_elements, a.micro_batch), a.peer, kGradientTag);
        break;
      }
    }
  }
  if (released_mb >= 0) release(released_chunk, released_mb);
  const auto t0 = Clock::now();
  finish_receives();
  finish_sends();
  timing_.wait_s += seconds_since(t0);
  timing_.total_s = seconds_since(t_start);
  return loss;
}

}  // namespace mpitron::pipeline
