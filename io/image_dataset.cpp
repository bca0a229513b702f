#include "io/image_dataset.hpp"

#include <fmt/format.h>
#include <zlib.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>

#include "base/check.hpp"
#include "base/philox.hpp"

namespace mpitron::io {

namespace {

namespace fs = std::filesystem;

constexpr uint32_t kImagesMagic = 0x00000803;  // unsigned bytes, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;  // unsigned bytes, 1 dimension
constexpr size_t kImagesHeader = 16, kLabelsHeader = 8;

struct IdxFile {
  std::string path;
  std::vector<uint8_t> bytes;  // decompressed, header included
  uint32_t count = 0, rows = 0, cols = 0;
};

// DIR/NAME.gz, else DIR/NAME.
std::string find_file(const fs::path& dir, const std::string& name) {
  const fs::path gz = dir / (name + ".gz"), plain = dir / name;
  if (fs::is_regular_file(gz)) return gz.string();
  if (fs::is_regular_file(plain)) return plain.string();
  throw UsageError(
      fmt::format("image data file '{}' does not exist (nor with .gz)", plain.string()));
}

// The whole decompressed content: zlib reads gzipped and plain files alike.
std::vector<uint8_t> read_file(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f)
    throw UsageError(
        fmt::format("image data file '{}' cannot be opened: {}", path, std::strerror(errno)));
  gzbuffer(f, 1 << 17);
  std::vector<uint8_t> out;
  constexpr size_t kChunk = size_t(1) << 20;
  int err = Z_OK;
  for (;;) {
    const size_t have = out.size();
    out.resize(have + kChunk);
    const int got = gzread(f, out.data() + have, unsigned(kChunk));
    out.resize(have + size_t(got > 0 ? got : 0));
    if (got <= 0) break;
  }
  std::string reason = gzerror(f, &err);
  if (reason.starts_with(path + ": ")) reason.erase(0, path.size() + 2);  // zlib prefixes the path
  gzclose(f);
  if (err == Z_BUF_ERROR)  // the gzip stream ends early
    throw UsageError(fmt::format("image data file '{}' is truncated ({})", path, reason));
  if (err != Z_OK)
    throw UsageError(fmt::format("image data file '{}' cannot be read: {}", path,
                                 err == Z_ERRNO ? std::strerror(errno) : reason));
  return out;
}

uint32_t big_endian32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

// Checks the header against the kind and the data length; fills count (and rows, cols).
void parse_header(IdxFile& f, bool images) {
  const size_t header = images ? kImagesHeader : kLabelsHeader;
  const uint32_t magic = images ? kImagesMagic : kLabelsMagic;
  const char* kind = images ? "images" : "labels";
  if (f.bytes.size() < header && (f.bytes.size() < 4 || big_endian32(f.bytes.data()) == magic))
    throw UsageError(fmt::format("image data file '{}' is truncated: {} bytes, its header is {}",
                                 f.path, f.bytes.size(), header));
  if (big_endian32(f.bytes.data()) != magic)
    throw UsageError(
        fmt::format("image data file '{}' has magic number 0x{:08x}, expected 0x{:08x} (IDX {})",
                    f.path, big_endian32(f.bytes.data()), magic, kind));
  f.count = big_endian32(f.bytes.data() + 4);
  uint64_t item = 1;
  if (images) {
    f.rows = big_endian32(f.bytes.data() + 8);
    f.cols = big_endian32(f.bytes.data() + 12);
    item = uint64_t(f.rows) * f.cols;
    if (item == 0 || item > uint64_t(INT_MAX))
      throw UsageError(
          fmt::format("image data file '{}' has images of {}x{} pixels", f.path, f.rows, f.cols));
  }
  if (f.count == 0) throw UsageError(fmt::format("image data file '{}' holds no {}", f.path, kind));
  const uint64_t need = uint64_t(f.count) * item, have = f.bytes.size() - header;
  if (have < need)
    throw UsageError(fmt::format(
        "image data file '{}' is truncated: its header declares {} {} ({} bytes) but {} follow",
        f.path, f.count, kind, need, have));
  if (have > need)
    throw UsageError(fmt::format("image data file '{}' has {} byte{} past the {} {} it declares",
                                 f.path, have - need, have - need == 1 ? "" : "s", f.count, kind));
}

uint64_t fnv1a64_bytes(uint64_t h, const std::vector<uint8_t>& bytes) {
  for (uint8_t b : bytes) h = (h ^ b) * 1099511628211ull;
  return h;
}

}  // namespace

int64_t ImageDataset::count(Split s) const {
  return int64_t(s == Split::train ? train_labels.size() : val_labels.size());
}

