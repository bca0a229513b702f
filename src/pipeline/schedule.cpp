// Pipeline schedules as action lists (GPipe, 1F1B, interleaved 1F1B after Megatron-LM) and the
// discrete-event simulator that proves them: messages matched in order per (source, dest, kind),
// receives blocking, sends free; a rank that can never advance is a reported deadlock.
#include "src/pipeline/schedule.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <utility>

#include "base/check.hpp"

namespace mpitron::pipeline {

namespace {

std::string ordinal(long long n) {
  const long long tens = n % 100, ones = n % 10;
  const char* suffix = (tens >= 11 && tens <= 13) ? "th"
                       : ones == 1                ? "st"
                       : ones == 2                ? "nd"
                       : ones == 3                ? "rd"
                                                  : "th";
  return std::to_string(n) + suffix;
}

void require_valid(const ScheduleSpec& spec) {
  const std::string why = check_schedule(spec);
  if (!why.empty()) throw UsageError(why);
}

void require_rank(const ScheduleSpec& spec, int rank) {
  if (rank < 0 || rank >= spec.pp)
    throw std::out_of_range("pipeline rank " + std::to_string(rank) + " outside --pp " +
                            std::to_string(spec.pp));
}

bool is_compute(Op op) {
  return op == Op::forward || op == Op::backward;
}
bool is_send(Op op) {
  return op == Op::send_activation || op == Op::send_gradient;
}
bool is_recv(Op op) {
  return op == Op::recv_activation || op == Op::recv_gradient;
}
bool is_activation(Op op) {
  return op == Op::send_activation || op == Op::recv_activation;
}

// Appends the receive, the compute and the send of one (micro-batch, chunk) on `rank`.
void append_compute(std::vector<Action>& out, const ScheduleSpec& spec, int rank, Op op, int mb,
                    int chunk) {
  const int vs = virtual_stage(spec, rank, chunk);
  const int last = spec.pp * spec.virtual_stages - 1;
  const int next = (rank + 1) % spec.pp, prev = (rank - 1 + spec.pp) % spec.pp;
  if (op == Op::forward) {
    if (vs > 0) out.push_back({Op::recv_activation, mb, chunk, prev});
    out.push_back({Op::forward, mb, chunk, -1});
    if (vs < last) out.push_back({Op::send_activation, mb, chunk, next});
  } else {
    if (vs < last) out.push_back({Op::recv_gradient, mb, chunk, next});
    out.push_back({Op::backward, mb, chunk, -1});
    if (vs > 0) out.push_back({Op::send_gradient, mb, chunk, prev});
  }
}

// Megatron's interleaved micro-step k: micro-batches go round in groups of pp, each group through
// every chunk before the next group starts; backward walks the chunks from the last.
int interleaved_micro_batch(const ScheduleSpec& s, int k) {
  return (k / (s.pp * s.virtual_stages)) * s.pp + k % s.pp;
}
int interleaved_chunk(const ScheduleSpec& s, int k, bool forward) {
  const int c = (k / s.pp) % s.virtual_stages;
  return forward ? c : s.virtual_stages - 1 - c;
}

// --- simulator -----------------------------------------------------------------------------------

// The simulator's view of the lists: pp ranks, V chunks each.
struct Shape {
  int pp, virtual_stages;
  int stage(int rank, int chunk) const { return chunk * pp + rank; }
  int last_stage() const { return pp * virtual_stages - 1; }
  int rank_of(int vs) const { return vs % pp; }
};

std::string describe(const Action& a, int virtual_stages) {
  std::string s = std::string(op_name(a.op)) + " (micro-batch " + std::to_string(a.micro_batch);
  if (virtual_stages > 1) s += ", chunk " + std::to_string(a.chunk);
  s += ")";
  if (is_send(a.op)) s += " to rank " + std::to_string(a.peer);
  if (is_recv(a.op)) s += " from rank " + std::to_string(a.peer);
  return s;
}

std::string where(int rank, std::size_t index, const Action& a, int virtual_stages) {
  return "rank " + std::to_string(rank) + " action " + std::to_string(index) + " " +
         describe(a, virtual_stages);
}

// The rank a send goes to or a receive comes from, given the action's virtual stage: activations
// flow to vs + 1, gradients to vs - 1; -1 when there is no such stage.
int expected_peer(const Shape& shape, int rank, const Action& a) {
  const int vs = shape.stage(rank, a.chunk);
  const bool toward_next = a.op == Op::send_activation || a.op == Op::recv_gradient;
  const int other = toward_next ? vs + 1 : vs - 1;
  if (other < 0 || other > shape.last_stage()) return -1;
  return shape.rank_of(other);
}

// What one rank's list has done to one (micro-batch, chunk) so far.
struct PairState {
  int recv_activation = 0, forward = 0, send_activation = 0;
  int recv_gradient = 0, backward = 0, send_gradient = 0;
};

// Per-rank structure: fields in range, peers the right neighbours, each step once and in order
// (input received before forward, forward before its send and before backward, ...).
std::string check_structure(const std::vector<std::vector<Action>>& lists, const Shape& shape,
                            bool training) {
  for (int r = 0; r < shape.pp; ++r) {
    std::map<std::pair<int, int>, PairState> pairs;
    const auto& list = lists[r];
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      const std::string at = where(r, i, a, shape.virtual_stages);
      if (a.micro_batch < 0) return at + ": negative micro-batch";
      if (a.chunk < 0 || a.chunk >= shape.virtual_stages)
        return at + ": chunk outside 0.." + std::to_string(shape.virtual_stages - 1);
      const int vs = shape.stage(r, a.chunk);
      if (!is_compute(a.op)) {
        const int peer = expected_peer(shape, r, a);
        if (peer < 0)
          return at + ": virtual stage " + std::to_string(vs) + " has no neighbour that way";
        if (a.peer != peer)
          return at + ": the neighbouring virtual stage is on rank " + std::to_string(peer);
      }
      PairState& p = pairs[{a.micro_batch, a.chunk}];
      auto once = [&](int& count) { return ++count == 1; };
      switch (a.op) {
        case Op::recv_activation:
          if (!once(p.recv_activation)) return at + ": input received twice";
          if (p.forward) return at + ": input received after the forward";
          break;
        case Op::forward:
          if (!once(p.forward)) return at + ": forwarded twice";
          if (vs > 0 && !p.recv_activation) return at + ": forward before its input is received";
          break;
        case Op::send_activation:
          if (!once(p.send_activation)) return at + ": output sent twice";
          if (!p.forward) return at + ": output sent before the forward";
          break;
        case Op::recv_gradient:
          if (!once(p.recv_gradient)) return at + ": gradient received twice";
          if (p.backward) return at + ": gradient received after the backward";
          break;
        case Op::backward:
          if (!once(p.backward)) return at + ": backwarded twice";
          if (!p.forward) return at + ": backward before the forward";
          if (vs < shape.last_stage() && !p.recv_gradient)
            return at + ": backward before its output gradient is received";
          break;
        case Op::send_gradient:
          if (!once(p.send_gradient)) return at + ": input gradient sent twice";
          if (!p.backward) return at + ": input gradient sent before the backward";
          break;
      }
    }
    for (const auto& [key, p] : pairs) {
      const auto [mb, chunk] = key;
      const int vs = shape.stage(r, chunk);
      std::string at = "rank " + std::to_string(r) + " micro-batch " + std::to_string(mb);
      if (shape.virtual_stages > 1) at += " chunk " + std::to_string(chunk);
      if (!p.forward) return at + ": never forwarded";
      if (vs < shape.last_stage() && !p.send_activation) return at + ": output never sent";
      if (training) {
        if (!p.backward) return at + ": never backwarded";
        if (vs > 0 && !p.send_gradient) return at + ": input gradient never sent";
      }
    }
  }
  return "";
}

// A performed send waiting for its receive.
struct Message {
  int rank;
  std::size_t index;
  double time;
};

// Peak number of pairs held per rank, in list order: a pair is held from its forward to its
// backward; in forward-only lists it is dropped as soon as its forward (and send) is done.
void count_in_flight(const std::vector<std::vector<Action>>& lists, const Shape& shape,
                     bool training, SimulationResult& out) {
  out.peak_in_flight.assign(shape.pp, 0);
  out.peak_in_flight_per_chunk.assign(shape.pp, std::vector<int>(shape.virtual_stages, 0));
  for (int r = 0; r < shape.pp; ++r) {
    int held = 0;
    std::vector<int> held_per_chunk(shape.virtual_stages, 0);
    for (const Action& a : lists[r]) {
      if (a.op == Op::forward) {
        out.peak_in_flight[r] = std::max(out.peak_in_flight[r], held + 1);
        int& c = held_per_chunk[a.chunk];
        out.peak_in_flight_per_chunk[r][a.chunk] =
            std::max(out.peak_in_flight_per_chunk[r][a.chunk], c + 1);
        if (training) {
          ++held;
          ++c;
        }
      } else if (a.op == Op::backward) {
        --held;
        --held_per_chunk[a.chunk];
      }
    }
  }
}

// Channel index of messages of one kind from `from` to `to`.
std::size_t channel(const Shape& shape, int from, int to, Op op) {
  return (static_cast<std::size_t>(from) * shape.pp + to) * 2 + (is_activation(op) ? 0 : 1);
}

}  // namespace

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::gpipe;
  if (name == "1f1b") return ScheduleKind::one_f_one_b;
  if (name == "interleaved") return ScheduleKind::interleaved;
  throw UsageError("--schedule " + name + " is unknown: use gpipe, 1f1b or interleaved");
}

