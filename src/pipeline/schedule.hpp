// Pipeline schedules as data (after Megatron-LM's schedules.py, but pure): a schedule is a
// function from (kind, pp, micro-batches, virtual stages, rank) to that rank's ordered list of
// actions. The simulator runs every rank's list without a model: it proves that each send meets
// its receive in an order that cannot deadlock, and measures the bubble and the activations in
// flight. The executor (src/pipeline/executor.hpp) only walks the list.
//
// Semantics shared by the simulator and the executor: a rank performs its actions in order; a
// send never blocks (MPI_Isend from a buffer of its own, reused once the send is known received:
// send_plan); a receive blocks until the matching send has been performed. Messages from rank a to
// rank b of one kind (activation or gradient) match in order (MPI's non-overtaking rule), so the
// k-th such send on a must carry the same (micro-batch, chunk) as the k-th such receive on b.
//
// Virtual stages: with V > 1 (interleaved 1F1B) rank r holds V model chunks; chunk c of rank r is
// virtual stage c * pp + r, so the network runs rank 0, 1, ..., pp-1, 0, 1, ... (Narayanan et
// al. 2021). With V = 1, chunk is always 0 and the virtual stage is the rank.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace mpitron::pipeline {

enum class ScheduleKind { gpipe, one_f_one_b, interleaved };

// "gpipe" | "1f1b" | "interleaved"; UsageError naming the accepted values otherwise.
ScheduleKind parse_schedule(const std::string& name);
const char* schedule_name(ScheduleKind kind);

struct ScheduleSpec {
  ScheduleKind kind = ScheduleKind::one_f_one_b;
  int pp = 1;              // pipeline ranks
  int micro_batches = 1;   // m
  int virtual_stages = 1;  // V: chunks per rank (interleaved only; 1 otherwise)
};

// "" when the spec is valid, else one message saying what is wrong and what to do (pp >= 1,
// m >= 1, V >= 1, V == 1 unless interleaved, interleaved: V >= 2 and m a multiple of pp).
std::string check_schedule(const ScheduleSpec& spec);

enum class Op {
  forward,          // forward of (micro_batch, chunk)
  backward,         // backward of (micro_batch, chunk)
  recv_activation,  // the input of (micro_batch, chunk) from peer
  send_activation,  // the output of (micro_batch, chunk) to peer
  recv_gradient,    // the gradient of the output of (micro_batch, chunk) from peer
  send_gradient,    // the gradient of the input of (micro_batch, chunk) to peer
};
const char* op_name(Op op);

struct Action {
  Op op;
  int micro_batch = 0;
  int chunk = 0;  // on this rank: 0..V-1
  int peer = -1;  // pipeline rank sent to or received from; -1 for forward and backward
  bool operator==(const Action&) const = default;
};

// Rank `rank`'s actions for one training step: every (micro-batch, chunk) forwarded once and
// backwarded once, with the sends and receives around them. Throws UsageError for an invalid spec.
std::vector<Action> rank_actions(const ScheduleSpec& spec, int rank);

// Forward only (evaluation): every micro-batch through every chunk in order, no gradients.
std::vector<Action> forward_only_actions(const ScheduleSpec& spec, int rank);

// Virtual stage of a chunk on a rank, and the pipeline rank holding a virtual stage.
inline int virtual_stage(const ScheduleSpec& s, int rank, int chunk) {
  return chunk * s.pp + rank;
}
inline int stage_rank(const ScheduleSpec& s, int stage) {
  return stage % s.pp;
}

// One action as the simulator placed it in time.
struct TimedAction {
  Action action;
  double start = 0, end = 0;  // sends and receives take no time; a receive starts when it is
                              // reached and ends when its message is there
};

struct SimulationResult {
  bool ok = false;
  std::string error;    // deadlock (which ranks wait on what), mismatched pair, or a (mb, chunk)
                        // not forwarded and backwarded exactly once
  double makespan = 0;  // time when the last rank finishes
  double busy = 0;      // total forward + backward time over all ranks
  double bubble = 0;    // 1 - busy / (pp * makespan)
  std::vector<std::vector<TimedAction>> timeline;  // per rank, in list order
  // Per rank: the most (micro-batch, chunk) pairs forwarded and not yet backwarded at once, in
  // total and per chunk (the activation sets a stage must keep: slots).
  std::vector<int> peak_in_flight;
  std::vector<std::vector<int>> peak_in_flight_per_chunk;
};

// Runs the lists (one per rank) with forward taking forward_time and backward backward_time per
// chunk. Works on any lists (tests feed it broken ones); a deadlock is reported, never hangs.
SimulationResult simulate(const std::vector<std::vector<Action>>& lists, int virtual_stages,
                          double forward_time = 1.0, double backward_time = 2.0);
SimulationResult simulate(const ScheduleSpec& spec, double forward_time = 1.0,
                          double backward_time = 2.0);

// When a rank may reuse each send's buffer, from the lists alone (not from timing), so a stage's
// message buffers are a number known before the step. A send is known received at the rank's
// first forward or backward after whose completed receives it knows, directly or through other
// ranks (vector clocks over every rank's list), that the peer has run the forward or backward
// that completed that send's receive; waiting for the send there cannot block indefinitely (its
// data has arrived). Evaluation walks (training false) have no
// messages back: there every send of a micro-batch is waited for before the next micro-batch's
// first forward (each of its receives needs sends of its own micro-batch only: no deadlock).
// Sends nothing proves received are waited for at the end of the walk.
struct SendPlan {
  // Per action of the rank's list: the list indices of the sends to wait for and reuse after its
  // receives (non-empty only at forwards and backwards).
  std::vector<std::vector<std::size_t>> retire_at;
  int buffers = 0;   // the most sends not yet retired at once: the send buffers the walk needs
  int receives = 0;  // the most receives posted before a forward or backward completes them
};
SendPlan send_plan(const std::vector<std::vector<Action>>& lists, int rank, bool training);
SendPlan send_plan(const ScheduleSpec& spec, int rank, bool training);

// The bubble fraction theory predicts with zero-cost communication: (pp-1) / (m + pp-1) for GPipe
// and 1F1B, (pp-1) / (V*m + pp-1) for interleaved (the bubble divided by V).
double theoretical_bubble(const ScheduleSpec& spec);

}  // namespace mpitron::pipeline
