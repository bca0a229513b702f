// The step-time model of `mpitron plan --nodes`: a layout's step on N nodes predicted from a
// measured compute time and a latency-bandwidth (alpha-beta) model per link class (shared memory
// within a node, the network across nodes), with ranks placed as comm::Grid and the job scripts do
// (rank = (pp_rank * dp + dp_rank) * tp + tp_rank, consecutive ranks on a node). Pure arithmetic:
// predict_step_time is tested against hand-computed cases (tests/test_step_time.cpp).
#pragma once
#include <string>
#include <vector>

#include "comm/grid.hpp"
#include "src/train/trainer.hpp"

namespace mpitron {

// time(bytes) = alpha + bytes * beta for one point-to-point message on the link.
struct LinkModel {
  double alpha_s = 0;
  double beta_s_per_byte = 0;
  double seconds(double bytes) const { return alpha_s + bytes * beta_s_per_byte; }
};

struct NetworkModel {
  LinkModel intra_node, inter_node;
  std::string note;  // the file's `note`: where and when it was measured
};

// TOML with [intra_node] and [inter_node], each alpha_s and beta_s_per_byte (>= 0), and an
// optional top-level note. UsageError naming the file for anything missing or wrong.
NetworkModel load_network_model(const std::string& path);

struct Placement {
  int nodes = 1;
  int ranks_per_node = 1;
  int node_of(int rank) const { return rank / ranks_per_node; }
};

// "" when the ranks fill the nodes evenly and every TP group stays on one node; otherwise one
// message saying what is wrong.
std::string check_placement(const comm::GridShape& grid, const Placement& place);

// What one step moves and computes, per rank: the model's numbers (step_time_inputs fills them
// from the settings) and the measured compute.
struct StepTimeInputs {
  comm::GridShape grid{1, 1, 1, 1};
  Placement place;
  int micro_batches = 1;
  double bubble_fraction = 0;  // the schedule's idle fraction, (pp-1)/(m+pp-1) for 1F1B and GPipe
  // The whole global batch's step on one rank, alone on its cores.
  double compute_step_s = 0;
  // Cores each node gives its ranks (0: one each, no contention); compute slows by
  // ranks_per_node / cores_per_node where that is above 1.
  double cores_per_node = 0;
  std::vector<double> grad_bytes;  // per pipeline stage: one rank's gradients (its TP shard)
  double tp_message_bytes = 0;     // one TP all-reduce
  std::vector<int> tp_allreduces;  // per pipeline stage: TP all-reduces per micro-batch
  double pp_message_bytes = 0;     // one boundary activation (or its gradient) per micro-batch
  double tied_bytes =
      0;                // a parameter the first and last stage share (the GPT's wte): its gradient
  std::string tp_note;  // what the TP term models, or why it is absent
  std::string dp_note;  // what the DP term assumes of the reduction's algorithm
};

struct StepTimeTerm {
  std::string name;
  double seconds = 0;
  std::string detail;
};

struct StepTimePrediction {
  std::vector<StepTimeTerm> terms;  // compute, pipeline bubble, DP, TP, PP, the tie
  double total() const;
  double communication() const;  // the DP, TP, PP and tie terms
};

// Ring all-reduce of `bytes` over p ranks: 2(p-1)/p * bytes * beta * share + 2(p-1) * alpha, where
// `share` rings cross the same link at once (their bandwidth divided among them).
double ring_allreduce_seconds(double bytes, int p, const LinkModel& link, double share = 1);

StepTimePrediction predict_step_time(const StepTimeInputs& in, const NetworkModel& net);

// The model's numbers for these settings (the memory plan's gradient and boundary sizes) on
// `place`. opts.layout.dp must be resolved; UsageError from check_placement.
StepTimeInputs step_time_inputs(const TrainOptions& opts, const Placement& place,
                                double compute_step_s, double cores_per_node);

// The terms, one per line, with the total, labelled "predicted by the alpha-beta model".
std::string step_time_text(const StepTimeInputs& in, const NetworkModel& net,
                           const StepTimePrediction& p);

// The median of a trace's step_s (its first step, warm-up, left out when there are more).
double median_step_seconds(const std::vector<double>& step_s);

}  // namespace mpitron