const char* schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::gpipe:
      return "gpipe";
    case ScheduleKind::one_f_one_b:
      return "1f1b";
    case ScheduleKind::interleaved:
      return "interleaved";
  }
  return "?";
}

const char* op_name(Op op) {
  switch (op) {
    case Op::forward:
      return "forward";
    case Op::backward:
      return "backward";
    case Op::recv_activation:
      return "recv_activation";
    case Op::send_activation:
      return "send_activation";
    case Op::recv_gradient:
      return "recv_gradient";
    case Op::send_gradient:
      return "send_gradient";
  }
  return "?";
}

std::string check_schedule(const ScheduleSpec& spec) {
  const std::string pp = std::to_string(spec.pp), m = std::to_string(spec.micro_batches),
                    v = std::to_string(spec.virtual_stages);
  if (spec.pp < 1) return "--pp " + pp + " is impossible: a pipeline has at least 1 stage";
  if (spec.micro_batches < 1)
    return "--micro-batches " + m + " is impossible: a step has at least 1 micro-batch";
  if (spec.virtual_stages < 1)
    return "--virtual-stages " + v +
           " is impossible: use 1, or 2 or more with --schedule interleaved";
  const bool interleaved = spec.kind == ScheduleKind::interleaved;
  if (!interleaved && spec.virtual_stages != 1)
    return "--virtual-stages " + v + " needs --schedule interleaved (--schedule " +
           schedule_name(spec.kind) + " holds one chunk per rank)";
  if (interleaved && spec.virtual_stages < 2)
    return "--schedule interleaved needs --virtual-stages 2 or more (model chunks per rank)";
  if (interleaved && spec.micro_batches % spec.pp != 0) {
    const int below = spec.micro_batches / spec.pp * spec.pp, above = below + spec.pp;
    return "--micro-batches " + m + " is not a multiple of --pp " + pp +
           ": the interleaved schedule sends micro-batches round in groups of pp (use " +
           (below > 0 ? std::to_string(below) + " or " : std::string()) + std::to_string(above) +
           ")";
  }
  return "";
}

