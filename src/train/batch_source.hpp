// This rank's part of each global batch, for whichever data a model family reads (text, images
// or verses): the batch of step s is a pure function of (seed, s), and a rank fills only its rows
// [first_row, first_row + rows), so every layout sees the baseline's samples.
#pragma once
#include <cstdint>
#include <string>

#include "base/allocator.hpp"
#include "io/dataset.hpp"
#include "io/h5.hpp"
#include "io/image_dataset.hpp"
#include "io/pair_dataset.hpp"
#include "io/span_corruption.hpp"
#include "io/verse_dataset.hpp"
#include "src/model/family.hpp"
#include "src/model/model.hpp"

namespace mpitron {

struct BatchSource {
  DataKind kind = DataKind::text;
  io::TextDataset text;
  io::ImageDataset images;
  io::VerseDataset verses;
  io::VerseTask verse_task = io::VerseTask::testament;
  io::VerseTokens verse_tokens;
  io::PairDataset pairs;
  int seq_len = 0;       // text and verses: tokens per sample
  int64_t capacity = 0;  // rows the buffers hold
  Buffer<int32_t>
      tokens;  // text: (capacity, seq_len + 1); verses: (capacity, seq_len + 1) ids, label
  Buffer<float> features;        // images: (capacity, pixels)
  Buffer<int32_t> labels;        // images and verses: (capacity)
  Buffer<int32_t> spans;         // pairs and span corruption: (capacity, 2) loss spans
  bool span_corruption = false;  // text: io/span_corruption.hpp's samples instead of windows
  io::SpanOptions span_options;  // span corruption: names, and the window of words around them
  io::SpanDocuments span_train, span_val;  // span corruption: each split's documents
  const io::SpanDocuments& span_docs(io::Split s) const {
    return s == io::Split::train ? span_train : span_val;
  }
  bool augment = false;  // images: crop and flip training batches (io::augment_images)

  // Loads the data a model reads; UsageError when missing or unfit (too short, ...). tokenizer:
  // verses, a BERT WordPiece vocabulary to encode them with ("": bytes), whose special ids must be
  // the model's; pairs, a SentencePiece model ("": bytes). objective: train.objective
  // ("next_token"; "span_corruption" and "name_span_corruption": gpt on text, vocab_size the
  // data's + 3 special tokens).
  static BatchSource load(const ModelConfig& model, const std::string& path, int seq_len,
                          int64_t capacity, DeviceAllocator& alloc,
                          const std::string& tokenizer = "",
                          const std::string& objective = "next_token", int span_context_words = 0,
                          const std::string& span_loss = "all", double span_drop_words = 0);
  // Rows [first_row, first_row + rows) of batch `index` of a split, into buffer rows [0, rows),
  // each of row_len tokens (+1): pairs may take fewer than seq_len (batch_seq_len), other data
  // seq_len alone (0: seq_len).
  void fill(io::Split split, uint64_t seed, int64_t index, int64_t first_row, int64_t rows,
            int row_len = 0);
  // Pairs in length buckets (pairs.train_buckets), training batches: the positions the whole batch
  // `index` (rows_global rows) needs, a multiple of 8; every rank computes it alike. Else seq_len.
  int batch_seq_len(io::Split split, uint64_t seed, int64_t index, int64_t rows_global) const;
  int filled_seq_len = 0;  // the last fill's row_len
  // The loss terms of the whole batch `index` of a split (rows_global rows): per_sample each, or
  // (pairs, span corruption) the sum of the rows' spans, which every rank computes alike without
  // a message.
  int64_t loss_terms(io::Split split, uint64_t seed, int64_t index, int64_t rows_global,
                     int64_t per_sample) const;
  // Buffer rows [local_row, local_row + rows).
  SampleView view(int64_t local_row, int rows) const;
  // What a checkpoint records of the data: path, size, checksum.
  io::Attributes attributes() const;
  uint64_t checksum() const;
  std::string describe() const;  // for the start-up line
  // Classifiers: the largest class's share of the validation split, what always predicting it
  // would score (pairs: 0.5, a fair coin picks each row's partner); NaN for text.
  double majority_share() const;
};

// UsageError naming the --set flags to give when a model with special-token keys (bert) has other
// ids than the WordPiece vocabulary in folder `tokenizer` (what: where the tokens come from).
void require_vocabulary_special_ids(const std::string& tokenizer, const ModelConfig& model,
                                    const std::string& what);

}  // namespace mpitron
