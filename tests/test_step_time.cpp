// The step-time model's arithmetic (src/train/step_time.hpp) against hand-computed cases: the ring
// all-reduce, each link class by placement, rings sharing a node's link, the pipeline bubble and
// sends, cores shared by a node's ranks; the placement checks; a GPT's sizes from the memory plan.
#include <gtest/gtest.h>

#include <string>

#include "base/check.hpp"
#include "src/model/config.hpp"
#include "src/model/family.hpp"
#include "src/train/memory_plan.hpp"
#include "src/train/step_time.hpp"

using namespace mpitron;

namespace {

// 1 GB/s and 10 us within a node, 100 MB/s and 100 us across.
NetworkModel net() {
  NetworkModel n;
  n.intra_node = {1e-5, 1e-9};
  n.inter_node = {1e-4, 1e-8};
  return n;
}

StepTimeInputs dp_inputs(int dp, int nodes, int per_node) {
  StepTimeInputs in;
  in.grid = {dp, dp, 1, 1};
  in.place = {nodes, per_node};
  in.compute_step_s = 2.0 * dp;  // 2 s a rank
  in.grad_bytes = {1e6};
  in.tp_allreduces = {0};
  return in;
}

double term(const StepTimePrediction& p, const std::string& name) {
  for (const StepTimeTerm& t : p.terms)
    if (t.name == name) return t.seconds;
  ADD_FAILURE() << "no term " << name;
  return -1;
}

}  // namespace

TEST(StepTime, RingAllReduce) {
  const LinkModel link{1e-5, 1e-9};
  EXPECT_EQ(ring_allreduce_seconds(1e6, 1, link), 0);
  EXPECT_DOUBLE_EQ(ring_allreduce_seconds(1e6, 2, link), 1e-3 + 2e-5);
  EXPECT_DOUBLE_EQ(ring_allreduce_seconds(1e6, 4, link), 1.5e-3 + 6e-5);
  EXPECT_DOUBLE_EQ(ring_allreduce_seconds(1e6, 4, link, 2), 3e-3 + 6e-5);
}

TEST(StepTime, DataParallelOnOneNodeUsesSharedMemory) {
  const StepTimePrediction p = predict_step_time(dp_inputs(2, 1, 2), net());
  EXPECT_DOUBLE_EQ(term(p, "compute"), 2.0);
  EXPECT_DOUBLE_EQ(term(p, "pipeline bubble"), 0);
  EXPECT_DOUBLE_EQ(term(p, "DP gradient all-reduce"), 1e-3 + 2e-5);
  EXPECT_DOUBLE_EQ(term(p, "TP all-reduces"), 0);
  EXPECT_DOUBLE_EQ(term(p, "PP sends"), 0);
  EXPECT_DOUBLE_EQ(p.total(), 2.00102);
  EXPECT_DOUBLE_EQ(p.communication(), 1.02e-3);
}

TEST(StepTime, DataParallelAcrossNodesUsesTheNetwork) {
  const StepTimePrediction two = predict_step_time(dp_inputs(2, 2, 1), net());
  EXPECT_DOUBLE_EQ(term(two, "DP gradient all-reduce"), 1e-2 + 2e-4);
  EXPECT_DOUBLE_EQ(two.total(), 2.0102);
  // dp 3 on 3 nodes: 2 (2/3) 1 MB at 100 MB/s, 4 latencies.
  const StepTimePrediction three = predict_step_time(dp_inputs(3, 3, 1), net());
  EXPECT_NEAR(term(three, "DP gradient all-reduce"), 4.0 / 3 * 1e-2 + 4e-4, 1e-15);
}