ImageDataset load_image_dataset(const std::string& dir) {
  if (const std::string why = wrong_kind_of_path(dir, true); !why.empty())
    throw UsageError(fmt::format(
        "image data folder '{}' {} (a folder of IDX files, {{train,t10k}}-{{images-idx3,"
        "labels-idx1}}-ubyte[.gz])",
        dir, why));
  // Every file is looked up before any is read, so a missing one is reported first and cheaply.
  const std::string names[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
  std::string paths[4];
  for (int k = 0; k < 4; ++k) paths[k] = find_file(dir, names[k]);

  ImageDataset d;
  d.path = dir;
  uint64_t h = 1469598103934665603ull;
  int max_label = -1;
  IdxFile last_images;  // the images the next labels must match
  for (int k = 0; k < 4; ++k) {
    const bool images = k % 2 == 0, train = k < 2;
    IdxFile f{paths[k], read_file(paths[k])};
    h = fnv1a64_bytes(h, f.bytes);
    parse_header(f, images);
    if (images) {
      if (train) {
        d.rows = int(f.rows);
        d.cols = int(f.cols);
      } else if (int(f.rows) != d.rows || int(f.cols) != d.cols) {
        throw UsageError(
            fmt::format("image data files '{}' and '{}' differ in image size: {}x{} against {}x{}",
                        last_images.path, f.path, d.rows, d.cols, f.rows, f.cols));
      }
      f.bytes.erase(f.bytes.begin(), f.bytes.begin() + kImagesHeader);
      (train ? d.train_pixels : d.val_pixels) = std::move(f.bytes);
      last_images = IdxFile{f.path, {}, f.count, f.rows, f.cols};
      continue;
    }
    if (f.count != last_images.count)
      throw UsageError(fmt::format("image data files '{}' and '{}' disagree: {} images, {} labels",
                                   last_images.path, f.path, last_images.count, f.count));
    std::vector<int32_t>& labels = train ? d.train_labels : d.val_labels;
    labels.resize(f.count);
    for (size_t i = 0; i < f.count; ++i) {
      const uint8_t label = f.bytes[kLabelsHeader + i];
      if (label > 254)
        throw UsageError(
            fmt::format("image data file '{}' has label {} at item {} (labels must be 0..254)",
                        f.path, label, i));
      labels[i] = label;
      if (label > max_label) max_label = label;
    }
  }
  d.classes = max_label + 1;
  d.checksum = h;
  return d;
}

namespace {

// Image `image` of a split into out (rows*cols floats, byte / 255) and its label.
void copy_image(const ImageDataset& data, Split split, uint64_t image, float* out, int32_t* label) {
  const bool train = split == Split::train;
  const size_t ppi = size_t(data.pixels_per_image());
  const uint8_t* in = (train ? data.train_pixels : data.val_pixels).data() + image * ppi;
  for (size_t p = 0; p < ppi; ++p) out[p] = float(in[p]) / 255.0f;
  *label = (train ? data.train_labels : data.val_labels)[image];
}

}  // namespace

void fill_image_batch(const ImageDataset& data, Split split, uint64_t seed, int64_t index,
                      int64_t sample_begin, int64_t count, float* pixels, int32_t* labels) {
  const int64_t n = data.count(split);
  MPITRON_REQUIRE(n > 0, "fill_image_batch on a split with no images");
  const PhiloxStream rng{seed, fnv1a64(split == Split::train ? "images.train" : "images.val")};
  const size_t ppi = size_t(data.pixels_per_image());
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t sample = uint64_t(sample_begin + i);
    const Philox4x32 r = rng.block((uint64_t(index) << 32) | sample);
    const uint64_t image = (uint64_t(r.v[0]) | (uint64_t(r.v[1]) << 32)) % uint64_t(n);
    copy_image(data, split, image, pixels + size_t(i) * ppi, labels + i);
  }
}

void fill_image_rows(const ImageDataset& data, Split split, int64_t first, int64_t count,
                     float* pixels, int32_t* labels) {
  MPITRON_REQUIRE(first >= 0 && count >= 0 && first + count <= data.count(split),
                  "images outside the split");
  const size_t ppi = size_t(data.pixels_per_image());
  for (int64_t i = 0; i < count; ++i)
    copy_image(data, split, uint64_t(first + i), pixels + size_t(i) * ppi, labels + i);
}

void augment_images(float* pixels, int64_t count, int rows, int cols, int pad, uint64_t seed,
                    int64_t step, int64_t sample_begin) {
  const PhiloxStream rng{seed, fnv1a64("images.augment")};
  std::vector<float> copy(size_t(rows) * cols);
  const uint32_t span = uint32_t(2 * pad + 1);
  for (int64_t i = 0; i < count; ++i) {
    const Philox4x32 r = rng.block((uint64_t(step) << 32) | uint64_t(sample_begin + i));
    const int dy = int(r.v[0] % span) - pad, dx = int(r.v[1] % span) - pad;
    const bool flip = (r.v[2] & 1u) != 0;
    float* img = pixels + size_t(i) * rows * cols;
    std::copy(img, img + copy.size(), copy.begin());
    for (int y = 0; y < rows; ++y)
      for (int x = 0; x < cols; ++x) {
        const int sy = y + dy, sx0 = x + dx, sx = flip ? cols - 1 - sx0 : sx0;
        const bool inside = sy >= 0 && sy < rows && sx0 >= 0 && sx0 < cols;
        img[size_t(y) * cols + x] = inside ? copy[size_t(sy) * cols + sx] : 0.0f;
      }
  }
}

}  // namespace mpitron::io