std::vector<Action> rank_actions(const ScheduleSpec& spec, int rank) {
  require_valid(spec);
  require_rank(spec, rank);
  const int m = spec.micro_batches;
  std::vector<Action> out;
  switch (spec.kind) {
    case ScheduleKind::gpipe:
      for (int mb = 0; mb < m; ++mb) append_compute(out, spec, rank, Op::forward, mb, 0);
      for (int mb = 0; mb < m; ++mb) append_compute(out, spec, rank, Op::backward, mb, 0);
      break;
    case ScheduleKind::one_f_one_b: {
      // PipeDream-Flush: rank r runs pp-r-1 forwards ahead, then alternates, then drains.
      const int warmup = std::min(spec.pp - rank - 1, m);
      for (int mb = 0; mb < warmup; ++mb) append_compute(out, spec, rank, Op::forward, mb, 0);
      for (int i = 0; i < m - warmup; ++i) {
        append_compute(out, spec, rank, Op::forward, warmup + i, 0);
        append_compute(out, spec, rank, Op::backward, i, 0);
      }
      for (int mb = m - warmup; mb < m; ++mb) append_compute(out, spec, rank, Op::backward, mb, 0);
      break;
    }
    case ScheduleKind::interleaved: {
      // Megatron-LM forward_backward_pipelining_with_interleaving, micro-steps over (mb, chunk).
      const int total = m * spec.virtual_stages;
      const int warmup =
          std::min((spec.pp - rank - 1) * 2 + (spec.virtual_stages - 1) * spec.pp, total);
      auto step = [&](int k, bool forward) {
        append_compute(out, spec, rank, forward ? Op::forward : Op::backward,
                       interleaved_micro_batch(spec, k), interleaved_chunk(spec, k, forward));
      };
      for (int k = 0; k < warmup; ++k) step(k, true);
      for (int i = 0; i < total - warmup; ++i) {
        step(warmup + i, true);
        step(i, false);
      }
      for (int k = total - warmup; k < total; ++k) step(k, false);
      break;
    }
  }
  return out;
}

