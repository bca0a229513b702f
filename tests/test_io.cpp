// Unit tests of io/: trace write/read/resume/kill-safety, checkpoint round trips on one rank,
// flat_range_blocks, attributes, user-input errors (UsageError, never a crash), discovery and
// trace comparison. Runs as a single MPI process (singleton MPI_Init, no mpiexec).
#include <gtest/gtest.h>
#include <mpi.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "io/checkpoint.hpp"
#include "io/h5.hpp"
#include "io/inspect.hpp"
#include "io/trace.hpp"
#include "tests/mpi_environment.hpp"

namespace fs = std::filesystem;
using namespace mpitron;
using namespace mpitron::io;

namespace {

[[maybe_unused]] ::testing::Environment* const mpi_env =
    ::testing::AddGlobalTestEnvironment(new mpitron::testing::MpiEnvironment);

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

class IoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("mpitron_test_io_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

TraceRow make_row(int64_t step, double scale = 1.0, int world = 3) {
  TraceRow r;
  r.step = step;
  r.loss = scale * (10.0 / (1.0 + step));
  r.val_loss = step % 5 == 0 ? 2.0 + 1.0 / step : kNaN;
  r.lr = 1e-3 * step;
  r.grad_norm = 0.5 + step;
  r.tokens_per_s = 1000.0 + step;
  r.step_s = 0.25 * step;
  r.comm_bytes = 1000 * step;
  r.peak_mem_bytes = (int64_t{1} << 40) + step;
  for (int i = 0; i < world; ++i) {
    r.rank_comm_bytes.push_back(step * 10 + i);
    r.rank_peak_mem_bytes.push_back(step * 100 + i);
  }
  return r;
}

void write_trace(const std::string& p, int64_t first, int64_t last, double scale = 1.0) {
  TraceWriter w(p, {{"model", std::string("gpt2")}}, -1, 4);
  for (int64_t s = first; s <= last; ++s) w.append(make_row(s, scale));
}

// Reads a 2-D int64 dataset of the trace with the plain C API (as h5py would).
std::vector<std::vector<int64_t>> read_matrix(const std::string& p, const char* name) {
  Handle f(H5Fopen(p.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  EXPECT_TRUE(f.valid());
  Handle d(H5Dopen2(f, name, H5P_DEFAULT));
  EXPECT_TRUE(d.valid());
  const std::vector<int64_t> shape = dataset_shape(d);
  EXPECT_EQ(shape.size(), 2u);
  std::vector<int64_t> flat(shape[0] * shape[1]);
  if (!flat.empty()) H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, flat.data());
  std::vector<std::vector<int64_t>> m(shape[0]);
  for (int64_t i = 0; i < shape[0]; ++i)
    m[i].assign(flat.begin() + i * shape[1], flat.begin() + (i + 1) * shape[1]);
  return m;
}

void expect_same_double(double a, double b) {
  if (std::isnan(a))
    EXPECT_TRUE(std::isnan(b));
  else
    EXPECT_EQ(a, b);
}

template <typename F>
std::string usage_error_of(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no UsageError)";
}

}  // namespace

// ---- trace --------------------------------------------------------------------------------------

TEST_F(IoTest, TraceRoundTrip) {
  const std::string p = path("trace.h5");
  const Attributes attrs = {{"model", std::string("gpt2-small")},
                            {"seed", int64_t{1234}},
                            {"lr", 6e-4},
                            {"layout", std::string("dp2 tp1 pp1")}};
  {
    TraceWriter w(p, attrs, -1, 4);
    for (int64_t s = 1; s <= 25; ++s) w.append(make_row(s));
    EXPECT_EQ(w.rows(), 25);
  }
  const Trace t = read_trace(p);
  ASSERT_EQ(t.step.size(), 25u);
  for (int64_t i = 0; i < 25; ++i) {
    const TraceRow r = make_row(i + 1);
    EXPECT_EQ(t.step[i], r.step);
    EXPECT_EQ(t.loss[i], r.loss);
    expect_same_double(t.val_loss[i], r.val_loss);
    EXPECT_EQ(t.lr[i], r.lr);
    EXPECT_EQ(t.grad_norm[i], r.grad_norm);
    EXPECT_EQ(t.tokens_per_s[i], r.tokens_per_s);
    EXPECT_EQ(t.step_s[i], r.step_s);
    EXPECT_EQ(t.comm_bytes[i], r.comm_bytes);
    EXPECT_EQ(t.peak_mem_bytes[i], r.peak_mem_bytes);
  }
  EXPECT_EQ(t.attrs, attrs);
  const auto m = read_matrix(p, "trace/rank_peak_mem_bytes");
  ASSERT_EQ(m.size(), 25u);
  for (int64_t i = 0; i < 25; ++i) EXPECT_EQ(m[i], make_row(i + 1).rank_peak_mem_bytes);
  const auto c = read_matrix(p, "trace/rank_comm_bytes");
  ASSERT_EQ(c.size(), 25u);
  EXPECT_EQ(c[24], make_row(25).rank_comm_bytes);
}

TEST_F(IoTest, TraceWithoutRankColumnsHasNoMatrices) {
  const std::string p = path("trace.h5");
  {
    TraceWriter w(p, {}, -1, 1);
    TraceRow r = make_row(1, 1.0, 0);
    w.append(r);
  }
  Handle f(H5Fopen(p.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  ASSERT_TRUE(f.valid());
  EXPECT_TRUE(path_exists(f, "trace/loss"));
  EXPECT_FALSE(path_exists(f, "trace/rank_comm_bytes"));
  EXPECT_EQ(read_trace(p).step, std::vector<int64_t>{1});
}

TEST_F(IoTest, TraceResumeDropsLaterRowsAndAppends) {
  const std::string p = path("trace.h5");
  write_trace(p, 1, 10);  // as if the run got to step 10 after checkpointing at 6
  {
    TraceWriter w(p, {{"model", std::string("gpt2-resumed")}, {"resumed_from", int64_t{6}}}, 6, 3);
    EXPECT_EQ(w.rows(), 6);
    // The resumed run has 5 ranks instead of 3: the rank matrices widen.
    for (int64_t s = 7; s <= 12; ++s) w.append(make_row(s, 2.0, 5));
  }
  const Trace t = read_trace(p);
  ASSERT_EQ(t.step.size(), 12u);
  for (int64_t i = 0; i < 12; ++i) {
    EXPECT_EQ(t.step[i], i + 1);
    EXPECT_EQ(t.loss[i], make_row(i + 1, i < 6 ? 1.0 : 2.0).loss) << "row " << i;
  }
  EXPECT_EQ(std::get<std::string>(t.attrs.at("model")), "gpt2-resumed");
  EXPECT_EQ(std::get<int64_t>(t.attrs.at("resumed_from")), 6);
  const auto m = read_matrix(p, "trace/rank_comm_bytes");
  ASSERT_EQ(m.size(), 12u);
  ASSERT_EQ(m[0].size(), 5u);
  EXPECT_EQ(m[5], (std::vector<int64_t>{60, 61, 62, -1, -1}));
  EXPECT_EQ(m[6], make_row(7, 2.0, 5).rank_comm_bytes);

  // Resuming again at a step before every row leaves an empty trace that then grows.
  {
    TraceWriter w(p, {}, 0, 100);
    EXPECT_EQ(w.rows(), 0);
    w.append(make_row(1));
  }
  EXPECT_EQ(read_trace(p).step, std::vector<int64_t>{1});
}

TEST_F(IoTest, TraceResumeCreatesMissingFile) {
  const std::string p = path("sub/trace.h5");
  {
    TraceWriter w(p, {}, 40, 2);
    w.append(make_row(41));
  }
  EXPECT_EQ(read_trace(p).step, std::vector<int64_t>{41});
}

TEST_F(IoTest, TraceSurvivesWriterKilledAfterFlush) {
  const std::string p = path("trace.h5");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    TraceWriter w(p, {{"model", std::string("gpt2")}}, -1, 5);
    for (int64_t s = 1; s <= 13; ++s) w.append(make_row(s));  // flushed at 5 and 10
    kill(getpid(), SIGKILL);  // no destructor, no close: 11..13 are lost, 1..10 must remain
    _exit(3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child should have been killed";
  EXPECT_EQ(WTERMSIG(status), SIGKILL);

  const Trace t = read_trace(p);
  ASSERT_EQ(t.step.size(), 10u);
  EXPECT_EQ(t.step.back(), 10);
  EXPECT_EQ(t.loss[9], make_row(10).loss);
  EXPECT_EQ(std::get<std::string>(t.attrs.at("model")), "gpt2");

  // Independent readers accept the file too.
  if (fs::exists("/usr/bin/h5dump")) {
    const std::string cmd = "h5dump -d /trace/step " + p + " > /dev/null 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  // PYTHON: the interpreter with h5py that CTest hands every test (tests/python.cmake).
  const char* python = std::getenv("PYTHON");
  const std::string py = python != nullptr && *python != '\0' ? python : "python3";
  if (std::system((py + " -c 'import h5py' > /dev/null 2>&1").c_str()) == 0) {
    const std::string cmd = py + " -c \"import h5py,sys; f=h5py.File('" + p +
                            "','r'); sys.exit(0 if list(f['trace/step'][:]) == "
                            "list(range(1,11)) else 1)\"";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }

  // And the killed run can be resumed from it.
  {
    TraceWriter w(p, {}, 8, 1);
    w.append(make_row(9, 3.0));
  }
  const Trace r = read_trace(p);
  ASSERT_EQ(r.step.size(), 9u);
  EXPECT_EQ(r.loss[8], make_row(9, 3.0).loss);
}

TEST_F(IoTest, TraceReadableByOtherProcessesWhileWriting) {
  if (!fs::exists("/usr/bin/h5dump")) GTEST_SKIP() << "needs h5dump (Debian: hdf5-tools)";
  const std::string p = path("trace.h5");
  TraceWriter w(p, {}, -1, 2);
  for (int64_t s = 1; s <= 3; ++s) w.append(make_row(s));  // rows 1, 2 flushed; 3 buffered
  const std::string out = path("dump.txt");
  const std::string cmd = "h5dump -d /trace/step " + p + " > " + out + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(out);
  const std::string dump((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(dump.find("(0): 1, 2"), std::string::npos) << dump;
}

// ---- flat_range_blocks --------------------------------------------------------------------------

namespace {

// Row-major flat indices of a block's elements, in row-major order within the block.
std::vector<int64_t> block_indices(const std::vector<int64_t>& shape, const Block& b) {
  std::vector<int64_t> out;
  const size_t nd = shape.size();
  if (nd == 0) return {0};
  int64_t n = 1;
  for (int64_t c : b.count) n *= c;
  std::vector<int64_t> idx(nd, 0);
  for (int64_t e = 0; e < n; ++e) {
    int64_t f = 0;
    for (size_t k = 0; k < nd; ++k) f = f * shape[k] + b.start[k] + idx[k];
    out.push_back(f);
    for (size_t k = nd; k-- > 0;) {
      if (++idx[k] < b.count[k]) break;
      idx[k] = 0;
    }
  }
  return out;
}

}  // namespace

TEST(FlatRangeBlocks, ConcatenationEqualsTheRange) {
  const std::vector<std::vector<int64_t>> shapes = {
      {},        {1},       {7},          {3, 4},       {1, 5},   {5, 1},
      {1, 1, 5}, {2, 3, 4}, {2, 1, 3, 2}, {3, 2, 2, 3}, {4, 0, 3}};
  for (const auto& shape : shapes) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    const size_t max_blocks = shape.size() <= 1 ? 1 : 2 * shape.size() - 1;
    for (int64_t b = 0; b <= numel; ++b) {
      for (int64_t e = b; e <= numel; ++e) {
        const std::vector<Block> blocks = flat_range_blocks(shape, b, e);
        EXPECT_LE(blocks.size(), max_blocks);
        std::vector<int64_t> got;
        for (const Block& blk : blocks) {
          ASSERT_EQ(blk.start.size(), shape.size());
          ASSERT_EQ(blk.count.size(), shape.size());
          for (size_t k = 0; k < shape.size(); ++k) {
            EXPECT_GE(blk.start[k], 0);
            EXPECT_GT(blk.count[k], 0);
            EXPECT_LE(blk.start[k] + blk.count[k], shape[k]);
          }
          const auto idx = block_indices(shape, blk);
          got.insert(got.end(), idx.begin(), idx.end());
        }
        std::vector<int64_t> want;
        for (int64_t i = b; i < e; ++i) want.push_back(i);
        ASSERT_EQ(got, want) << "shape " << shape_string(shape) << " range [" << b << "," << e
                             << ")";
      }
    }
  }
  // The 2-D shape of the contract: partial row, whole rows, partial row.
  const auto blocks = flat_range_blocks({4, 5}, 3, 17);
  ASSERT_EQ(blocks.size(), 3u);
  EXPECT_EQ(blocks[0].start, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(blocks[0].count, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(blocks[1].start, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(blocks[1].count, (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(blocks[2].start, (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(blocks[2].count, (std::vector<int64_t>{1, 2}));
}

// ---- checkpoints --------------------------------------------------------------------------------

namespace {

float value_of(int tensor, int64_t flat) {
  return static_cast<float>(tensor * 1000 + 0.5 * flat);
}

struct Owned {
  TensorPiece piece;
  std::vector<float> data;
};

// A piece of tensor `id` made of `blocks`, filled with value_of (blocks one after another).
Owned make_piece(int id, const std::string& name, const std::vector<int64_t>& shape,
                 std::vector<Block> blocks) {
  Owned o;
  for (const Block& b : blocks)
    for (int64_t f : block_indices(shape, b)) o.data.push_back(value_of(id, f));
  o.piece = TensorPiece{name, shape, std::move(blocks), nullptr};
  return o;
}

std::vector<TensorPiece> pieces_of(std::vector<Owned>& owned) {
  std::vector<TensorPiece> out;
  for (Owned& o : owned) {
    o.piece.data = o.data.data();
    out.push_back(o.piece);
  }
  return out;
}

int64_t numel_of(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

const Attributes kRootAttrs = {{"format_version", int64_t{1}},
                               {"step", int64_t{40}},
                               {"tokens_seen", int64_t{1} << 40},
                               {"model", std::string("gpt2")},
                               {"lr", 6e-4}};
const std::map<std::string, Attributes> kGroupAttrs = {
    {"rng", {{"seed", int64_t{1234}}, {"offset", int64_t{-7}}}},
    {"data", {{"cursor", int64_t{99}}, {"file", std::string("bible.txt")}}}};

// Writes a checkpoint holding several shapes, with the blocks of each tensor in awkward orders.
void write_test_checkpoint(const std::string& p, CheckpointIo io) {
  std::vector<Owned> owned;
  // Whole tensor as three flat ranges (partial row, whole rows, partial row).
  std::vector<Block> a;
  for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 3}, {3, 31}, {31, 35}})
    for (Block& blk : flat_range_blocks({7, 5}, b, e)) a.push_back(blk);
  owned.push_back(make_piece(1, "params/h.0.attn.c_attn.weight", {7, 5}, a));
  owned.push_back(
      make_piece(2, "params/h.0.attn.c_attn.bias", {13}, flat_range_blocks({13}, 0, 13)));
  owned.push_back(
      make_piece(3, "params/h.0.mlp.c_fc.weight", {3, 4, 5}, flat_range_blocks({3, 4, 5}, 0, 60)));
  owned.push_back(
      make_piece(4, "optim/h.0.attn.c_attn.weight/m", {7, 5}, flat_range_blocks({7, 5}, 0, 35)));
  // Column blocks listed right to left: not in flat order, so written in separate runs.
  owned.push_back(make_piece(5, "optim/h.0.attn.c_attn.weight/v", {7, 5},
                             {Block{{0, 3}, {7, 2}}, Block{{0, 0}, {7, 3}}}));
  owned.push_back(make_piece(6, "params/scale", {}, flat_range_blocks({}, 0, 1)));
  owned.push_back(make_piece(7, "params/empty", {0, 4}, {}));
  write_checkpoint(p, kRootAttrs, kGroupAttrs, pieces_of(owned), MPI_COMM_WORLD, io);
}

// Reads every tensor of write_test_checkpoint back in row blocks and checks every value.
void check_test_checkpoint(const std::string& p) {
  const CheckpointHeader h = read_checkpoint_header(p);
  EXPECT_EQ(h.root, kRootAttrs);
  EXPECT_EQ(h.groups, kGroupAttrs);
  const std::map<std::string, std::vector<int64_t>> shapes = {
      {"params/h.0.attn.c_attn.weight", {7, 5}},
      {"params/h.0.attn.c_attn.bias", {13}},
      {"params/h.0.mlp.c_fc.weight", {3, 4, 5}},
      {"optim/h.0.attn.c_attn.weight/m", {7, 5}},
      {"optim/h.0.attn.c_attn.weight/v", {7, 5}},
      {"params/scale", {}},
      {"params/empty", {0, 4}}};
  EXPECT_EQ(h.shapes, shapes);

  const std::vector<std::pair<int, std::string>> ids = {
      {1, "params/h.0.attn.c_attn.weight"},  {2, "params/h.0.attn.c_attn.bias"},
      {3, "params/h.0.mlp.c_fc.weight"},     {4, "optim/h.0.attn.c_attn.weight/m"},
      {5, "optim/h.0.attn.c_attn.weight/v"}, {6, "params/scale"}};
  std::vector<Owned> owned;
  for (const auto& [id, name] : ids) {
    const auto& shape = shapes.at(name);
    // A different split from the writer's: the second half first, then the first half.
    const int64_t n = numel_of(shape), mid = n / 2;
    std::vector<Block> blocks = flat_range_blocks(shape, mid, n);
    for (Block& b : flat_range_blocks(shape, 0, mid)) blocks.push_back(b);
    Owned o = make_piece(id, name, shape, blocks);
    std::vector<float> want = o.data;
    std::fill(o.data.begin(), o.data.end(), -1.0f);
    owned.push_back(std::move(o));
    owned.back().piece.data = owned.back().data.data();
    read_checkpoint_tensors(p, {owned.back().piece});
    EXPECT_EQ(owned.back().data, want) << name;
  }
}

}  // namespace

TEST_F(IoTest, CheckpointRoundTripSingleRank) {
  const std::string p = path("run/ckpt_40.h5");
  write_test_checkpoint(p, CheckpointIo::gather);
  EXPECT_TRUE(fs::exists(p));
  EXPECT_FALSE(fs::exists(p + ".tmp"));
  check_test_checkpoint(p);
#ifdef MPITRON_PARALLEL_HDF5
  const std::string q = path("run/ckpt_41.h5");
  write_test_checkpoint(q, CheckpointIo::collective);
  EXPECT_FALSE(fs::exists(q + ".tmp"));
  check_test_checkpoint(q);
#endif
  // The default transport, overwriting an existing checkpoint.
  write_checkpoint(p, {{"step", int64_t{41}}}, {}, {}, MPI_COMM_WORLD);
  EXPECT_EQ(read_checkpoint_header(p).root, (Attributes{{"step", int64_t{41}}}));
}

// A filled piece (mpitron import's streamed write) reads back as one with data does; its fill is
// asked for each range once, in order, a chunk of whole rows (about 1 Mi elements) at a time.
TEST_F(IoTest, FilledPiecesStreamAChunkAtATime) {
  const std::vector<std::vector<int64_t>> shapes = {{2500, 1000}, {13}, {}, {0, 4}};
  const std::vector<std::vector<std::pair<int64_t, int64_t>>> want_calls = {
      {{0, 1048000}, {1048000, 2096000}, {2096000, 2500000}}, {{0, 13}}, {{0, 1}}, {}};
  std::vector<CheckpointIo> transports = {CheckpointIo::gather};
#ifdef MPITRON_PARALLEL_HDF5
  transports.push_back(CheckpointIo::collective);
#endif
  for (CheckpointIo io : transports) {
    std::vector<std::vector<std::pair<int64_t, int64_t>>> calls(shapes.size());
    std::vector<TensorPiece> pieces;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const std::vector<int64_t>& shape = shapes[i];
      TensorPiece t{"params/t" + std::to_string(i), shape,
                    flat_range_blocks(shape, 0, numel_of(shape)), nullptr};
      t.fill = [i, &calls](int64_t begin, int64_t end, float* out) {
        calls[i].push_back({begin, end});
        for (int64_t f = begin; f < end; ++f) out[f - begin] = value_of(int(i), f);
      };
      pieces.push_back(std::move(t));
    }
    const std::string p = path("filled.h5");
    write_checkpoint(p, kRootAttrs, {}, pieces, MPI_COMM_SELF, io);
    EXPECT_EQ(calls, want_calls);
    for (size_t i = 0; i < shapes.size(); ++i) {
      const int64_t n = numel_of(shapes[i]);
      Owned o = make_piece(int(i), "params/t" + std::to_string(i), shapes[i],
                           flat_range_blocks(shapes[i], 0, n));
      std::vector<float> got(o.data.size(), -1.0f);
      o.piece.data = got.data();
      read_checkpoint_tensors(p, {o.piece});
      EXPECT_EQ(got, o.data) << o.piece.dataset;
    }
    const CheckpointVerification v = verify_checkpoint(p);  // every chunk passes its checksum
    EXPECT_EQ(v.tensors, 4);
    EXPECT_TRUE(v.failed.empty());
  }
}

TEST_F(IoTest, AttributesRoundTripExactly) {
  const Attributes attrs = {
      {"i_min", std::numeric_limits<int64_t>::min()},
      {"i_max", std::numeric_limits<int64_t>::max()},
      {"zero", int64_t{0}},
      {"third", 1.0 / 3.0},
      {"tiny", std::numeric_limits<double>::denorm_min()},
      {"huge", -1e300},
      {"inf", std::numeric_limits<double>::infinity()},
      {"empty", std::string()},
      {"unicode", std::string("héllo — 世界")},
      {"long", std::string(10000, 'x')},
      {"toml", std::string("[model]\nn_layer = 12\nname = \"gpt2\"\n")},
  };
  const std::string t = path("trace.h5");
  { TraceWriter w(t, attrs, -1, 1); }
  EXPECT_EQ(read_trace(t).attrs, attrs);

  const std::string c = path("ckpt_1.h5");
  write_checkpoint(c, attrs, {{"a/b", attrs}}, {}, MPI_COMM_WORLD);
  const CheckpointHeader h = read_checkpoint_header(c);
  EXPECT_EQ(h.root, attrs);
  EXPECT_EQ(h.groups.at("a/b"), attrs);
  for (const auto& [k, v] : h.root) EXPECT_EQ(v.index(), attrs.at(k).index()) << k;

  // NaN is kept (compared apart since NaN != NaN).
  { TraceWriter w(t, {{"nan", kNaN}}, -1, 1); }
  EXPECT_TRUE(std::isnan(std::get<double>(read_trace(t).attrs.at("nan"))));
}

// ---- bad input ----------------------------------------------------------------------------------

TEST_F(IoTest, MissingFileIsUsageError) {
  const std::string p = path("nope/ckpt_40.h5");
  for (const std::string& msg : {
           usage_error_of([&] { read_trace(p); }),
           usage_error_of([&] { read_checkpoint_header(p); }),
           usage_error_of([&] { read_checkpoint_tensors(p, {}); }),
           usage_error_of([&] {
             std::ostringstream out;
             print_info(p, out);
           }),
           usage_error_of([&] { compare_traces(p, p); }),
       }) {
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
    EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  }
}

TEST_F(IoTest, NonHdf5FileIsUsageError) {
  const std::string p = path("notes.h5");
  std::ofstream(p) << "this is not HDF5\n";
  const std::string empty = path("empty.h5");
  std::ofstream(empty).flush();
  for (const std::string& f : {p, empty}) {
    for (const std::string& msg : {
             usage_error_of([&] { read_trace(f); }),
             usage_error_of([&] { read_checkpoint_header(f); }),
             usage_error_of([&] { TraceWriter w(f, {}, 5, 1); }),
         }) {
      EXPECT_NE(msg.find(f + " is not an HDF5 file"), std::string::npos) << msg;
    }
  }
}

TEST_F(IoTest, TruncatedCheckpointIsUsageError) {
  const std::string p = path("ckpt_40.h5");
  write_test_checkpoint(p, CheckpointIo::gather);
  fs::resize_file(p, fs::file_size(p) / 2);
  const std::string msg1 = usage_error_of([&] { read_checkpoint_header(p); });
  EXPECT_NE(msg1.find("checkpoint " + p + " is not a readable HDF5 file (truncated or corrupt?)"),
            std::string::npos)
      << msg1;
  std::vector<float> buf(35);
  const std::string msg2 = usage_error_of([&] {
    read_checkpoint_tensors(p, {TensorPiece{"params/h.0.attn.c_attn.weight",
                                            {7, 5},
                                            flat_range_blocks({7, 5}, 0, 35),
                                            buf.data()}});
  });
  EXPECT_NE(msg2.find("truncated or corrupt"), std::string::npos) << msg2;
}

// A datatype whose precision does not fit its size (found by fuzzing): HDF5 1.10 converts it past
// the end of its buffers, so the readers refuse it first. The file's int64 type messages (class 0,
// signed, 8 bytes, offset 0, precision 64) get precision 0xffc0.
TEST_F(IoTest, DamagedIntegerDatatypeIsUsageError) {
  const std::string t = path("trace.h5");
  {
    TraceWriter w(t, {{"seed", int64_t{7}}}, -1, 1);
    TraceRow row;
    row.step = 1;
    w.append(row);
  }
  std::string bytes;
  {
    std::ifstream in(t, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string int64_type("\x10\x08\x00\x00\x08\x00\x00\x00\x00\x00\x40\x00", 12);
  int patched = 0;
  for (size_t at = bytes.find(int64_type); at != std::string::npos;
       at = bytes.find(int64_type, at + 1), ++patched) {
    bytes[at + 10] = char(0xc0);
    bytes[at + 11] = char(0xff);
  }
  ASSERT_GE(patched, 2);  // the seed attribute and /trace/step
  std::ofstream(t, std::ios::binary) << bytes;
  const std::string msg = usage_error_of([&] { read_trace(t); });
  EXPECT_NE(msg.find(t), std::string::npos) << msg;
  EXPECT_NE(msg.find("has a damaged datatype (8 bytes, 65472 bits of precision"), std::string::npos)
      << msg;
}

TEST_F(IoTest, ShapeMismatchAndMissingTensorAreUsageErrors) {
  const std::string p = path("ckpt_40.h5");
  write_test_checkpoint(p, CheckpointIo::gather);
  std::vector<float> buf(35, -1.0f);
  const std::string msg = usage_error_of([&] {
    read_checkpoint_tensors(p, {TensorPiece{"params/h.0.attn.c_attn.weight",
                                            {5, 7},
                                            flat_range_blocks({5, 7}, 0, 35),
                                            buf.data()}});
  });
  EXPECT_NE(msg.find("has params/h.0.attn.c_attn.weight of shape (7,5); this model expects (5,7)"),
            std::string::npos)
      << msg;
  EXPECT_EQ(buf[0], -1.0f);  // nothing read

  const std::string missing = usage_error_of([&] {
    read_checkpoint_tensors(p, {TensorPiece{"params/h.1.attn.c_attn.weight", {7, 5}, {}, nullptr}});
  });
  EXPECT_NE(missing.find("has no params/h.1.attn.c_attn.weight"), std::string::npos) << missing;
  const std::string missing_group = usage_error_of([&] {
    read_checkpoint_tensors(p, {TensorPiece{"ema/wte.weight", {7, 5}, {}, nullptr}});
  });
  EXPECT_NE(missing_group.find("has no ema/wte.weight"), std::string::npos) << missing_group;

  // A checkpoint is not a trace, and a trace cannot be resumed from one.
  const std::string not_trace = usage_error_of([&] { read_trace(p); });
  EXPECT_NE(not_trace.find("not a loss trace"), std::string::npos) << not_trace;
  const std::string no_resume = usage_error_of([&] { TraceWriter w(p, {}, 3, 1); });
  EXPECT_NE(no_resume.find("not an mpitron trace"), std::string::npos) << no_resume;
}

// ---- discovery, info, comparison ----------------------------------------------------------------

TEST_F(IoTest, LatestCheckpointPicksLargestStepIgnoringTmp) {
  EXPECT_EQ(latest_checkpoint(path("missing")), "");
  EXPECT_EQ(latest_checkpoint(dir_.string()), "");
  for (const char* name : {"ckpt_5.h5", "ckpt_40.h5", "ckpt_7.h5", "ckpt_100.h5.tmp", "ckpt_x.h5",
                           "notes.txt", "ckpt_900.h5.bak", "trace.h5"})
    std::ofstream(path(name)) << "x";
  fs::create_directories(path("ckpt_1000.h5"));  // a folder, not a checkpoint
  EXPECT_EQ(latest_checkpoint(dir_.string()), path("ckpt_40.h5"));
}

TEST_F(IoTest, PrintInfoSummarisesTracesAndCheckpoints) {
  const std::string t = path("trace.h5");
  write_trace(t, 1, 25);
  std::ostringstream ti;
  print_info(t, ti);
  const std::string ts = ti.str();
  EXPECT_NE(ts.find("mpitron loss trace"), std::string::npos) << ts;
  EXPECT_NE(ts.find("model = \"gpt2\""), std::string::npos) << ts;
  EXPECT_NE(ts.find("steps: 1 .. 25 (25 rows)"), std::string::npos) << ts;
  EXPECT_NE(ts.find("val_loss: last 2.04 (step 25)"), std::string::npos) << ts;
  EXPECT_NE(ts.find("/trace/rank_comm_bytes"), std::string::npos) << ts;

  const std::string c = path("ckpt_40.h5");
  write_test_checkpoint(c, CheckpointIo::gather);
  std::ostringstream ci;
  print_info(c, ci, true);
  const std::string cs = ci.str();
  EXPECT_NE(cs.find("mpitron checkpoint"), std::string::npos) << cs;
  EXPECT_NE(cs.find("step" + std::string(11, ' ') + "= 40"), std::string::npos) << cs;
  EXPECT_NE(cs.find("group /rng attributes"), std::string::npos) << cs;
  EXPECT_NE(cs.find("float32"), std::string::npos) << cs;
  EXPECT_NE(cs.find("(3,4,5)"), std::string::npos) << cs;
  // 35 + 13 + 60 + 1 + 0 elements under /params
  EXPECT_NE(cs.find("parameters: 109 in 5 tensors"), std::string::npos) << cs;
}

TEST_F(IoTest, CompareTraces) {
  const std::string a = path("a.h5"), b = path("b.h5"), c = path("c.h5");
  write_trace(a, 1, 20);
  write_trace(b, 1, 20);
  const TraceComparison same = compare_traces(a, b);
  EXPECT_EQ(same.steps_compared, 20);
  EXPECT_EQ(same.max_rel_diff, 0.0);
  EXPECT_EQ(same.frac_within_1pct, 1.0);
  EXPECT_EQ(same.steps_only_in_one, 0);

  {  // steps 2..25, step 5 off by 2%, step 7 missing
    TraceWriter w(c, {}, -1, 4);
    for (int64_t s = 2; s <= 25; ++s) {
      if (s == 7) continue;
      TraceRow r = make_row(s);
      if (s == 5) r.loss *= 1.02;
      w.append(r);
    }
  }
  const TraceComparison diff = compare_traces(a, c);
  EXPECT_EQ(diff.steps_compared, 18);  // 2..20 without 7
  EXPECT_NEAR(diff.max_rel_diff, 0.02 / 1.02, 1e-12);
  EXPECT_EQ(diff.worst_step, 5);
  EXPECT_DOUBLE_EQ(diff.frac_within_1pct, 17.0 / 18.0);
  EXPECT_EQ(diff.steps_only_in_one, 1 + 1 + 5);  // step 1, step 7, steps 21..25
  EXPECT_EQ(compare_traces(c, a).steps_only_in_one, diff.steps_only_in_one);
}
