// Hugging Face BERT <-> mpitron's "bert" family: the half of `mpitron import`, `export` and
// `train --init-from` that src/train/pretrained.cpp dispatches to when config.json says
// model_type "bert". Names are HF's without the "bert." prefix (old LayerNorm gamma/beta read as
// weight/bias); linear weights are (out, in) on both sides, so nothing is transposed.
//   BertForMaskedLM, BertForPreTraining  -> task 0 (masked LM; the decoder must be tied to the
//                                           word embeddings; pooler and cls.seq_relationship.*
//                                           are not imported, with a note)
//   BertForSequenceClassification        -> task 1 (2 labels; the same parameters serve task 2)
//   BertModel (no head)                  -> refused by import; `train --init-from` takes it and
//                                           starts the run's head fresh
// Special ids come from vocab.txt beside config.json, else [PAD] = pad_token_id and
// [UNK] [CLS] [SEP] [MASK] = 100..103 (bert-base's vocabulary), said in a note.
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include "io/checkpoint.hpp"
#include "src/model/config.hpp"

namespace mpitron {

// The mpitron bert config of a HF BERT source (folder or .safetensors file): config.json's shape,
// the task of the head its weights hold (0 for a bare BertModel), the special ids. UsageError
// naming the key for what mpitron's encoder does not compute: hidden_act other than "gelu" (the
// erf GELU), layer_norm_eps other than 1e-12, intermediate_size other than 4 * hidden_size,
// position_embedding_type other than "absolute", is_decoder or add_cross_attention true, a label
// count other than 2 where the weights hold a classifier.
ModelConfig hf_bert_model_config(const std::string& source);

// `mpitron import --plan` of a BERT: the header's tensors and their mpitron names, what is not
// imported and why, the special ids and their origin, the model config. Reads no tensor data.
void print_bert_import_plan(const std::string& from, std::ostream& out);

// `mpitron import` of a BERT: the checkpoint as import_hf writes it; notes (special ids, tensors
// left out) to `notes`. UsageError for a bare BertModel, a missing, misshapen or unexpected
// tensor, a decoder that is not the word embeddings, a decoder bias that is not
// cls.predictions.bias, a truncated file.
void import_hf_bert(const std::string& from, const std::string& out_checkpoint,
                    std::ostream& notes);

// config.json of an mpitron bert (BertForMaskedLM for task 0, BertForSequenceClassification with
// 2 labels otherwise), as transformers' BertConfig writes it.
std::string hf_bert_config_json(const ModelConfig& model);

// `mpitron export` of a bert checkpoint: DIR/model.safetensors (F32, the encoder and pooler
// under "bert.", the heads as HF names them, the tied decoder left out as transformers leaves it
// out) and DIR/config.json. vocab.txt is not written: the special ids other than [PAD] come back
// on import from the tokenizer's vocab.txt copied beside it (or are bert-base's 100..103).
void export_hf_bert(const std::string& checkpoint, const std::string& out_dir);

// `train --init-from` a HF BERT: fills the pieces the file holds after checking the model equals
// `model` (pretrained_mismatch); the run's head parameters the file lacks (another task's head,
// a bare BertModel) keep their initialisation and are returned. UsageError for a missing encoder
// tensor, a shape or tied decoder as import refuses them.
std::vector<std::string> load_hf_bert_parameters(const std::string& source,
                                                 const ModelConfig& model,
                                                 const std::vector<io::TensorPiece>& pieces);

}  // namespace mpitron