std::vector<Action> forward_only_actions(const ScheduleSpec& spec, int rank) {
  require_valid(spec);
  require_rank(spec, rank);
  std::vector<Action> out;
  for (int mb = 0; mb < spec.micro_batches; ++mb)
    for (int chunk = 0; chunk < spec.virtual_stages; ++chunk)
      append_compute(out, spec, rank, Op::forward, mb, chunk);
  return out;
}

SimulationResult simulate(const std::vector<std::vector<Action>>& lists, int virtual_stages,
                          double forward_time, double backward_time) {
  SimulationResult out;
  if (lists.empty()) {
    out.error = "no ranks to simulate";
    return out;
  }
  if (virtual_stages < 1) {
    out.error = "virtual stages " + std::to_string(virtual_stages) + ": need at least 1";
    return out;
  }
  const Shape shape{static_cast<int>(lists.size()), virtual_stages};
  const int pp = shape.pp;
  const bool training = std::any_of(lists.begin(), lists.end(), [](const auto& list) {
    return std::any_of(list.begin(), list.end(),
                       [](const Action& a) { return a.op == Op::backward; });
  });
  out.error = check_structure(lists, shape, training);
  if (!out.error.empty()) return out;

  std::vector<std::vector<Message>> sent(static_cast<std::size_t>(pp) * pp * 2);
  std::vector<std::size_t> received(sent.size(), 0);
  std::vector<std::size_t> next(pp, 0);
  std::vector<double> clock(pp, 0.0);
  out.timeline.assign(pp, {});

  // Each pass runs every rank until it blocks on a receive; a pass without progress ends it.
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp; ++r) {
      const auto& list = lists[r];
      for (; next[r] < list.size(); ++next[r]) {
        const Action& a = list[next[r]];
        TimedAction timed{a, clock[r], clock[r]};
        if (is_compute(a.op)) {
          const double duration = a.op == Op::forward ? forward_time : backward_time;
          timed.end = clock[r] += duration;
          out.busy += duration;
        } else if (is_send(a.op)) {
          sent[channel(shape, r, a.peer, a.op)].push_back({r, next[r], clock[r]});
        } else {
          const std::size_t ch = channel(shape, a.peer, r, a.op);
          if (received[ch] == sent[ch].size()) break;  // blocked: its send has not happened yet
          const Message& msg = sent[ch][received[ch]++];
          const Action& s = lists[msg.rank][msg.index];
          // The send's virtual stage must be this receive's neighbour, for the same micro-batch.
          const int want = shape.stage(r, a.chunk) + (a.op == Op::recv_activation ? -1 : 1);
          if (s.micro_batch != a.micro_batch || shape.stage(msg.rank, s.chunk) != want) {
            out.error = where(r, next[r], a, virtual_stages) + " meets " +
                        where(msg.rank, msg.index, s, virtual_stages) + ", the " +
                        ordinal(static_cast<long long>(received[ch])) + " " +
                        (is_activation(a.op) ? "activation" : "gradient") + " from rank " +
                        std::to_string(msg.rank) + " to rank " + std::to_string(r) +
                        ": messages between two ranks are received in the order they are sent";
            return out;
          }
          timed.end = clock[r] = std::max(clock[r], msg.time);
        }
        out.timeline[r].push_back(timed);
        progress = true;
      }
    }
  }

  std::string stuck;
  for (int r = 0; r < pp; ++r) {
    if (next[r] == lists[r].size()) continue;
    const Action& a = lists[r][next[r]];
    stuck += (stuck.empty() ? "" : "; ") + where(r, next[r], a, virtual_stages) + " waits";
    if (next[a.peer] == lists[a.peer].size())
      stuck += " (rank " + std::to_string(a.peer) + " has finished without sending it)";
  }
  if (!stuck.empty()) {
    out.error = "deadlock: " + stuck;
    return out;
  }
  for (std::size_t ch = 0; ch < sent.size(); ++ch) {
    if (received[ch] == sent[ch].size()) continue;
    const Message& msg = sent[ch][received[ch]];
    const Action& s = lists[msg.rank][msg.index];
    out.error = where(msg.rank, msg.index, s, virtual_stages) + " is never received";
    return out;
  }

  out.makespan = *std::max_element(clock.begin(), clock.end());
  out.bubble = out.makespan > 0 ? 1.0 - out.busy / (pp * out.makespan) : 0.0;
  count_in_flight(lists, shape, training, out);
  out.ok = true;
  return out;
}

