// Unit tests of the pipeline schedules (no MPI): every list simulates without deadlock, covers each
// (micro-batch, chunk) once, meets the theoretical bubble; broken lists are reported, not hung on;
// the text and PNG charts.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <tuple>
#include <utility>

#include "base/check.hpp"
#include "src/pipeline/schedule.hpp"
#include "src/pipeline/schedule_chart.hpp"

namespace mpitron::pipeline {
namespace {

using Lists = std::vector<std::vector<Action>>;

// GPipe and 1F1B: pp 1..8, m 1..16. Interleaved: V 2..4, m the multiples of pp up to 16 (or pp).
std::vector<ScheduleSpec> all_specs() {
  std::vector<ScheduleSpec> out;
  for (int pp = 1; pp <= 8; ++pp) {
    for (int m = 1; m <= 16; ++m) {
      out.push_back({ScheduleKind::gpipe, pp, m, 1});
      out.push_back({ScheduleKind::one_f_one_b, pp, m, 1});
    }
    for (int v = 2; v <= 4; ++v)
      for (int m = pp; m <= std::max(16, pp); m += pp)
        out.push_back({ScheduleKind::interleaved, pp, m, v});
  }
  return out;
}

std::string name(const ScheduleSpec& s) {
  return std::string(schedule_name(s.kind)) + " pp=" + std::to_string(s.pp) +
         " m=" + std::to_string(s.micro_batches) + " V=" + std::to_string(s.virtual_stages);
}

Lists lists_of(const ScheduleSpec& spec) {
  Lists out;
  for (int r = 0; r < spec.pp; ++r) out.push_back(rank_actions(spec, r));
  return out;
}

Action fwd(int mb, int chunk = 0) {
  return {Op::forward, mb, chunk, -1};
}
Action bwd(int mb, int chunk = 0) {
  return {Op::backward, mb, chunk, -1};
}

TEST(Schedule, ParseAndName) {
  for (auto kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved})
    EXPECT_EQ(parse_schedule(schedule_name(kind)), kind);
  try {
    parse_schedule("zero-bubble");
    FAIL() << "no UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("zero-bubble"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("gpipe, 1f1b or interleaved"), std::string::npos)
        << e.what();
  }
}

TEST(Schedule, CheckScheduleSaysWhatToDo) {
  for (const auto& s : all_specs()) EXPECT_EQ(check_schedule(s), "") << name(s);
  auto expect_message = [](ScheduleSpec s, const std::string& part) {
    const std::string why = check_schedule(s);
    EXPECT_NE(why.find(part), std::string::npos) << name(s) << ": " << why;
    EXPECT_THROW(rank_actions(s, 0), UsageError) << name(s);
    EXPECT_THROW(simulate(s), UsageError) << name(s);
  };
  expect_message({ScheduleKind::one_f_one_b, 0, 4, 1}, "--pp 0");
  expect_message({ScheduleKind::one_f_one_b, 2, 0, 1}, "--micro-batches 0");
  expect_message({ScheduleKind::interleaved, 2, 4, 0}, "--virtual-stages 0");
  expect_message({ScheduleKind::one_f_one_b, 2, 4, 2},
                 "--virtual-stages 2 needs --schedule interleaved");
  expect_message({ScheduleKind::gpipe, 2, 4, 3}, "--virtual-stages 3 needs --schedule interleaved");
  expect_message({ScheduleKind::interleaved, 2, 4, 1},
                 "--schedule interleaved needs --virtual-stages 2 or more");
  expect_message({ScheduleKind::interleaved, 4, 6, 2},
                 "--micro-batches 6 is not a multiple of --pp 4: the interleaved schedule sends "
                 "micro-batches round in groups of pp (use 4 or 8)");
  expect_message({ScheduleKind::interleaved, 4, 3, 2}, "(use 4)");
}

TEST(Schedule, VirtualStagesGoRoundTheRanks) {
  const ScheduleSpec s{ScheduleKind::interleaved, 4, 8, 3};
  for (int vs = 0; vs < 12; ++vs) {
    EXPECT_EQ(stage_rank(s, vs), vs % 4);
    EXPECT_EQ(virtual_stage(s, stage_rank(s, vs), vs / 4), vs);
  }
}

TEST(Schedule, RankOutsidePipelineIsRefused) {
  const ScheduleSpec s{ScheduleKind::one_f_one_b, 4, 8, 1};
  EXPECT_THROW(rank_actions(s, 4), std::out_of_range);
  EXPECT_THROW(rank_actions(s, -1), std::out_of_range);
  EXPECT_THROW(forward_only_actions(s, 4), std::out_of_range);
}

// Independent of the simulator: count the computes and check the sends and receives around them.
TEST(Schedule, EveryPairOnceWithItsMessages) {
  for (const auto& s : all_specs()) {
    const int last = s.pp * s.virtual_stages - 1;
    for (int r = 0; r < s.pp; ++r) {
      const auto list = rank_actions(s, r);
      std::map<std::pair<int, int>, std::pair<int, int>> counts;  // (mb, chunk) -> (fwd, bwd)
      for (std::size_t i = 0; i < list.size(); ++i) {
        const Action& a = list[i];
        if (a.op != Op::forward && a.op != Op::backward) continue;
        (a.op == Op::forward ? counts[{a.micro_batch, a.chunk}].first
                             : counts[{a.micro_batch, a.chunk}].second)++;
        const int vs = virtual_stage(s, r, a.chunk);
        const bool needs_recv = a.op == Op::forward ? vs > 0 : vs < last;
        const bool needs_send = a.op == Op::forward ? vs < last : vs > 0;
        const Op recv = a.op == Op::forward ? Op::recv_activation : Op::recv_gradient;
        const Op send = a.op == Op::forward ? Op::send_activation : Op::send_gradient;
        const int from = a.op == Op::forward ? (r - 1 + s.pp) % s.pp : (r + 1) % s.pp;
        const int to = a.op == Op::forward ? (r + 1) % s.pp : (r - 1 + s.pp) % s.pp;
        if (needs_recv) {
          ASSERT_GE(i, 1u) << name(s);
          EXPECT_EQ(list[i - 1], (Action{recv, a.micro_batch, a.chunk, from})) << name(s);
        }
        if (needs_send) {
          ASSERT_LT(i + 1, list.size()) << name(s);
          EXPECT_EQ(list[i + 1], (Action{send, a.micro_batch, a.chunk, to})) << name(s);
        }
      }
      EXPECT_EQ(counts.size(), static_cast<std::size_t>(s.micro_batches * s.virtual_stages))
          << name(s) << " rank " << r;
      for (const auto& [key, c] : counts) {
        EXPECT_LT(key.first, s.micro_batches) << name(s);
        EXPECT_LT(key.second, s.virtual_stages) << name(s);
        EXPECT_EQ(c, std::make_pair(1, 1)) << name(s) << " rank " << r << " mb " << key.first;
      }
    }
  }
}

TEST(Schedule, SimulatedBubbleIsTheTheory) {
  // Interleaved: forward_time and backward_time are per chunk (a rank's whole forward is V of
  // them); under that model Megatron's order meets (pp-1)/(V*m+pp-1) exactly at any ratio.
  const std::vector<std::pair<double, double>> timings = {{1, 1}, {1, 2}, {2, 1}, {1, 3}};
  for (const auto& s : all_specs()) {
    for (const auto& [tf, tb] : timings) {
      const SimulationResult r = simulate(s, tf, tb);
      ASSERT_TRUE(r.ok) << name(s) << " tf=" << tf << " tb=" << tb << ": " << r.error;
      EXPECT_NEAR(r.bubble, theoretical_bubble(s), 1e-12)
          << name(s) << " tf=" << tf << " tb=" << tb;
      const double per_rank = s.micro_batches * s.virtual_stages * (tf + tb);
      EXPECT_NEAR(r.busy, s.pp * per_rank, 1e-9) << name(s);
      EXPECT_NEAR(r.makespan, per_rank + (s.pp - 1) * (tf + tb), 1e-9) << name(s);
    }
  }
}

TEST(Schedule, TheoreticalBubble) {
  EXPECT_DOUBLE_EQ(theoretical_bubble({ScheduleKind::gpipe, 4, 8, 1}), 3.0 / 11);
  EXPECT_DOUBLE_EQ(theoretical_bubble({ScheduleKind::one_f_one_b, 4, 8, 1}), 3.0 / 11);
  EXPECT_DOUBLE_EQ(theoretical_bubble({ScheduleKind::interleaved, 4, 8, 2}), 3.0 / 19);
  EXPECT_DOUBLE_EQ(theoretical_bubble({ScheduleKind::one_f_one_b, 1, 5, 1}), 0.0);
}

TEST(Schedule, PeakActivationsInFlight) {
  for (const auto& s : all_specs()) {
    const SimulationResult r = simulate(s);
    ASSERT_TRUE(r.ok) << name(s) << ": " << r.error;
    ASSERT_EQ(r.peak_in_flight.size(), static_cast<std::size_t>(s.pp));
    for (int rank = 0; rank < s.pp; ++rank) {
      int expected = 0;
      switch (s.kind) {
        case ScheduleKind::gpipe:
          expected = s.micro_batches;
          break;
        case ScheduleKind::one_f_one_b:
          expected = std::min(s.pp - rank, s.micro_batches);
          break;
        case ScheduleKind::interleaved:  // the warm-up forwards and the steady state's one more
          expected = std::min((s.pp - rank - 1) * 2 + (s.virtual_stages - 1) * s.pp + 1,
                              s.micro_batches * s.virtual_stages);
          break;
      }
      EXPECT_EQ(r.peak_in_flight[rank], expected) << name(s) << " rank " << rank;
      ASSERT_EQ(r.peak_in_flight_per_chunk[rank].size(),
                static_cast<std::size_t>(s.virtual_stages));
      int sum = 0;
      for (int c : r.peak_in_flight_per_chunk[rank]) {
        EXPECT_GE(c, 1) << name(s);
        EXPECT_LE(c, s.micro_batches) << name(s);
        sum += c;
      }
      EXPECT_GE(sum, r.peak_in_flight[rank]) << name(s);
      if (s.virtual_stages == 1) {
        EXPECT_EQ(r.peak_in_flight_per_chunk[rank][0], expected);
      }
    }
  }
}

TEST(Schedule, OneRankOneFOneBIsForwardBackwardPerMicroBatch) {
  const auto list = rank_actions({ScheduleKind::one_f_one_b, 1, 4, 1}, 0);
  const std::vector<Action> expected = {fwd(0), bwd(0), fwd(1), bwd(1),
                                        fwd(2), bwd(2), fwd(3), bwd(3)};
  EXPECT_EQ(list, expected);
}

TEST(Schedule, TwoRankOneFOneBLists) {
  const ScheduleSpec s{ScheduleKind::one_f_one_b, 2, 3, 1};
  const std::vector<Action> rank0 = {
      fwd(0), {Op::send_activation, 0, 0, 1},  // warm-up
      fwd(1), {Op::send_activation, 1, 0, 1}, {Op::recv_gradient, 0, 0, 1},
      bwd(0),  // steady
      fwd(2), {Op::send_activation, 2, 0, 1}, {Op::recv_gradient, 1, 0, 1},
      bwd(1), {Op::recv_gradient, 2, 0, 1},   bwd(2)};  // cool-down
  const std::vector<Action> rank1 = {
      {Op::recv_activation, 0, 0, 0}, fwd(0), bwd(0), {Op::send_gradient, 0, 0, 0},
      {Op::recv_activation, 1, 0, 0}, fwd(1), bwd(1), {Op::send_gradient, 1, 0, 0},
      {Op::recv_activation, 2, 0, 0}, fwd(2), bwd(2), {Op::send_gradient, 2, 0, 0}};
  EXPECT_EQ(rank_actions(s, 0), rank0);
  EXPECT_EQ(rank_actions(s, 1), rank1);

  // Rank 1's first receive waits one forward; sends and receives take no time of their own.
  const SimulationResult r = simulate(s, 1.0, 2.0);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_DOUBLE_EQ(r.timeline[1][0].start, 0.0);
  EXPECT_DOUBLE_EQ(r.timeline[1][0].end, 1.0);
  EXPECT_DOUBLE_EQ(r.timeline[0][1].start, r.timeline[0][1].end);
  EXPECT_DOUBLE_EQ(r.makespan, 12.0);  // (m + pp - 1) * (tf + tb)
}

TEST(Schedule, InterleavedFollowsMegatronMicroSteps) {
  // pp 2, V 2, m 4, rank 1: warm-up (V-1)*pp = 2 forward micro-steps, then 1F1B.
  const ScheduleSpec s{ScheduleKind::interleaved, 2, 4, 2};
  std::vector<Action> computes;
  for (const Action& a : rank_actions(s, 1))
    if (a.op == Op::forward || a.op == Op::backward) computes.push_back(a);
  const std::vector<Action> expected = {
      fwd(0, 0), fwd(1, 0), fwd(0, 1), bwd(0, 1), fwd(1, 1), bwd(1, 1), fwd(2, 0), bwd(0, 0),
      fwd(3, 0), bwd(1, 0), fwd(2, 1), bwd(2, 1), fwd(3, 1), bwd(3, 1), bwd(2, 0), bwd(3, 0)};
  EXPECT_EQ(computes, expected);
}

TEST(Schedule, ForwardOnlySimulates) {
  for (const auto& s : all_specs()) {
    Lists lists;
    for (int r = 0; r < s.pp; ++r) lists.push_back(forward_only_actions(s, r));
    const SimulationResult r = simulate(lists, s.virtual_stages, 1.0, 2.0);
    ASSERT_TRUE(r.ok) << name(s) << ": " << r.error;
    EXPECT_DOUBLE_EQ(r.busy, s.pp * s.micro_batches * s.virtual_stages * 1.0) << name(s);
    for (int peak : r.peak_in_flight) EXPECT_EQ(peak, 1) << name(s);
    if (s.virtual_stages == 1) {
      EXPECT_DOUBLE_EQ(r.makespan, s.micro_batches + s.pp - 1.0) << name(s);
    }
  }
}

// --- broken lists --------------------------------------------------------------------------------

void expect_error(const Lists& lists, int virtual_stages, const std::vector<std::string>& parts) {
  const SimulationResult r = simulate(lists, virtual_stages);
  EXPECT_FALSE(r.ok);
  for (const auto& part : parts)
    EXPECT_NE(r.error.find(part), std::string::npos) << "'" << part << "' not in: " << r.error;
}

// Swaps the (micro-batch, chunk) of two actions' groups: every action of pair a becomes pair b's.
void swap_pairs(std::vector<Action>& list, int mb_a, int mb_b, Op op) {
  for (Action& a : list)
    if (a.op == op && (a.micro_batch == mb_a || a.micro_batch == mb_b))
      a.micro_batch = a.micro_batch == mb_a ? mb_b : mb_a;
}

TEST(Schedule, SendsInTheWrongOrderAreAMismatch) {
  // Rank 0 sends micro-batch 1 before 0 (forwards reordered with them); rank 1 expects 0 first.
  Lists lists = lists_of({ScheduleKind::gpipe, 2, 3, 1});
  swap_pairs(lists[0], 0, 1, Op::forward);
  swap_pairs(lists[0], 0, 1, Op::send_activation);
  expect_error(lists, 1,
               {"rank 1", "rank 0", "recv_activation (micro-batch 0)",
                "send_activation (micro-batch 1)", "in the order they are sent"});
}

TEST(Schedule, ReceivesInTheWrongOrderAreAMismatch) {
  Lists lists = lists_of({ScheduleKind::one_f_one_b, 4, 6, 1});
  swap_pairs(lists[2], 1, 2, Op::recv_activation);
  swap_pairs(lists[2], 1, 2, Op::forward);
  swap_pairs(lists[2], 1, 2, Op::send_activation);
  expect_error(lists, 1, {"rank 2", "rank 1", "meets", "the 2nd activation from rank 1 to rank 2"});
}

TEST(Schedule, InterleavedChunksInTheWrongOrderAreAMismatch) {
  Lists lists = lists_of({ScheduleKind::interleaved, 2, 4, 2});
  for (Action& a : lists[1])  // rank 1 sends chunk 0's micro-batches 0 and 1 the other way round
    if (a.chunk == 0 &&
        (a.op == Op::forward || a.op == Op::send_activation || a.op == Op::recv_activation) &&
        a.micro_batch < 2)
      a.micro_batch = 1 - a.micro_batch;
  expect_error(lists, 2, {"meets"});
}

TEST(Schedule, DroppedReceiveIsAnError) {
  Lists lists = lists_of({ScheduleKind::one_f_one_b, 3, 4, 1});
  auto& list = lists[1];
  list.erase(std::find(list.begin(), list.end(), Action{Op::recv_activation, 2, 0, 0}));
  expect_error(lists, 1, {"rank 1", "forward (micro-batch 2)", "before its input is received"});

  lists = lists_of({ScheduleKind::one_f_one_b, 3, 4, 1});
  lists[0].erase(std::find(lists[0].begin(), lists[0].end(), Action{Op::recv_gradient, 1, 0, 1}));
  expect_error(lists, 1, {"rank 0", "backward (micro-batch 1)", "gradient is received"});
}

TEST(Schedule, DeadlockIsReportedNotHung) {
  // Rank 0 waits for a gradient before sending the activation that would produce it.
  const Lists lists = {
      {fwd(0), {Op::recv_gradient, 0, 0, 1}, {Op::send_activation, 0, 0, 1}, bwd(0)},
      {{Op::recv_activation, 0, 0, 0}, fwd(0), bwd(0), {Op::send_gradient, 0, 0, 0}}};
  expect_error(lists, 1,
               {"deadlock", "rank 0 action 1 recv_gradient (micro-batch 0) from rank 1",
                "rank 1 action 0 recv_activation (micro-batch 0) from rank 0"});
}

TEST(Schedule, ReceiveWithoutSendAndSendWithoutReceive) {
  expect_error({{}, {{Op::recv_activation, 0, 0, 0}, fwd(0)}}, 1,
               {"deadlock", "rank 1", "rank 0 has finished without sending it"});
  expect_error({{fwd(0), {Op::send_activation, 0, 0, 1}}, {}}, 1,
               {"rank 0 action 1 send_activation (micro-batch 0) to rank 1 is never received"});
}

TEST(Schedule, StructuralErrors) {
  expect_error({{bwd(0), fwd(0)}}, 1, {"backward before the forward"});
  expect_error({{fwd(0), bwd(0), fwd(0), bwd(0)}}, 1, {"forwarded twice"});
  expect_error({{fwd(0), bwd(0), fwd(1)}}, 1, {"micro-batch 1: never backwarded"});
  expect_error({{fwd(0, 2)}}, 2, {"chunk outside 0..1"});
  expect_error({{fwd(0), {Op::send_activation, 0, 0, 2}}, {}, {}}, 1,
               {"the neighbouring virtual stage is on rank 1"});
  expect_error({{fwd(0), {Op::send_activation, 0, 0, 0}}}, 1, {"has no neighbour that way"});
}

// A rank's list cut into (receive, compute, send) groups, one per compute.
std::vector<std::vector<Action>> groups_of(const std::vector<Action>& list) {
  std::vector<std::vector<Action>> out;
  for (const Action& a : list) {
    const bool recv = a.op == Op::recv_activation || a.op == Op::recv_gradient;
    const bool compute = a.op == Op::forward || a.op == Op::backward;
    const bool after_recv = !out.empty() && (out.back().back().op == Op::recv_activation ||
                                             out.back().back().op == Op::recv_gradient);
    if (out.empty() || recv || (compute && !after_recv)) out.emplace_back();
    out.back().push_back(a);
  }
  return out;
}

TEST(Schedule, RandomGroupSwapsAreReportedNotHung) {
  std::mt19937 rng(12345);
  std::map<std::string, int> outcomes;
  for (const ScheduleSpec& s : {ScheduleSpec{ScheduleKind::one_f_one_b, 4, 6, 1},
                                ScheduleSpec{ScheduleKind::interleaved, 3, 6, 2},
                                ScheduleSpec{ScheduleKind::gpipe, 3, 5, 1}}) {
    for (int trial = 0; trial < 300; ++trial) {
      Lists lists = lists_of(s);
      auto& list = lists[rng() % lists.size()];
      auto groups = groups_of(list);
      std::swap(groups[rng() % groups.size()], groups[rng() % groups.size()]);
      list.clear();
      for (const auto& g : groups) list.insert(list.end(), g.begin(), g.end());
      const SimulationResult r = simulate(lists, s.virtual_stages);
      if (r.ok) {
        EXPECT_GE(r.bubble, theoretical_bubble(s) - 1e-12) << name(s);
        ++outcomes["ok"];
      } else {
        ASSERT_FALSE(r.error.empty()) << name(s);
        ++outcomes[r.error.starts_with("deadlock")              ? "deadlock"
                   : r.error.find("meets") != std::string::npos ? "mismatch"
                                                                : "structure"];
      }
    }
  }
  for (const char* outcome : {"ok", "deadlock", "mismatch", "structure"})
    EXPECT_GT(outcomes[outcome], 0) << outcome;
}

// --- send plans ----------------------------------------------------------------------------------

// The receive each send meets: the k-th send from a to b of a kind meets b's k-th such receive.
std::map<std::pair<int, std::size_t>, std::pair<int, std::size_t>> receive_of_send(const Lists& l) {
  std::map<std::tuple<int, int, bool>, std::vector<std::pair<int, std::size_t>>> sends, recvs;
  for (int r = 0; r < int(l.size()); ++r)
    for (std::size_t i = 0; i < l[r].size(); ++i) {
      const Action& a = l[r][i];
      const bool act = a.op == Op::send_activation || a.op == Op::recv_activation;
      if (a.op == Op::send_activation || a.op == Op::send_gradient)
        sends[{r, a.peer, act}].push_back({r, i});
      if (a.op == Op::recv_activation || a.op == Op::recv_gradient)
        recvs[{a.peer, r, act}].push_back({r, i});
    }
  std::map<std::pair<int, std::size_t>, std::pair<int, std::size_t>> out;
  for (const auto& [channel, list] : sends)
    for (std::size_t k = 0; k < list.size(); ++k) out[list[k]] = recvs.at(channel).at(k);
  return out;
}

// Wherever the plan reuses a send's buffer, the receiving rank has already started the forward or
// backward that completes that receive, in simulated timings of several forward/backward ratios;
// every send is retired once, at the latest at the end.
TEST(SendPlan, EveryRetiredSendWasReceivedWhateverTheTiming) {
  int retired = 0;
  for (const ScheduleSpec& spec : all_specs()) {
    if (spec.pp == 1) continue;
    const Lists lists = lists_of(spec);
    const auto receive = receive_of_send(lists);
    for (const auto& [f, b] : {std::pair{1.0, 2.0}, {2.0, 1.0}, {1.0, 7.0}, {7.0, 1.0}}) {
      const SimulationResult sim = simulate(lists, spec.virtual_stages, f, b);
      ASSERT_TRUE(sim.ok) << name(spec) << ": " << sim.error;
      for (int r = 0; r < spec.pp; ++r) {
        const SendPlan plan = send_plan(lists, r, true);
        ASSERT_EQ(plan.retire_at.size(), lists[r].size());
        std::vector<int> times(lists[r].size(), 0);
        for (std::size_t l = 0; l < lists[r].size(); ++l)
          for (std::size_t s : plan.retire_at[l]) {
            ++times[s];
            ++retired;
            const Op op = lists[r][s].op;
            ASSERT_TRUE(op == Op::send_activation || op == Op::send_gradient) << name(spec);
            ASSERT_LT(s, l) << name(spec) << ": retired before it was sent";
            auto [q, j] = receive.at({r, s});
            while (j < lists[q].size() && lists[q][j].op != Op::forward &&
                   lists[q][j].op != Op::backward)
              ++j;
            ASSERT_LT(j, lists[q].size()) << name(spec);
            EXPECT_LE(sim.timeline[q][j].start, sim.timeline[r][l].start)
                << name(spec) << " rank " << r << " reuses send " << s << " at action " << l
                << " before rank " << q << " received it (forward " << f << ", backward " << b
                << ")";
          }
        for (std::size_t s = 0; s < times.size(); ++s) EXPECT_LE(times[s], 1) << name(spec);
      }
    }
  }
  EXPECT_GT(retired, 0) << "the plans never reuse a buffer";
}

// Evaluation walks have few messages back (interleaved: the last rank's to the first): where one
// proves a send received the plan reuses its buffer as in training (checked as there, in a
// simulated timing); otherwise it waits for a send of an earlier micro-batch at the first forward
// of a later one, whose receiver needs only messages of that earlier micro-batch to get there (no
// cycle of waits).
TEST(SendPlan, EvaluationWaitsOnlyForEarlierMicroBatches) {
  int waited = 0;
  for (const ScheduleSpec& spec : all_specs()) {
    if (spec.pp == 1) continue;
    Lists lists;
    for (int r = 0; r < spec.pp; ++r) lists.push_back(forward_only_actions(spec, r));
    const auto receive = receive_of_send(lists);
    const SimulationResult sim = simulate(lists, spec.virtual_stages);
    ASSERT_TRUE(sim.ok) << name(spec) << ": " << sim.error;
    for (int r = 0; r < spec.pp; ++r) {
      const SendPlan plan = send_plan(lists, r, false);
      for (std::size_t l = 0; l < lists[r].size(); ++l)
        for (std::size_t s : plan.retire_at[l]) {
          const Action& at = lists[r][l];
          ASSERT_EQ(at.op, Op::forward) << name(spec);
          auto [q, j] = receive.at({r, s});
          if (lists[r][s].micro_batch == at.micro_batch) {  // proven received
            while (lists[q][j].op != Op::forward) ++j;
            EXPECT_LE(sim.timeline[q][j].start, sim.timeline[r][l].start) << name(spec);
            continue;
          }
          ++waited;
          EXPECT_LT(lists[r][s].micro_batch, at.micro_batch) << name(spec);
          EXPECT_EQ(lists[q][j].micro_batch, lists[r][s].micro_batch) << name(spec);
        }
    }
  }
  EXPECT_GT(waited, 0);
}

// 1F1B needs buffers for its warm-up, not for its micro-batches; GPipe holds every micro-batch's
// message until its backwards; evaluation holds one micro-batch's (a send per chunk).
TEST(SendPlan, BuffersFollowTheScheduleNotTheMicroBatches) {
  for (int pp = 2; pp <= 6; ++pp)
    for (int r = 0; r < pp; ++r) {
      const int few = send_plan({ScheduleKind::one_f_one_b, pp, 8, 1}, r, true).buffers;
      const int many = send_plan({ScheduleKind::one_f_one_b, pp, 64, 1}, r, true).buffers;
      EXPECT_EQ(few, many) << "1f1b pp " << pp << " rank " << r;
      EXPECT_LE(many, pp) << "1f1b pp " << pp << " rank " << r;
      EXPECT_EQ(send_plan({ScheduleKind::gpipe, pp, 16, 1}, r, true).buffers, 16)
          << "gpipe pp " << pp << " rank " << r;
      EXPECT_EQ(send_plan({ScheduleKind::one_f_one_b, pp, 16, 1}, r, false).buffers,
                r + 1 < pp ? 1 : 0);  // the last stage sends nothing forward
      EXPECT_LE(send_plan({ScheduleKind::interleaved, pp, 2 * pp, 3}, r, false).buffers, 3);
    }
}

// --- charts --------------------------------------------------------------------------------------

TEST(ScheduleChart, TimelineTextHasTheRowsAndTheSummary) {
  const ScheduleSpec s{ScheduleKind::one_f_one_b, 4, 8, 1};
  const std::string text = schedule_timeline_text(s, simulate(s, 1.0, 2.0));
  for (const char* part : {"rank 0 F |0123", "rank 3 F |...0  1",
                           "schedule 1f1b: pp 4, micro-batches 8, virtual stages 1", "makespan 33",
                           "bubble: simulated 0.272727, theoretical 0.272727",
                           "peak activations in flight per rank: 4 3 2 1"})
    EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in:\n" << text;

  const ScheduleSpec v{ScheduleKind::interleaved, 4, 8, 2};
  const std::string interleaved = schedule_timeline_text(v, simulate(v, 1.0, 2.0));
  for (const char* part : {"rank 0 F0 |", "B1 |", "theoretical 0.157895", "11 (8, 4)"})
    EXPECT_NE(interleaved.find(part), std::string::npos) << "'" << part << "' not in:\n"
                                                         << interleaved;
}

TEST(ScheduleChart, WideTimelinesWrap) {
  const ScheduleSpec s{ScheduleKind::interleaved, 8, 32, 4};
  const std::string text = schedule_timeline_text(s, simulate(s, 1.0, 2.0), 2);
  std::istringstream lines(text);
  std::size_t chart_lines = 0;
  for (std::string line; std::getline(lines, line);)
    if (line.find(" |") != std::string::npos) {
      EXPECT_LE(line.size(), 175u) << line;
      ++chart_lines;
    }
  EXPECT_GT(chart_lines, 8u * 2 * 4);  // more than one block of 2V rows per rank
}

TEST(ScheduleChart, FailedSimulationIsSummarised) {
  const SimulationResult failed = simulate(Lists{{bwd(0)}}, 1);
  const std::string text = schedule_timeline_text({ScheduleKind::one_f_one_b, 1, 1, 1}, failed);
  EXPECT_NE(text.find("simulation failed: "), std::string::npos) << text;
  EXPECT_THROW(write_schedule_png("/tmp/never.png", {}, failed), std::invalid_argument);
}

TEST(ScheduleChart, PngStartsWithTheSignature) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("mpitron_schedule_" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  for (const ScheduleSpec& s : {ScheduleSpec{ScheduleKind::gpipe, 4, 8, 1},
                                ScheduleSpec{ScheduleKind::interleaved, 8, 32, 4},
                                ScheduleSpec{ScheduleKind::one_f_one_b, 1, 1, 1}}) {
    const std::string path = (dir / (std::string(schedule_name(s.kind)) + ".png")).string();
    write_schedule_png(path, s, simulate(s));
    std::ifstream in(path, std::ios::binary);
    char head[8] = {};
    in.read(head, 8);
    EXPECT_EQ(std::string(head, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << path;
    EXPECT_GT(std::filesystem::file_size(path), 100u) << path;
  }
  std::filesystem::remove_all(dir);

  const std::string missing = (dir / "no" / "such" / "chart.png").string();
  const ScheduleSpec s{ScheduleKind::gpipe, 2, 2, 1};
  try {
    write_schedule_png(missing, s, simulate(s));
    FAIL() << "no UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mpitron::pipeline
