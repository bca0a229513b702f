// mpitron translate: the lines of a file through a translation checkpoint (gpt task 1), greedy or
// beam search, batched with a KV cache; the output file is written whole or not at all.
#include <fmt/format.h>

#include <cstdio>

#include "base/check.hpp"
#include "base/gemm.hpp"
#include "io/text_lines.hpp"
#include "src/cli/cli.hpp"
#include "src/model/family.hpp"
#include "src/task/translation.hpp"
#include "src/train/eval_data.hpp"

namespace mpitron::cli {

PairCodec checkpoint_pair_codec(const std::string& ckpt, const CheckpointRecord& rec,
                                const std::string& tokenizer) {
  const ModelFamily& family = model_family(rec.model.type);
  if (family.data(rec.model) != DataKind::pairs)
    throw UsageError(fmt::format(
        "{} holds a model trained on {}, not on sentence pairs: translate needs a translation "
        "checkpoint (gpt with model.task=1, configs/mt-es-en.toml)",
        ckpt, rec.model.type == "gpt" ? "text" : rec.model.type + " data"));
  std::string trained;
  int64_t trained_sum = 0;
  if (auto t = rec.data.find("tokenizer"); t != rec.data.end())
    if (const auto* s = std::get_if<std::string>(&t->second)) trained = *s;
  if (auto c = rec.data.find("tokenizer_checksum"); c != rec.data.end())
    if (const auto* v = std::get_if<int64_t>(&c->second)) trained_sum = *v;
  PairCodec codec;
  trained = kept_beside(ckpt, trained);
  const std::string path = tokenizer.empty() ? trained : tokenizer;
  if (path.empty()) return codec;  // bytes
  if (trained_sum == 0)
    throw UsageError(
        fmt::format("{} was trained on byte tokens: translate it without --tokenizer", ckpt));
  codec.spm.emplace(io::SentencePieceTokenizer::load(path));
  if (int64_t(codec.spm->checksum()) != trained_sum)
    throw UsageError(fmt::format(
        "the SentencePiece model {} is not the one {} was trained with ({}): its ids would be "
        "other words",
        path, ckpt, trained.empty() ? "recorded without a path" : trained));
  codec.tokens = {codec.spm->bos_id(), codec.spm->eos_id(), codec.spm->pad_id()};
  return codec;
}

int cmd_translate(const TranslateArgs& a) {
  if (a.in.empty() || a.out.empty()) throw UsageError("translate needs --in and --out");
  const int cores = cpu::usable_cores();
  cpu::set_compute_threads(cpu::default_compute_threads(cores, cores, 1).threads);
  const CheckpointRecord rec = read_checkpoint_record(a.ckpt);
  const PairCodec codec = checkpoint_pair_codec(a.ckpt, rec, a.tokenizer);
  const std::vector<std::string> lines = io::read_lines(a.in, "--in");
  for (size_t k = 0; k < lines.size(); ++k)
    if (lines[k].find_first_not_of(" \t") == std::string::npos)
      throw UsageError(fmt::format("{}:{}: an empty line (one sentence a line)", a.in, k + 1));
  TranslateOptions o;
  o.batch = a.batch_size;
  o.beam = a.beam;
  o.cache = !a.no_cache;
  if (o.batch < 1 || o.beam < 1) throw UsageError("--batch-size and --beam must be at least 1");
  // The sequences training saw: its seq_len (position embeddings past it were never trained).
  const int T = rec.seq_len > 0 ? int(rec.seq_len) : int(rec.model.get("block_size"));
  o.window = T;
  DeviceAllocator alloc{"cpu"};
  std::unique_ptr<Model> model =
      load_for_inference(a.ckpt, rec, o.cache ? 1 : o.batch, o.cache ? 0 : T, alloc);
  auto* gpt = dynamic_cast<GptModel*>(model.get());
  MPITRON_REQUIRE(gpt != nullptr, "a translation checkpoint builds a GPT");
  TranslateStats st;
  const std::vector<std::string> out = translate_lines(*gpt, codec, lines, o, &st);
  io::write_lines(a.out, out);
  fmt::print("wrote {}: {} lines, {} new tokens in {:.2f} s ({:.0f} tokens/s; {}, batch {}{})\n",
             a.out, st.lines, st.new_tokens, st.seconds,
             double(st.new_tokens) / std::max(st.seconds, 1e-9),
             o.beam > 1 ? fmt::format("beam {}", o.beam) : "greedy", o.batch,
             o.cache ? ", KV cache" : ", no cache: the whole prefix each step");
  if (st.cut_sources > 0)
    fmt::print(
        "note: {} source line(s) longer than {} tokens were cut to their first {} (half "
        "the {} tokens training's sequences held: the rest is room for the translation)\n",
        st.cut_sources, (T - 1) / 2, (T - 1) / 2, T);
  if (st.cut_targets > 0)
    fmt::print(
        "note: {} translation(s) reached the {} tokens of a sequence before their end and "
        "stop there\n",
        st.cut_targets, T);
  return 0;
}

}  // namespace mpitron::cli
