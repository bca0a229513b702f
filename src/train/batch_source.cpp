#include "src/train/batch_source.hpp"

#include <fmt/format.h>

namespace mpitron {

BatchSource BatchSource::load(DataKind kind, const std::string& path, int seq_len, int64_t capacity,
                              DeviceAllocator& alloc) {
  BatchSource s;
  s.kind = kind;
  s.capacity = capacity;
  if (kind == DataKind::text) {
    s.seq_len = seq_len;
    s.text = io::load_text_dataset(path, seq_len);
    s.tokens = Buffer<int32_t>(alloc, size_t(capacity) * (seq_len + 1));
  } else {
    s.images = io::load_image_dataset(path);
    s.features = Buffer<float>(alloc, size_t(capacity) * s.images.pixels_per_image());
    s.labels = Buffer<int32_t>(alloc, size_t(capacity));
  }
  return s;
}

void BatchSource::fill(io::Split split, uint64_t seed, int64_t index, int64_t first_row,
                       int64_t rows) {
  if (kind == DataKind::text)
    io::fill_batch(text, split, seed, index, first_row, rows, seq_len, tokens.data());
  else
    io::fill_image_batch(images, split, seed, index, first_row, rows, features.data(),
                         labels.data());
  if (kind == DataKind::images && augment && split == io::Split::train)
    io::augment_images(features.data(), rows, images.rows, images.cols, 2, seed, index, first_row);
}

SampleView BatchSource::view(int64_t local_row, int rows) const {
  SampleView v;
  v.rows = rows;
  if (kind == DataKind::text) {
    v.tokens = tokens.data() + local_row * (seq_len + 1);
  } else {
    v.features = features.data() + local_row * images.pixels_per_image();
    v.labels = labels.data() + local_row;
  }
  return v;
}

uint64_t BatchSource::checksum() const {
  return kind == DataKind::text ? text.checksum : images.checksum;
}

io::Attributes BatchSource::attributes() const {
  if (kind == DataKind::text && text.is_tokens())
    return {{"path", text.path},
            {"tokens", int64_t(text.size())},
            {"vocab_size", text.vocab_size},
            {"checksum", int64_t(text.checksum)}};
  if (kind == DataKind::text)
    return {{"path", text.path},
            {"bytes", int64_t(text.bytes.size())},
            {"checksum", int64_t(text.checksum)}};
  return {{"path", images.path},
          {"images", images.count(io::Split::train) + images.count(io::Split::val)},
          {"checksum", int64_t(images.checksum)}};
}

std::string BatchSource::describe() const {
  if (kind == DataKind::text && text.is_tokens())
    return fmt::format("data {} ({} tokens, vocabulary {})", text.path, text.size(),
                       text.vocab_size);
  if (kind == DataKind::text)
    return fmt::format("data {} ({} bytes)", text.path, text.bytes.size());
  return fmt::format("data {} ({} training and {} validation images of {}x{}, {} classes)",
                     images.path, images.count(io::Split::train), images.count(io::Split::val),
                     images.rows, images.cols, images.classes);
}

}  // namespace mpitron
