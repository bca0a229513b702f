// load_for_inference and evaluate_split (eval_data.hpp): the loop of mpitron eval over validation
// batches, as a function a test can call.
#include "src/train/eval_data.hpp"

#include <algorithm>
#include <cctype>
#include <string>

#include "io/dataset.hpp"
#include "src/model/family.hpp"

namespace mpitron {

std::unique_ptr<Model> load_for_inference(const std::string& ckpt, const CheckpointRecord& rec,
                                          int rows, int seq_len, DeviceAllocator& alloc) {
  ModelBuild how;
  how.micro_rows = rows;
  how.seq_len = seq_len;
  how.alloc = &alloc;
  return load_model(ckpt, rec.model, how);
}

EvalTotals evaluate_split(Model& model, BatchSource& data, int classes, const EvalPlan& plan) {
  const DataKind kind = data.kind;
  const bool text = !is_labelled_data(kind);
  const int K = classes, T = plan.seq_len, batch_size = plan.batch_size;
  EvalTotals t;
  t.confusion.assign(text ? 0 : size_t(K) * K, 0);
  t.split_samples = kind == DataKind::images   ? data.images.count(io::Split::val)
                    : kind == DataKind::verses ? int64_t(data.verses.val.size())
                                               : 0;
  t.batches =
      plan.whole_split ? int((t.split_samples + batch_size - 1) / batch_size) : plan.batches;
  for (int b = 0; b < t.batches; ++b) {
    int rows = batch_size;
    if (plan.whole_split) {
      rows = int(std::min<int64_t>(batch_size, t.split_samples - int64_t(b) * batch_size));
      if (kind == DataKind::verses)
        io::fill_verse_rows(data.verses, data.verse_task, data.verse_tokens, io::Split::val,
                            int64_t(b) * batch_size, rows, T, data.tokens.data(),
                            data.labels.data());
      else
        io::fill_image_rows(data.images, io::Split::val, int64_t(b) * batch_size, rows,
                            data.features.data(), data.labels.data());
    } else {
      data.fill(io::Split::val, plan.seed, b, 0, batch_size);
    }
    t.samples += rows;
    MicroBatch mb;
    mb.samples = data.view(0, rows);
    t.loss_sum += model.forward(mb);
    if (mb.samples.loss_spans) {  // pairs, span corruption
      for (int r = 0; r < rows; ++r)
        t.loss_terms += mb.samples.loss_spans[2 * r + 1] - mb.samples.loss_spans[2 * r];
    } else {
      t.loss_terms += int64_t(rows) * model.loss_terms_per_sample();
    }
    if (!is_labelled_data(kind)) continue;
    const ModelOutput out = model.output(0);
    for (int r = 0; r < rows; ++r) {
      const float* row = out.logits + size_t(r) * K;
      const int pred = int(std::max_element(row, row + K) - row);
      t.confusion[size_t(mb.samples.labels[r]) * K + pred] += 1;
      t.correct += pred == mb.samples.labels[r];
    }
  }
  return t;
}

std::vector<std::string> class_names(const ModelConfig& model, const std::string& data_path,
                                     int classes) {
  const ModelFamily& family = model_family(model.type);
  std::vector<std::string> names;
  if (family.class_names) names = family.class_names(model);
  if (names.size() != size_t(classes)) names.clear();
  std::string lower = data_path;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  if (names.empty() && classes == 10 && lower.find("fashion") != std::string::npos)
    names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
             "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  if (names.empty())
    for (int k = 0; k < classes; ++k) names.push_back(std::to_string(k));
  return names;
}

}  // namespace mpitron