SimulationResult simulate(const ScheduleSpec& spec, double forward_time, double backward_time) {
  require_valid(spec);
  std::vector<std::vector<Action>> lists;
  for (int r = 0; r < spec.pp; ++r) lists.push_back(rank_actions(spec, r));
  SimulationResult out = simulate(lists, spec.virtual_stages, forward_time, backward_time);
  if (!out.ok) return out;
  // The generic run proved each pair present is forwarded and backwarded once; now all must be.
  for (int r = 0; r < spec.pp; ++r) {
    std::vector<int> forwards(static_cast<std::size_t>(spec.micro_batches) * spec.virtual_stages);
    std::vector<int> backwards(forwards.size());
    for (std::size_t i = 0; i < lists[r].size(); ++i) {
      const Action& a = lists[r][i];
      if (!is_compute(a.op)) continue;
      if (a.micro_batch >= spec.micro_batches) {
        out.ok = false;
        out.error = where(r, i, a, spec.virtual_stages) + ": micro-batch beyond --micro-batches";
        return out;
      }
      auto& count = a.op == Op::forward ? forwards : backwards;
      ++count[static_cast<std::size_t>(a.micro_batch) * spec.virtual_stages + a.chunk];
    }
    for (std::size_t i = 0; i < forwards.size(); ++i) {
      if (forwards[i] == 1 && backwards[i] == 1) continue;
      out.ok = false;
      out.error = "rank " + std::to_string(r) + " micro-batch " +
                  std::to_string(i / spec.virtual_stages) + " chunk " +
                  std::to_string(i % spec.virtual_stages) + " is forwarded " +
                  std::to_string(forwards[i]) + " and backwarded " + std::to_string(backwards[i]) +
                  " times: a training step needs each exactly once";
      return out;
    }
  }
  return out;
}

