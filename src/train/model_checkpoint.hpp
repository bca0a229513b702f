// What a checkpoint says about its run, written and parsed in this one place: the model (type and
// shape keys), the step, the seed, the layout that wrote it and the schedule settings; and the
// tensors: /params/<name> and /buffers/<name> at global shapes, /optim/<name>/{m,v} from each
// rank's ZeRO shard (or, 8-bit AdamW, /optim8bit/pp<s>_tp<t>/*). Used by the trainer, `eval` and
// `generate`.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/checkpoint.hpp"
#include "src/model/model.hpp"
#include "src/train/grad_sync.hpp"

namespace mpitron {

inline constexpr int64_t kCheckpointFormat = 1;

struct CheckpointRecord {
  ModelConfig model;
  int64_t step = 0;
  int64_t tokens_seen = 0;  // loss terms seen: tokens for text, samples for images
  int64_t seed = 0;
  int64_t dp = 1, tp = 1, pp = 1, zero = 0;
  double lr = 0;
  int64_t steps = 0, batch_size = 0, seq_len = 0;
  int64_t eval_batches = 0;  // global batches per validation (0: not recorded)
  io::Attributes data;       // the /data group: path, size, checksum, next_step
  std::string data_path;     // data.path, "" when not recorded
  // An imported checkpoint's tokenizer folder (the files beside its weights); "" when none known.
  std::string tokenizer;
  // What gives the run its meaning (run_settings): root attributes, compared on resume.
  io::Attributes settings;
  // Dynamic loss scaling's state after `step` (0: the run does not scale).
  double loss_scale = 0;
  int64_t loss_scale_clean_steps = 0;
  std::string optimizer = "adamw";  // --optimizer (older checkpoints: adamw)
  // adamw8bit: the blocks of each virtual stage ("2,2"; "" without pipeline blocks), which with
  // tp and pp fix every parameter's flat position, hence its 8-bit block.
  std::string adamw8bit_stage_blocks;
  // adamw8bit: each (stage, TP rank)'s flat parameter count (Trainer::adamw8bit_flat_sizes; ""
  // in checkpoints written before it was recorded).
  std::string adamw8bit_flat_sizes;
};

// The settings a resumed run must keep to continue the same run: the preset's name, the
// optimizer and schedule (train.lr, min_lr_ratio, warmup_steps, steps, weight_decay, beta1,
// beta2, eps, grad_clip), the batch (train.batch_size, seq_len), dropout and the seed.
io::Attributes run_settings(const RunConfig& cfg);

// "train.lr 0.001 -> 0.002" for each setting both hold with different values (a checkpoint from
// an older writer holds fewer; the missing ones are not compared).
std::vector<std::string> setting_changes(const io::Attributes& before, const io::Attributes& now);

// model.type and model.<key>, as checkpoints and traces carry them.
io::Attributes model_attributes(const ModelConfig& m);

// Root attributes and groups of a checkpoint.
io::Attributes checkpoint_root_attributes(const CheckpointRecord& r);
std::map<std::string, io::Attributes> checkpoint_groups(const CheckpointRecord& r);

// UsageError naming the file when it is missing, not HDF5, or not an mpitron checkpoint of this
// format.
CheckpointRecord read_checkpoint_record(const std::string& path);

// UsageError ("another model shape") when the checkpoint's model differs from m.
void check_same_model(const CheckpointRecord& r, const ModelConfig& m, const std::string& path);

// The hyperslab blocks of p's global tensor that hold its local elements [local_begin,
// local_end) (row-major over p.local_shape), in local order: the blocks' elements, one block
// after another and each block row-major (the io::TensorPiece contract), are exactly those local
// elements, less trailing padding (ShardSpec::tp_pad), which is never checkpointed. So a piece's
// data still points at local element local_begin. Along a strided tp_dim blocks are split at part
// boundaries (a block spanning several rows above tp_dim is first cut into single rows). With
// tp == 1 and no padding, or tp_dim < 0, this is io::flat_range_blocks(p.global_shape,
// local_begin, local_end).
// Requires local_begin <= local_end <= p.numel.
std::vector<io::Block> shard_blocks(const ParamInfo& p, size_t local_begin, size_t local_end);

// Parameters and buffers at global shapes, with this rank's blocks when with_blocks (reading:
// every rank; writing: one DP replica, so each element is written once). With
// replicas_write_once, tensors replicated over TP (shard.tp_dim < 0) get no blocks on TP ranks
// other than 0, so one copy is written (writing; reading passes false: every rank reads all it
// holds), and the tied embedding gets none on the last pipeline stage (the first writes it).
// TP-split tensors get shard_blocks of the whole local tensor.
std::vector<io::TensorPiece> parameter_pieces(const ParamRegistry& reg, float* params,
                                              float* buffers, bool with_blocks,
                                              bool replicas_write_once = false);
std::vector<io::TensorPiece> parameter_pieces(Model& model, bool with_blocks,
                                              bool replicas_write_once = false);
// AdamW moments of the shard this rank holds (m and v indexed from shard.begin, a flat range of
// reg's parameter allocation cut anywhere); blocks as above, shard_blocks of each parameter's
// part of the range.
std::vector<io::TensorPiece> moment_pieces(const ParamRegistry& reg, ShardRange shard, float* m,
                                           float* v, bool with_blocks,
                                           bool replicas_write_once = false);

// One rank's 8-bit AdamW state: the flat range `shard` of its stage's parameter allocation, in
// whole blocks of kAdamW8bitBlock (codes per element, absmax values per block, from shard.begin).
struct AdamW8bitShard {
  ShardRange shard;
  uint8_t *m_codes, *v_codes;
  float *m_absmax, *v_absmax;
};

// The group of the 8-bit AdamW state of pipeline stage pp_rank at TP rank tp_rank: its blocks are
// positions of that rank's flat allocation, so the state is stored per (stage, TP rank), flat.
std::string adamw8bit_group(int pp_rank, int tp_rank);

// The datasets of one (stage, TP rank)'s 8-bit AdamW state under group: {m,v}_codes (uint8,
// `elements`, a multiple of kAdamW8bitBlock: the registry's size in whole blocks; the flat
// allocation's padding past it is zero state, not stored) and {m,v}_absmax (float32, one per
// block). With `mine`, blocks and data of its shard's part below `elements`; without, none.
std::vector<io::TensorPiece> adamw8bit_pieces(const std::string& group, size_t elements,
                                              const AdamW8bitShard* mine);

// The pieces of a checkpoint write in the order of `whole`, the registry of the whole network
// (every stage): this rank's pieces (parameter_pieces, then moment_pieces when with_moments) where
// its stage holds the tensor, pieces without blocks elsewhere, so that every pipeline stage passes
// every dataset to the collective io::write_checkpoint.
std::vector<io::TensorPiece> pieces_for_every_stage(std::vector<io::TensorPiece> local,
                                                    const ParamRegistry& whole, bool with_moments);

// A model of the checkpoint's shape (read_checkpoint_record(path).model), its parameters and
// buffers loaded from path (eval, generate).
std::unique_ptr<Model> load_model(const std::string& path, const ModelConfig& model,
                                  ModelBuild how);

}  // namespace mpitron