TEST(StepTime, RingsCrossingOneLinkShareIt) {
  // dp 2 x tp 2 on 2 nodes: ranks 0,1 (dp rank 0) on node 0, 2,3 on node 1; both DP rings
  // {0,2} and {1,3} cross, each at half the bandwidth. The TP pairs stay in a node.
  StepTimeInputs in;
  in.grid = {4, 2, 2, 1};
  in.place = {2, 2};
  in.compute_step_s = 4.0;
  in.grad_bytes = {1e6};
  in.tp_message_bytes = 1e5;
  in.tp_allreduces = {16};  // 4 blocks, 2 forward and 2 backward each
  const StepTimePrediction p = predict_step_time(in, net());
  EXPECT_DOUBLE_EQ(term(p, "compute"), 1.0);
  EXPECT_DOUBLE_EQ(term(p, "DP gradient all-reduce"), 2e-2 + 2e-4);
  EXPECT_DOUBLE_EQ(term(p, "TP all-reduces"), 16 * (1e-4 + 2e-5));
  EXPECT_DOUBLE_EQ(p.total(), 1.0 + 2.02e-2 + 1.92e-3);
  // Two micro-batches: twice the TP all-reduces.
  in.micro_batches = 2;
  EXPECT_DOUBLE_EQ(term(predict_step_time(in, net()), "TP all-reduces"), 32 * (1e-4 + 2e-5));
}

TEST(StepTime, PipelineBubbleAndSends) {
  // pp 2 on 2 nodes, 4 micro-batches: bubble 1/5 of the pipelined time, 2 (4 + 2 - 2) = 8
  // boundary messages of 100 kB across the network.
  StepTimeInputs in;
  in.grid = {2, 1, 1, 2};
  in.place = {2, 1};
  in.micro_batches = 4;
  in.bubble_fraction = 0.2;
  in.compute_step_s = 2.0;
  in.grad_bytes = {1e6, 2e6};
  in.pp_message_bytes = 1e5;
  in.tp_allreduces = {0, 0};
  const StepTimePrediction p = predict_step_time(in, net());
  EXPECT_DOUBLE_EQ(term(p, "compute"), 1.0);
  EXPECT_DOUBLE_EQ(term(p, "pipeline bubble"), 0.25);
  EXPECT_DOUBLE_EQ(term(p, "DP gradient all-reduce"), 0);
  EXPECT_DOUBLE_EQ(term(p, "PP sends"), 8 * (1e-4 + 1e-3));
  EXPECT_DOUBLE_EQ(p.total(), 1.25 + 8.8e-3);
  // Both stages on one node: shared memory.
  in.place = {1, 2};
  EXPECT_DOUBLE_EQ(term(predict_step_time(in, net()), "PP sends"), 8 * (1e-5 + 1e-4));
}

TEST(StepTime, TiedEmbeddingAcrossStages) {
  // pp 2 x dp 2, 2 ranks a node: stage 0 on node 0, stage 1 on node 1; each dp rank's tie pair
  // crosses, 2 pairs on each node's link: a ring of 2 moves the bytes once, shared by 2.
  StepTimeInputs in;
  in.grid = {4, 2, 1, 2};
  in.place = {2, 2};
  in.compute_step_s = 4.0;
  in.grad_bytes = {1e6, 1e6};
  in.tp_allreduces = {0, 0};
  in.tied_bytes = 2e5;
  const LinkModel across = net().inter_node;
  EXPECT_DOUBLE_EQ(term(predict_step_time(in, net()), "tied embedding"),
                   2e5 * across.beta_s_per_byte * 2 + 2 * across.alpha_s);
  in.place = {1, 4};  // one node: shared memory, not shared
  const LinkModel within = net().intra_node;
  EXPECT_DOUBLE_EQ(term(predict_step_time(in, net()), "tied embedding"),
                   2e5 * within.beta_s_per_byte + 2 * within.alpha_s);
  in.grid = {2, 2, 1, 1};  // pp 1: no tie to add
  in.place = {1, 2};
  in.grad_bytes = {1e6};
  in.tp_allreduces = {0};
  EXPECT_DOUBLE_EQ(term(predict_step_time(in, net()), "tied embedding"), 0);
}