SendPlan send_plan(const std::vector<std::vector<Action>>& lists, int rank, bool training) {
  const int pp = int(lists.size());
  MPITRON_REQUIRE(rank >= 0 && rank < pp, "send_plan: no such rank");
  const Shape shape{pp, 1};  // channels only: (from, to, kind)
  // Match the k-th send of each channel with its k-th receive: for every send, its receive's
  // rank and index.
  std::vector<std::vector<std::pair<int, std::size_t>>> sends(std::size_t(pp) * pp * 2),
      recvs(sends.size());
  for (int r = 0; r < pp; ++r)
    for (std::size_t i = 0; i < lists[r].size(); ++i) {
      const Action& a = lists[r][i];
      if (is_send(a.op)) sends[channel(shape, r, a.peer, a.op)].push_back({r, i});
      if (is_recv(a.op)) recvs[channel(shape, a.peer, r, a.op)].push_back({r, i});
    }
  std::vector<std::vector<std::pair<int, std::size_t>>> match(
      static_cast<std::size_t>(pp));  // of sends
  for (int r = 0; r < pp; ++r) match[r].assign(lists[r].size(), {-1, 0});
  for (std::size_t ch = 0; ch < sends.size(); ++ch) {
    MPITRON_REQUIRE(sends[ch].size() == recvs[ch].size(), "send_plan: unmatched messages");
    for (std::size_t k = 0; k < sends[ch].size(); ++k)
      match[sends[ch][k].first][sends[ch][k].second] = recvs[ch][k];
  }
  // A receive completes at the rank's next forward or backward (which waits for every posted
  // receive), or at the end of the list.
  auto completion = [&](int r, std::size_t i) {
    while (i < lists[r].size() && !is_compute(lists[r][i].op)) ++i;
    return i;
  };
  // Vector clocks: known[r][i][q] = how many of rank q's actions happened before rank r finished
  // its action i. A forward or backward learns what the senders of its completed receives knew.
  std::vector<std::vector<std::vector<std::size_t>>> known(static_cast<std::size_t>(pp));
  std::vector<std::vector<std::pair<int, std::size_t>>> sender(static_cast<std::size_t>(pp));
  for (int r = 0; r < pp; ++r) sender[r].assign(lists[r].size(), {-1, 0});
  for (int r = 0; r < pp; ++r)
    for (std::size_t i = 0; i < lists[r].size(); ++i)
      if (match[r][i].first >= 0) sender[match[r][i].first][match[r][i].second] = {r, i};
  std::vector<std::size_t> next(static_cast<std::size_t>(pp), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp; ++r) {
      auto& list = lists[r];
      for (; next[r] < list.size(); ++next[r]) {
        const std::size_t i = next[r];
        std::vector<std::size_t> v =
            i == 0 ? std::vector<std::size_t>(std::size_t(pp), 0) : known[r][i - 1];
        if (is_compute(list[i].op)) {
          bool ready = true;
          for (std::size_t j = i; j-- > 0 && !is_compute(list[j].op) && ready;) {
            if (!is_recv(list[j].op)) continue;
            const auto [q, k] = sender[r][j];
            if (next[q] <= k) {
              ready = false;
            } else {
              for (int o = 0; o < pp; ++o) v[o] = std::max(v[o], known[q][k][o]);
            }
          }
          if (!ready) break;
        }
        v[r] = i + 1;
        known[r].push_back(std::move(v));
        progress = true;
      }
    }
  }
  for (int r = 0; r < pp; ++r)
    MPITRON_REQUIRE(next[r] == lists[r].size(), "send_plan: the lists deadlock");

  const auto& list = lists[rank];
  SendPlan out;
  out.retire_at.assign(list.size(), {});
  std::vector<std::size_t> outstanding;  // sends not yet retired, in list order
  int posted = 0;
  int last_forward_mb = -1;
  for (std::size_t l = 0; l < list.size(); ++l) {
    const Action& a = list[l];
    if (is_recv(a.op)) out.receives = std::max(out.receives, ++posted);
    if (is_send(a.op)) {
      outstanding.push_back(l);
      out.buffers = std::max(out.buffers, int(outstanding.size()));
    }
    if (!is_compute(a.op)) continue;
    posted = 0;
    std::vector<std::size_t> keep;
    for (std::size_t s : outstanding) {
      const auto [q, j] = match[rank][s];
      const std::size_t done = completion(q, j);  // the peer's action that completes it
      // Evaluation walks retire every send of the last micro-batch before a new one's forward.
      const bool retired = done < lists[q].size() ? known[rank][l][std::size_t(q)] > done : false;
      const bool new_micro_batch =
          !training && a.op == Op::forward && a.micro_batch != last_forward_mb;
      (retired || new_micro_batch ? out.retire_at[l] : keep).push_back(s);
    }
    outstanding = std::move(keep);
    if (a.op == Op::forward) last_forward_mb = a.micro_batch;
  }
  return out;
}

SendPlan send_plan(const ScheduleSpec& spec, int rank, bool training) {
  require_valid(spec);
  require_rank(spec, rank);
  std::vector<std::vector<Action>> lists;
  for (int r = 0; r < spec.pp; ++r)
    lists.push_back(training ? rank_actions(spec, r) : forward_only_actions(spec, r));
  return send_plan(lists, rank, training);
}

double theoretical_bubble(const ScheduleSpec& spec) {
  require_valid(spec);
  const double p = spec.pp, m = spec.micro_batches;
  const double v = spec.kind == ScheduleKind::interleaved ? spec.virtual_stages : 1;
  return (p - 1) / (v * m + p - 1);
}

}  // namespace mpitron::pipeline
