// Labelled images in IDX files (LeCun's MNIST format, as Fashion-MNIST ships them), the image twin
// of dataset.hpp: the batch of a step is a pure function of (seed, split, index), so any DP rank
// or micro-batch draws exactly its slice of it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/dataset.hpp"

namespace mpitron::io {

// The training split is train-*, validation is t10k-*. Pixels are bytes; batches hand them out as
// floats in [0, 1].
struct ImageDataset {
  std::string path;                               // the folder
  int rows = 0, cols = 0;                         // image size (28 x 28)
  int classes = 0;                                // 1 + largest label seen (10)
  std::vector<uint8_t> train_pixels, val_pixels;  // (n, rows*cols)
  std::vector<int32_t> train_labels, val_labels;  // (n)
  // FNV-1a 64 over the decompressed bytes of the four files, in the order train images, train
  // labels, t10k images, t10k labels.
  uint64_t checksum = 0;

  int64_t count(Split s) const;
  int pixels_per_image() const { return rows * cols; }
};

// Reads DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte, each either gzipped (".gz" suffix) or
// plain (.gz preferred when both exist). UsageError with one line naming the file for: a missing
// folder or file, a wrong magic number (0x00000803 images, 0x00000801 labels), truncated data or
// bytes past the declared data, an empty file, image/label count mismatch, differing image sizes
// between train and t10k, a label > 254.
ImageDataset load_image_dataset(const std::string& dir);

// Writes samples [sample_begin, sample_begin + count) of batch `index` of a split (the step for
// training, the evaluation batch for validation): pixels is (count, rows*cols) as byte / 255,
// labels is (count). Sample i is image (Philox draw keyed by (seed, split, (index << 32) | i))
// modulo count(split).
void fill_image_batch(const ImageDataset& data, Split split, uint64_t seed, int64_t index,
                      int64_t sample_begin, int64_t count, float* pixels, int32_t* labels);

// Images [first, first + count) of a split in file order: pixels (count, rows*cols) as byte / 255.
void fill_image_rows(const ImageDataset& data, Split split, int64_t first, int64_t count,
                     float* pixels, int32_t* labels);

// Training augmentation in place (Krizhevsky et al. 2012; the usual CIFAR recipe): each image is
// shifted by (dy, dx) in [-pad, pad] with zeros coming in (a random crop of the zero-padded image)
// and mirrored left-right with probability 1/2, drawn from Philox keyed by (seed, step, global
// sample), so every layout sees the same pixels. pixels is (count, rows*cols).
void augment_images(float* pixels, int64_t count, int rows, int cols, int pad, uint64_t seed,
                    int64_t step, int64_t sample_begin);

}  // namespace mpitron::io