TEST(StepTime, RanksBeyondTheCoresSlowTheComputeAndTheCollectives) {
  StepTimeInputs in = dp_inputs(4, 1, 4);
  const double ring = term(predict_step_time(in, net()), "DP gradient all-reduce");
  EXPECT_GT(ring, 0);
  in.cores_per_node = 2;
  EXPECT_DOUBLE_EQ(term(predict_step_time(in, net()), "compute"), 4.0);
  EXPECT_DOUBLE_EQ(term(predict_step_time(in, net()), "DP gradient all-reduce"), 2 * ring);
  in.cores_per_node = 8;  // more cores than ranks: no speed-up beyond one core each
  EXPECT_DOUBLE_EQ(term(predict_step_time(in, net()), "compute"), 2.0);
  EXPECT_DOUBLE_EQ(term(predict_step_time(in, net()), "DP gradient all-reduce"), ring);
}

TEST(StepTime, PlacementChecks) {
  EXPECT_EQ(check_placement({4, 2, 2, 1}, {2, 2}), "");
  const std::string odd = check_placement({3, 3, 1, 1}, {2, 2});
  EXPECT_NE(odd.find("--ranks-per-node 2 does not divide the layout's 3 ranks"), std::string::npos)
      << odd;
  const std::string tp = check_placement({4, 1, 4, 1}, {2, 2});
  EXPECT_NE(tp.find("a TP group of 4 ranks would span nodes"), std::string::npos) << tp;
  const std::string count = check_placement({4, 4, 1, 1}, {3, 2});
  EXPECT_NE(count.find("--nodes 3 x --ranks-per-node 2 = 6 ranks, but the layout has 4"),
            std::string::npos)
      << count;
}

TEST(StepTime, GptSizesComeFromTheMemoryPlan) {
  TrainOptions opts;
  opts.cfg.model = default_model_config("gpt");  // 4 layers, 4 heads, width 128
  ASSERT_EQ(opts.cfg.model.get("n_layer"), 4);
  ASSERT_EQ(opts.cfg.model.get("n_embd"), 128);
  opts.cfg.train.batch_size = 8;
  opts.cfg.train.seq_len = 32;
  opts.cfg.train.micro_batches = 2;
  opts.layout.dp = 2;
  opts.layout.tp = 2;
  const StepTimeInputs in = step_time_inputs(opts, {2, 2}, 1.0, 0);
  const MemoryPlan plan = plan_memory(opts);
  size_t grads = 0;
  for (const MemoryPlanItem& i : plan.stages[0].items)
    if (i.kind == "gradients") grads = i.bytes;
  ASSERT_EQ(in.grad_bytes.size(), 1u);
  EXPECT_EQ(in.grad_bytes[0], double(grads));
  // 2 rows a micro-batch (8 / dp 2 / 2 micro-batches) x 32 x 128 floats; 4 blocks x 4.
  EXPECT_EQ(in.tp_message_bytes, 2.0 * 32 * 128 * 4);
  EXPECT_EQ(in.tp_allreduces, std::vector<int>{16});
  EXPECT_THROW(step_time_inputs(opts, {1, 2}, 1.0, 0), UsageError);  // 2 ranks, not 4
  EXPECT_THROW(step_time_inputs(opts, {4, 1}, 1.0, 0), UsageError);  // TP across nodes
}

TEST(StepTime, MedianStepSecondsSkipsTheFirstStep) {
  EXPECT_DOUBLE_EQ(median_step_seconds({9.0, 1.0, 3.0, 2.0}), 2.0);
  EXPECT_DOUBLE_EQ(median_step_seconds({9.0, 1.0, 3.0}), 2.0);
  EXPECT_DOUBLE_EQ(median_step_seconds({5.0}), 5.0);
  EXPECT_EQ(median_step_seconds({}), 0);
}
