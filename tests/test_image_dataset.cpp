// Unit tests of io/image_dataset: IDX round trips from small synthetic files (gzipped and plain),
// the batch rule (pure function of seed, split, index; slices agree with the whole batch), every
// input error as a UsageError naming its file, and the real Fashion-MNIST where it is installed.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/image_dataset.hpp"
#include "base/check.hpp"
#include "base/philox.hpp"

namespace fs = std::filesystem;
using namespace mpitron;
using namespace mpitron::io;

namespace {

constexpr int kRows = 3, kCols = 4, kTrain = 12, kVal = 7;

std::vector<uint8_t> be32(uint32_t v) {
  return {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
}

// An IDX file's bytes: magic, dims (big-endian), then the payload.
std::vector<uint8_t> idx_bytes(uint32_t magic, const std::vector<uint32_t>& dims,
                               const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out = be32(magic);
  for (uint32_t d : dims) {
    auto b = be32(d);
    out.insert(out.end(), b.begin(), b.end());
  }
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

void write_plain(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

void write_gz(const fs::path& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

uint64_t fnv1a(const std::vector<std::vector<uint8_t>>& files) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& f : files)
    for (uint8_t b : f) h = (h ^ b) * 1099511628211ull;
  return h;
}

// Image k of a split: distinct pixels per image and split; labels cycle through 0..4.
std::vector<uint8_t> pixels_of(int n, int salt) {
  std::vector<uint8_t> p(static_cast<size_t>(n) * kRows * kCols);
  for (size_t i = 0; i < p.size(); ++i) p[i] = uint8_t((i * 7 + size_t(salt) * 101) % 256);
  return p;
}
std::vector<uint8_t> labels_of(int n, int shift) {
  std::vector<uint8_t> l(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) l[size_t(i)] = uint8_t((i + shift) % 5);
  return l;
}

class ImageDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("mpitron_test_image_dataset_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    train_images_ = idx_bytes(0x803, {kTrain, kRows, kCols}, pixels_of(kTrain, 0));
    train_labels_ = idx_bytes(0x801, {kTrain}, labels_of(kTrain, 0));
    val_images_ = idx_bytes(0x803, {kVal, kRows, kCols}, pixels_of(kVal, 1));
    val_labels_ = idx_bytes(0x801, {kVal}, labels_of(kVal, 2));
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The valid set: train images and t10k labels gzipped, the other two plain.
  void write_all() {
    write_gz(dir_ / "train-images-idx3-ubyte.gz", train_images_);
    write_plain(dir_ / "train-labels-idx1-ubyte", train_labels_);
    write_plain(dir_ / "t10k-images-idx3-ubyte", val_images_);
    write_gz(dir_ / "t10k-labels-idx1-ubyte.gz", val_labels_);
  }

  // Loading must throw UsageError whose message names `file`.
  void expect_error(const std::string& file, const std::string& also = "") {
    try {
      load_image_dataset(dir_.string());
      ADD_FAILURE() << "no UsageError for " << file;
    } catch (const UsageError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(file), std::string::npos) << what;
      if (!also.empty()) {
        EXPECT_NE(what.find(also), std::string::npos) << what;
      }
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }

  fs::path dir_;
  std::vector<uint8_t> train_images_, train_labels_, val_images_, val_labels_;
};

TEST_F(ImageDatasetTest, RoundTripsPixelsLabelsAndChecksum) {
  write_all();
  ImageDataset d = load_image_dataset(dir_.string());
  EXPECT_EQ(d.path, dir_.string());
  EXPECT_EQ(d.rows, kRows);
  EXPECT_EQ(d.cols, kCols);
  EXPECT_EQ(d.pixels_per_image(), kRows * kCols);
  EXPECT_EQ(d.classes, 5);
  EXPECT_EQ(d.count(Split::train), kTrain);
  EXPECT_EQ(d.count(Split::val), kVal);
  EXPECT_EQ(d.train_pixels, pixels_of(kTrain, 0));
  EXPECT_EQ(d.val_pixels, pixels_of(kVal, 1));
  auto as_int = [](const std::vector<uint8_t>& v) {
    return std::vector<int32_t>(v.begin(), v.end());
  };
  EXPECT_EQ(d.train_labels, as_int(labels_of(kTrain, 0)));
  EXPECT_EQ(d.val_labels, as_int(labels_of(kVal, 2)));
  EXPECT_EQ(d.checksum, fnv1a({train_images_, train_labels_, val_images_, val_labels_}));
}

TEST_F(ImageDatasetTest, ClassesCountsTheLargestLabelOfEitherSplit) {
  write_all();
  std::vector<uint8_t> labels = labels_of(kVal, 2);
  labels[3] = 254;
  write_gz(dir_ / "t10k-labels-idx1-ubyte.gz", idx_bytes(0x801, {kVal}, labels));
  EXPECT_EQ(load_image_dataset(dir_.string()).classes, 255);
}

TEST_F(ImageDatasetTest, PrefersGzippedFileWhenBothExist) {
  write_all();
  // A plain file beside the gzipped one, with other pixels: the .gz one must win.
  write_plain(dir_ / "train-images-idx3-ubyte",
              idx_bytes(0x803, {kTrain, kRows, kCols}, pixels_of(kTrain, 5)));
  EXPECT_EQ(load_image_dataset(dir_.string()).train_pixels, pixels_of(kTrain, 0));
}

TEST_F(ImageDatasetTest, AllPlainAndAllGzippedLoadTheSame) {
  write_plain(dir_ / "train-images-idx3-ubyte", train_images_);
  write_plain(dir_ / "train-labels-idx1-ubyte", train_labels_);
  write_plain(dir_ / "t10k-images-idx3-ubyte", val_images_);
  write_plain(dir_ / "t10k-labels-idx1-ubyte", val_labels_);
  ImageDataset plain = load_image_dataset(dir_.string());
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  write_gz(dir_ / "train-images-idx3-ubyte.gz", train_images_);
  write_gz(dir_ / "train-labels-idx1-ubyte.gz", train_labels_);
  write_gz(dir_ / "t10k-images-idx3-ubyte.gz", val_images_);
  write_gz(dir_ / "t10k-labels-idx1-ubyte.gz", val_labels_);
  ImageDataset gz = load_image_dataset(dir_.string());
  EXPECT_EQ(plain.train_pixels, gz.train_pixels);
  EXPECT_EQ(plain.val_pixels, gz.val_pixels);
  EXPECT_EQ(plain.train_labels, gz.train_labels);
  EXPECT_EQ(plain.val_labels, gz.val_labels);
  EXPECT_EQ(plain.checksum, gz.checksum);
}

struct Batch {
  std::vector<float> pixels;
  std::vector<int32_t> labels;
};

Batch fill(const ImageDataset& d, Split s, uint64_t seed, int64_t index, int64_t begin,
           int64_t count) {
  Batch b{std::vector<float>(size_t(count * d.pixels_per_image()), -1.0f),
          std::vector<int32_t>(size_t(count), -1)};
  fill_image_batch(d, s, seed, index, begin, count, b.pixels.data(), b.labels.data());
  return b;
}

TEST_F(ImageDatasetTest, BatchFollowsTheStatedRule) {
  write_all();
  const ImageDataset d = load_image_dataset(dir_.string());
  const int ppi = d.pixels_per_image();
  for (Split s : {Split::train, Split::val}) {
    const bool train = s == Split::train;
    const PhiloxStream rng{1234, fnv1a64(train ? "images.train" : "images.val")};
    const auto& px = train ? d.train_pixels : d.val_pixels;
    const auto& lb = train ? d.train_labels : d.val_labels;
    const int64_t index = 9;
    Batch b = fill(d, s, 1234, index, 0, 8);
    for (int i = 0; i < 8; ++i) {
      Philox4x32 r = rng.block((uint64_t(index) << 32) | uint64_t(i));
      uint64_t image = (uint64_t(r.v[0]) | (uint64_t(r.v[1]) << 32)) % uint64_t(d.count(s));
      EXPECT_EQ(b.labels[size_t(i)], lb[image]);
      for (int p = 0; p < ppi; ++p) {
        const float v = b.pixels[size_t(i * ppi + p)];
        EXPECT_EQ(v, float(px[image * size_t(ppi) + size_t(p)]) / 255.0f);
        EXPECT_GE(v, 0.0f);
        EXPECT_LE(v, 1.0f);
      }
    }
  }
}

TEST_F(ImageDatasetTest, BatchIsDeterministicAndSlicesAgree) {
  write_all();
  const ImageDataset d = load_image_dataset(dir_.string());
  const size_t ppi = size_t(d.pixels_per_image());
  Batch whole = fill(d, Split::train, 7, 3, 0, 8);
  Batch again = fill(d, Split::train, 7, 3, 0, 8);
  EXPECT_EQ(whole.pixels, again.pixels);
  EXPECT_EQ(whole.labels, again.labels);
  Batch slice = fill(d, Split::train, 7, 3, 2, 3);
  EXPECT_EQ(slice.pixels,
            std::vector<float>(whole.pixels.begin() + 2 * ppi, whole.pixels.begin() + 5 * ppi));
  EXPECT_EQ(slice.labels, std::vector<int32_t>(whole.labels.begin() + 2, whole.labels.begin() + 5));
  for (float v : whole.pixels) {
    EXPECT_GE(v, 0.0f);
    EXPECT_LE(v, 1.0f);
  }
}

TEST_F(ImageDatasetTest, IndexSeedAndSplitChangeTheSamples) {
  write_all();
  const ImageDataset d = load_image_dataset(dir_.string());
  const Batch base = fill(d, Split::train, 7, 3, 0, 8);
  EXPECT_NE(fill(d, Split::train, 7, 4, 0, 8).pixels, base.pixels);
  EXPECT_NE(fill(d, Split::train, 8, 3, 0, 8).pixels, base.pixels);
  EXPECT_NE(fill(d, Split::val, 7, 3, 0, 8).pixels, base.pixels);
}

TEST_F(ImageDatasetTest, MissingFolderIsAUsageError) {
  const std::string missing = (dir_ / "nowhere").string();
  try {
    load_image_dataset(missing);
    ADD_FAILURE() << "no UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
}

TEST_F(ImageDatasetTest, MissingFileIsAUsageError) {
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
    SCOPED_TRACE(name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write_all();
    fs::remove(dir_ / name);
    fs::remove(dir_ / (std::string(name) + ".gz"));
    expect_error(name, "does not exist");
  }
}

TEST_F(ImageDatasetTest, WrongMagicIsAUsageError) {
  write_all();
  write_gz(dir_ / "train-images-idx3-ubyte.gz",
           idx_bytes(0x801, {kTrain, kRows, kCols}, pixels_of(kTrain, 0)));
  expect_error("train-images-idx3-ubyte.gz", "0x00000803");
  write_all();
  write_plain(dir_ / "train-labels-idx1-ubyte", idx_bytes(0x803, {kTrain}, labels_of(kTrain, 0)));
  expect_error("train-labels-idx1-ubyte", "0x00000801");
  write_all();
  write_plain(dir_ / "t10k-images-idx3-ubyte", {0x12, 0x34, 0x56, 0x78, 0, 0, 0, 1});
  expect_error("t10k-images-idx3-ubyte", "magic");
}

TEST_F(ImageDatasetTest, TruncatedDataIsAUsageError) {
  // Plain, missing the last image's last pixel.
  write_all();
  std::vector<uint8_t> cut = val_images_;
  cut.pop_back();
  write_plain(dir_ / "t10k-images-idx3-ubyte", cut);
  expect_error("t10k-images-idx3-ubyte", "truncated");
  // Gzipped, header declaring more labels than follow.
  write_all();
  write_gz(dir_ / "t10k-labels-idx1-ubyte.gz", idx_bytes(0x801, {kVal + 1}, labels_of(kVal, 2)));
  expect_error("t10k-labels-idx1-ubyte.gz", "truncated");
  // Gzipped stream itself cut short.
  write_all();
  {
    std::ifstream in(dir_ / "train-images-idx3-ubyte.gz", std::ios::binary);
    std::vector<uint8_t> gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    gz.resize(gz.size() / 2);
    write_plain(dir_ / "train-images-idx3-ubyte.gz", gz);
  }
  expect_error("train-images-idx3-ubyte.gz", "truncated");
  // Header cut short.
  write_all();
  write_plain(dir_ / "train-labels-idx1-ubyte", {0, 0, 8, 1, 0, 0});
  expect_error("train-labels-idx1-ubyte", "truncated");
  // Empty file.
  write_all();
  write_plain(dir_ / "train-labels-idx1-ubyte", {});
  expect_error("train-labels-idx1-ubyte", "truncated");
}

TEST_F(ImageDatasetTest, ExtraBytesAndEmptyFilesAreUsageErrors) {
  write_all();
  std::vector<uint8_t> extra = train_labels_;
  extra.push_back(0);
  write_plain(dir_ / "train-labels-idx1-ubyte", extra);
  expect_error("train-labels-idx1-ubyte", "past");
  write_all();
  write_plain(dir_ / "t10k-images-idx3-ubyte", idx_bytes(0x803, {0, kRows, kCols}, {}));
  expect_error("t10k-images-idx3-ubyte", "no images");
}

TEST_F(ImageDatasetTest, CountMismatchIsAUsageError) {
  write_all();
  write_plain(dir_ / "train-labels-idx1-ubyte",
              idx_bytes(0x801, {kTrain - 1}, labels_of(kTrain - 1, 0)));
  expect_error("train-labels-idx1-ubyte", "train-images-idx3-ubyte.gz");
  write_all();
  write_gz(dir_ / "t10k-labels-idx1-ubyte.gz",
           idx_bytes(0x801, {kVal + 1}, labels_of(kVal + 1, 2)));
  expect_error("t10k-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte");
}

TEST_F(ImageDatasetTest, DifferingImageSizesAreAUsageError) {
  write_all();
  write_plain(dir_ / "t10k-images-idx3-ubyte",
              idx_bytes(0x803, {kVal, kCols, kRows}, pixels_of(kVal, 1)));
  expect_error("t10k-images-idx3-ubyte", "train-images-idx3-ubyte.gz");
}

TEST_F(ImageDatasetTest, Label255IsAUsageError) {
  write_all();
  std::vector<uint8_t> labels = labels_of(kTrain, 0);
  labels[5] = 255;
  write_plain(dir_ / "train-labels-idx1-ubyte", idx_bytes(0x801, {kTrain}, labels));
  expect_error("train-labels-idx1-ubyte", "255");
}

TEST(FashionMnist, RealDataHasTheKnownShape) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!fs::is_directory(dir))
    GTEST_SKIP() << dir << " is missing (Debian package dataset-fashion-mnist)";
  const ImageDataset d = load_image_dataset(dir);
  EXPECT_EQ(d.count(Split::train), 60000);
  EXPECT_EQ(d.count(Split::val), 10000);
  EXPECT_EQ(d.rows, 28);
  EXPECT_EQ(d.cols, 28);
  EXPECT_EQ(d.classes, 10);
  EXPECT_EQ(d.train_pixels.size(), size_t(60000) * 28 * 28);
  EXPECT_EQ(d.val_pixels.size(), size_t(10000) * 28 * 28);
  std::vector<int> train(10), val(10);
  for (int32_t l : d.train_labels) ++train[size_t(l)];
  for (int32_t l : d.val_labels) ++val[size_t(l)];
  EXPECT_EQ(train, std::vector<int>(10, 6000));
  EXPECT_EQ(val, std::vector<int>(10, 1000));
  Batch b = fill(d, Split::train, 1, 0, 0, 4);
  for (float v : b.pixels) {
    EXPECT_GE(v, 0.0f);
    EXPECT_LE(v, 1.0f);
  }
}

}  // namespace
