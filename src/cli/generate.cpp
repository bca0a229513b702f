// mpitron generate: text from a checkpoint, one token at a time, printed as it comes; the
// sampling itself is sample_token (src/train/sampling.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/check.hpp"
#include "base/gemm.hpp"
#include "base/philox.hpp"
#include "src/cli/cli.hpp"
#include "src/model/family.hpp"
#include "src/train/eval_data.hpp"
#include "src/train/sampling.hpp"

namespace mpitron::cli {

int cmd_generate(const GenerateArgs& a) {
  const std::string& ckpt = a.ckpt;
  const std::string& prompt = a.prompt;
  const int tokens = a.tokens, top_k = a.top_k;
  const double temperature = a.temperature, top_p = a.top_p;
  const uint64_t seed = a.seed;
  const std::string& tokenizer_dir = a.tokenizer;
  if (tokens < 0) throw UsageError("--tokens must not be negative");
  if (!(top_p > 0 && top_p <= 1)) throw UsageError("--top-p must be in (0, 1]");
  if (top_k < 0) throw UsageError("--top-k must not be negative (0: no limit)");
  if (!(temperature >= 0 && std::isfinite(temperature)))
    throw UsageError("--temperature must be a finite number >= 0 (0: greedy)");
  const int cores = cpu::usable_cores();
  cpu::set_compute_threads(cpu::default_compute_threads(cores, cores, 1).threads);
  const CheckpointRecord rec = read_checkpoint_record(ckpt);
  const ModelFamily& family = model_family(rec.model.type);
  if (!family.generates)
    throw UsageError(fmt::format("{} holds a '{}' model, which does not generate text (use eval)",
                                 ckpt, rec.model.type));
  if (family.data(rec.model) == DataKind::pairs)
    throw UsageError(
        fmt::format("{} is a translation model (trained on sentence pairs): use "
                    "mpitron translate --ckpt {} --in FILE --out FILE",
                    ckpt, ckpt));
  const int T = int(family.sample_size(rec.model));
  int V = int(family.classes(rec.model));
  std::optional<io::BpeTokenizer> bpe = checkpoint_tokenizer(ckpt, rec, tokenizer_dir);
  if (bpe) {
    check_vocab("the tokenizer " + bpe->dir(), bpe->vocab_size(), ckpt, V);
    V = bpe->vocab_size();  // ids of a padded vocabulary beyond the tokenizer's decode to nothing
  }
  if (V < 256)
    throw UsageError(fmt::format("{} has a vocabulary of {}: too small for byte tokens", ckpt, V));
  DeviceAllocator alloc{"cpu"};
  std::unique_ptr<Model> model = load_for_inference(ckpt, rec, 1, T, alloc);
  std::vector<int32_t> text(prompt.begin(), prompt.end());
  for (auto& t : text) t = uint8_t(t);
  if (bpe) text = bpe->encode(prompt);
  if (text.size() > size_t(T))
    fmt::print(stderr,
               "note: the prompt has {} {} and the model sees at most {} (block_size): the "
               "first {} condition nothing\n",
               text.size(), bpe ? "tokens" : "bytes", T, text.size() - size_t(T));
  if (text.empty() && bpe) text = bpe->encode("\n");
  if (text.empty()) text.push_back('\n');  // an empty prompt starts from a line break
  std::fputs(prompt.c_str(), stdout);
  std::vector<int32_t> window(T + 1, 0);
  const PhiloxStream rng{seed, fnv1a64("generate")};
  MicroBatch mb;
  mb.samples = {window.data(), nullptr, nullptr, 1};
  for (int i = 0; i < tokens; ++i) {
    const int len = std::min<int>(int(text.size()), T);
    std::fill(window.begin(), window.end(), 0);
    std::copy(text.end() - len, text.end(), window.begin());
    model->forward(mb);  // causal: padding cannot leak back
    const ModelOutput out = model->output(0);
    const int next = sample_token(out.logits + size_t(len - 1) * out.classes, V, temperature, top_k,
                                  top_p, rng.uniform(uint64_t(i)));
    text.push_back(next);
    if (bpe) {
      const std::string_view piece = bpe->token_bytes(next);
      std::fwrite(piece.data(), 1, piece.size(), stdout);
    } else {
      std::fputc(next < 256 ? next : '?', stdout);
    }
    std::fflush(stdout);
  }
  std::fputc('\n', stdout);
  return 0;
}

}  // namespace mpitron::cli
