// io/safetensors: write/read round trip bitwise, every malformed header refused with a message
// naming the problem, F16/BF16/F64 conversion, and a header of GPT-2 XL's shapes over a truncated
// or sparse file planned without reading data but refused on import.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "base/check.hpp"
#include "src/train/pretrained.hpp"
#include "tests/mpi_environment.hpp"

namespace fs = std::filesystem;
using namespace mpitron;
using io::SafetensorsFile;

namespace {

fs::path temp_dir();

// import_hf writes its checkpoint over MPI_COMM_SELF: a singleton MPI for the whole binary, and
// the scratch folder removed after the last test.
class Environment : public mpitron::testing::MpiEnvironment {
 public:
  void TearDown() override {
    MpiEnvironment::TearDown();
    fs::remove_all(temp_dir());
  }
};
[[maybe_unused]] ::testing::Environment* const mpi_env =
    ::testing::AddGlobalTestEnvironment(new Environment);

fs::path temp_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("mpitron_st_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

// A file of an 8-byte length, the header text (padded to a multiple of 8 when pad) and data.
std::string raw_file(const std::string& name, const std::string& header, const std::string& data,
                     bool pad = true, int64_t declared_len = -1) {
  std::string h = header;
  if (pad) h.append((8 - h.size() % 8) % 8, ' ');
  const uint64_t n = declared_len >= 0 ? uint64_t(declared_len) : h.size();
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((n >> (8 * i)) & 0xff);
  const fs::path p = temp_dir() / name;
  std::ofstream(p, std::ios::binary) << bytes << h << data;
  return p.string();
}

std::string error_of(const std::string& path) {
  try {
    SafetensorsFile f(path);
    for (const auto& e : f.tensors()) {
      std::vector<float> v(size_t(e.numel()));
      f.read(e, v.data());
    }
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

void expect_error(const std::string& path, const std::string& want) {
  const std::string e = error_of(path);
  EXPECT_NE(e.find(want), std::string::npos) << "got: '" << e << "', want: '" << want << "'";
  EXPECT_NE(e.find(path), std::string::npos) << "the message does not name the file: " << e;
}

}  // namespace

TEST(Safetensors, WriteReadRoundTripBitwise) {
  const std::string path = (temp_dir() / "rt.safetensors").string();
  std::mt19937 rng(7);
  std::vector<float> a(6 * 5), b(7), c(1);
  for (auto& x : a) x = std::bit_cast<float>(uint32_t(rng()) & 0xff7fffffu);  // no NaNs
  for (auto& x : b) x = std::normal_distribution<float>()(rng);
  c[0] = -0.0f;
  {
    io::SafetensorsWriter w(path, {{"a", {6, 5}}, {"b", {7}}, {"c", {}}}, {{"format", "pt"}});
    w.write(a.data(), 10);  // streamed in pieces
    w.write(a.data() + 10, 20);
    w.write(b.data(), b.size());
    w.write(c.data(), 1);
    w.finish();
  }
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  SafetensorsFile f(path);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.header_bytes() % 8, 0u);
  ASSERT_EQ(f.tensors().size(), 3u);
  const auto* ea = f.find("a");
  ASSERT_NE(ea, nullptr);
  EXPECT_EQ(ea->shape, (std::vector<int64_t>{6, 5}));
  const float* in_place = f.f32_data(*ea);
  ASSERT_NE(in_place, nullptr);
  EXPECT_EQ(std::memcmp(in_place, a.data(), a.size() * 4), 0);
  std::vector<float> rb(7), rc(1);
  f.read(*f.find("b"), rb.data());
  f.read(*f.find("c"), rc.data());
  EXPECT_EQ(std::memcmp(rb.data(), b.data(), 28), 0);
  EXPECT_EQ(std::bit_cast<uint32_t>(rc[0]), 0x80000000u);
  std::vector<float> col(6);  // strided read: column 2 of a
  f.read(*ea, 2, 6, 5, col.data());
  for (int r = 0; r < 6; ++r)
    EXPECT_EQ(std::bit_cast<uint32_t>(col[size_t(r)]),
              std::bit_cast<uint32_t>(a[size_t(r * 5 + 2)]));
  f.release(*ea);  // the mapping stays valid
  EXPECT_EQ(std::memcmp(f.f32_data(*ea), a.data(), a.size() * 4), 0);
}

TEST(Safetensors, ConvertsF16Bf16F64) {
  // F16: 1.0 (0x3c00), -2.5 (0xc100), 65504 (0x7bff), smallest subnormal 2^-24 (0x0001), -0.
  const uint16_t h[] = {0x3c00, 0xc100, 0x7bff, 0x0001, 0x8000};
  // BF16: 1.0 (0x3f80), -3.140625 (0xc049), 1e38-ish (0x7e96).
  const uint16_t bf[] = {0x3f80, 0xc049, 0x7e96};
  const double d[] = {0.1, -1e-3};
  std::string data(reinterpret_cast<const char*>(h), sizeof h);
  data.append(reinterpret_cast<const char*>(bf), sizeof bf);
  data.append(reinterpret_cast<const char*>(d), sizeof d);
  const std::string path = raw_file("conv.safetensors",
                                    R"({"h":{"dtype":"F16","shape":[5],"data_offsets":[0,10]},)"
                                    R"("bf":{"dtype":"BF16","shape":[3],"data_offsets":[10,16]},)"
                                    R"("d":{"dtype":"F64","shape":[2],"data_offsets":[16,32]}})",
                                    data);
  SafetensorsFile f(path);
  std::vector<float> vh(5), vb(3), vd(2);
  f.read(*f.find("h"), vh.data());
  f.read(*f.find("bf"), vb.data());
  f.read(*f.find("d"), vd.data());
  EXPECT_EQ(vh[0], 1.0f);
  EXPECT_EQ(vh[1], -2.5f);
  EXPECT_EQ(vh[2], 65504.0f);
  EXPECT_EQ(vh[3], std::ldexp(1.0f, -24));
  EXPECT_EQ(std::bit_cast<uint32_t>(vh[4]), 0x80000000u);
  EXPECT_EQ(vb[0], 1.0f);
  EXPECT_EQ(vb[1], -3.140625f);
  EXPECT_EQ(std::bit_cast<uint32_t>(vb[2]), 0x7e960000u);
  EXPECT_EQ(vd[0], 0.1f);
  EXPECT_EQ(vd[1], -1e-3f);
  EXPECT_EQ(f.f32_data(*f.find("h")), nullptr);  // not F32: no in-place view
}

TEST(Safetensors, MalformedFilesNameTheProblem) {
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string eight(8, '\0');
  expect_error(raw_file("zero_len.st", "", "", false, 0), "bad header length");
  {
    const fs::path p = temp_dir() / "tiny.st";
    std::ofstream(p, std::ios::binary) << "abc";
    expect_error(p.string(), "bad header length");
  }
  expect_error(raw_file("huge_len.st", ok, eight, true, 1'000'000), "bad header length 1000000");
  expect_error(raw_file("notjson.st", "{\"a\": [1, 2", eight), "header is not JSON");
  expect_error(raw_file("array.st", "[1, 2, 3]", ""), "header is not a JSON object");
  expect_error(
      raw_file("dtype.st", R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", eight),
      "unknown dtype 'Q7'");
  expect_error(
      raw_file("size.st", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
      "shape/size mismatch");
  expect_error(raw_file("overlap.st",
                        R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                        std::string(12, '\0')),
               "overlap");
  expect_error(raw_file("outside.st",
                        R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4000,4008]}})",
                        std::string(16, '\0')),
               "outside the data");
  expect_error(
      raw_file("reversed.st", R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", eight),
      "reversed data_offsets");
  expect_error(raw_file("trunc.st", ok, std::string(4, '\0')), "is truncated");
  expect_error(raw_file("trailing.st", ok, std::string(12, '\0')), "follow the last tensor");
  expect_error(
      raw_file("int.st", R"({"a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})", eight),
      "dtype I32");
  try {
    SafetensorsFile f((temp_dir() / "does_not_exist.st").string());
    ADD_FAILURE() << "opened a missing file";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
}

// A header with GPT-2 XL's tensors (6 GB of F32) over a file holding only the header (truncated)
// or a sparse file of the full size: planned from the header alone; the truncated one refused on
// import before any data is read (reading it would fault: the bytes do not exist).
TEST(Safetensors, GiantHeaderPlannedWithoutReadingData) {
  const int64_t L = 48, C = 1600, V = 50257, T = 1024;
  std::vector<io::SafetensorsTensorSpec> specs{{"wte.weight", {V, C}}, {"wpe.weight", {T, C}}};
  for (int l = 0; l < L; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    for (auto s : std::vector<io::SafetensorsTensorSpec>{{p + "ln_1.weight", {C}},
                                                         {p + "ln_1.bias", {C}},
                                                         {p + "attn.c_attn.weight", {C, 3 * C}},
                                                         {p + "attn.c_attn.bias", {3 * C}},
                                                         {p + "attn.c_proj.weight", {C, C}},
                                                         {p + "attn.c_proj.bias", {C}},
                                                         {p + "ln_2.weight", {C}},
                                                         {p + "ln_2.bias", {C}},
                                                         {p + "mlp.c_fc.weight", {C, 4 * C}},
                                                         {p + "mlp.c_fc.bias", {4 * C}},
                                                         {p + "mlp.c_proj.weight", {4 * C, C}},
                                                         {p + "mlp.c_proj.bias", {C}}})
      specs.push_back(s);
  }
  specs.push_back({"ln_f.weight", {C}});
  specs.push_back({"ln_f.bias", {C}});
  // The header as the safetensors library writes it, and no data after it (truncated).
  const fs::path dir = temp_dir() / "xl";
  fs::create_directories(dir);
  const std::string st = (dir / "model.safetensors").string();
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const auto& t : specs) {
    uint64_t n = 4;
    for (int64_t d : t.shape) n *= uint64_t(d);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  const std::string text = header.dump();
  fs::rename(raw_file("xl.st", text, ""), st);
  const uint64_t header_len = text.size() + (8 - text.size() % 8) % 8;
  std::ofstream(dir / "config.json")
      << R"({"model_type":"gpt2","n_layer":48,"n_head":25,"n_embd":1600,"n_positions":1024,)"
      << R"("vocab_size":50257,"layer_norm_epsilon":1e-5,"activation_function":"gelu_new"})";
  SafetensorsFile f(st);
  EXPECT_EQ(f.tensors().size(), specs.size());
  EXPECT_GT(f.data_bytes_needed(), uint64_t(6'000'000'000));
  EXPECT_EQ(f.data_bytes_present(), 0u);
  std::ostringstream plan;
  print_import_plan(dir.string(), plan);
  EXPECT_NE(plan.str().find("total: 1557611200 parameters"), std::string::npos) << plan.str();
  EXPECT_NE(plan.str().find("TRUNCATED"), std::string::npos);
  try {
    import_hf(dir.string(), (dir / "out.h5").string());
    ADD_FAILURE() << "imported a truncated file";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("is truncated"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "out.h5"));
  // Sparse: the full size, no data blocks on disk; the plan still reads only the header.
  fs::resize_file(st, 8 + header_len + f.data_bytes_needed());
  std::ostringstream plan2;
  print_import_plan(dir.string(), plan2);
  EXPECT_EQ(plan2.str().find("TRUNCATED"), std::string::npos) << plan2.str();
  SafetensorsFile sparse(st);
  EXPECT_NO_THROW(sparse.require_complete());
  fs::remove_all(dir);
}
