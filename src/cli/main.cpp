// mpitron's command line: the table of commands and their flags (CLI11), each command's body in
// a file of its own beside this one (src/cli/<command>.cpp). Bad input is one line on stderr
// (from rank 0) and a non-zero exit, never a crash or a hang.
#include <fmt/ranges.h>
#include <mpi.h>
#include <spdlog/spdlog.h>
#include <unistd.h>  // execv

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "base/check.hpp"
#include "base/gemm.hpp"
#include "src/cli/cli.hpp"

using namespace mpitron;

namespace {

int world_rank() {
  int up = 0, r = 0;
  MPI_Initialized(&up);
  if (up) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// Commands that read files on one process and start no MPI: a singleton MPI_Init (which starts
// Open MPI's runtime daemon) costs about 0.5 s, more than the command itself.
bool needs_mpi(int argc, char** argv) {
  if (argc < 2) return true;
  const std::string command = argv[1];
  return command != "compare" && command != "info" && command != "bleu" && command != "plan" &&
         command != "devices" && command != "data-path";
}

// The message for arguments CLI11 did not expect: unknown options with the nearest known one.
std::string unexpected_arguments(const CLI::App& app, int argc, char** argv) {
  const CLI::App* sub = app.get_subcommands().empty() ? &app : app.get_subcommands().front();
  std::vector<std::string> known;
  for (const CLI::Option* o : sub->get_options())
    for (const std::string& n : o->get_lnames()) known.push_back("--" + n);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) continue;
    a = a.substr(0, a.find('='));
    if (std::find(known.begin(), known.end(), a) == known.end())
      return fmt::format("unknown option {} for mpitron {}{}", a, sub->get_name(),
                         cli::suggestion(a, known));
  }
  return "";
}

// A command's checkpoint: its first argument, or --ckpt (kept for scripts, not listed twice by
// --help); require_argument checks it was given.
void add_checkpoint_argument(CLI::App* cmd, std::string& target, const std::string& name,
                             const std::string& help) {
  cmd->add_option(name, target, help + " (required; --ckpt also takes it)");
  cmd->add_option("--ckpt", target)->group("");
}

void require_argument(const std::string& value, const std::string& command,
                      const std::string& what) {
  if (value.empty())
    throw UsageError(fmt::format("mpitron {} needs {}: mpitron {} {} (see --help)", command, what,
                                 command, what == "a trace or checkpoint" ? "FILE" : "CKPT"));
}

// A closed set of values that the option's help already names (IsMember would list them twice).
CLI::Validator one_of(std::vector<std::string> choices) {
  return CLI::Validator(
      [choices](std::string& v) -> std::string {
        if (std::find(choices.begin(), choices.end(), v) != choices.end()) return "";
        return fmt::format("'{}' is not one of: {}", v, fmt::join(choices, " | "));
      },
      "");
}

// The flags of `train`, which `plan` takes too (the same settings, planned instead of run).
void add_train_options(CLI::App* cmd, cli::TrainArgs& ta) {
  cmd->add_option("--config", ta.config_path,
                  "model and run preset (TOML), e.g. configs/gpt-tiny.toml");
  cmd->add_option("--set", ta.overrides,
                  "override a config key, section.key=value (repeatable): --set "
                  "model.n_layer=6")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_flag("--help-config", ta.help_config, "list every config key, default and meaning");
  cmd->add_option("--data", ta.data_path,
                  "what to train on, by model.type: gpt a text file (bytes) or token file (.h5, "
                  "mpitron tokenize), task 1 a folder of sentence pairs; bert a text file (task "
                  "0) or verse file (tasks 1, 2); mlp, alexnet, resnet a folder of IDX images "
                  "(default: the preset's [data] path, else the family's; mpitron data-path "
                  "prints it)");
  cmd->add_option("--device", ta.device, "cpu, cuda or cpu-staged")->capture_default_str();
  cmd->add_option("--comm", ta.comm,
                  "--device cuda: mpi (collectives on host copies; ranks may share a GPU) or "
                  "nccl (one GPU per rank)")
      ->capture_default_str();
  cmd->add_option("--precision", ta.precision,
                  "fp32, or bf16/fp16 activations and layer weights (fp32 master weights; fp16 "
                  "with dynamic loss scaling)")
      ->capture_default_str();
  cmd->add_option("--optimizer", ta.optimizer,
                  "adamw (fp32 moments) or adamw8bit (moments as 8-bit codes, one fp32 scale "
                  "per block of 256 flat parameters: bitsandbytes' blockwise 8-bit Adam; "
                  "--tp and --pp change its blocks, --dp and --zero do not)")
      ->capture_default_str();
  cmd->add_option("--steps", ta.steps, "optimizer steps");
  cmd->add_option("--batch-size", ta.batch_size, "global batch, in sequences");
  cmd->add_option("--seq-len", ta.seq_len, "tokens per sequence (<= block size)");
  cmd->add_option("--lr", ta.lr, "peak learning rate");
  cmd->add_option("--warmup-steps", ta.warmup, "warm-up steps (config key warmup_steps)");
  cmd->add_option("--warmup", ta.old_warmup)->group("");  // the old spelling, still taken
  cmd->add_option("--seed", ta.seed, "seed of initialisation, data order and dropout");
  cmd->add_option("--dropout", ta.dropout, "dropout probability");
  cmd->add_option("--micro-batches", ta.micro_batches, "gradient accumulation steps");
  cmd->add_flag("--bitwise", ta.bitwise,
                "train the same bits at every layout as one process: the batch in reduction "
                "shards, one micro-batch each, summed in one fixed tree (config key "
                "train.bitwise)");
  cmd->add_option("--reduction-shards", ta.reduction_shards,
                  "with --bitwise: shards of the global batch (default gcd(batch, 24); dp x "
                  "micro-batches must equal them)");
  cmd->add_option("--tp-shards", ta.tp_shards,
                  "with --bitwise: TP shards every split sum runs over, at any --tp (default 4; "
                  "a power of two that --tp divides)");
  cmd->add_option("--out", ta.opts.out, "run folder (default runs/<config>_DP.._TP.._PP.._zero..)");
  cmd->add_option("--ckpt-every", ta.ckpt_every, "checkpoint every N steps (0: at the end only)");
  cmd->add_option("--eval-every", ta.eval_every, "validation loss every N steps (0: at the end)");
  cmd->add_option("--eval-batches", ta.eval_batches, "global batches per validation");
  cmd->add_option("--log-every", ta.log_every, "progress line every N steps");
  cmd->add_option("--hang-timeout", ta.opts.hang_timeout_s,
                  "seconds without progress after which a rank ends the whole job (0: never)")
      ->capture_default_str();
  cmd->add_option("--keep-last", ta.opts.keep_last,
                  "keep only the newest K checkpoints (0: all; the newest always stays)");
  cmd->add_option("--init-from", ta.opts.init_from,
                  "start from pretrained parameters: a Hugging Face GPT-2 or BERT folder or "
                  ".safetensors file, or an mpitron checkpoint (step 0, fresh optimizer)");
  cmd->add_option("--tokenizer", ta.opts.tokenizer,
                  "verse data (bert tasks 1, 2): encode the verses with this BERT WordPiece "
                  "vocabulary (a folder with vocab.txt or vocab.json); translation pairs (gpt "
                  "task 1): with this SentencePiece model (.model, kept in the run folder); "
                  "default: bytes");
  cmd->add_option("--resume", ta.opts.resume,
                  "checkpoint to resume from, or 'auto' (latest in --out)");
  cmd->add_flag("--allow-changes", ta.opts.allow_changes,
                "resume with other settings (lr, steps, batch, ...) than the checkpoint's");
  cmd->add_option("--dp", ta.opts.layout.dp,
                  "data-parallel ranks (default: the job's ranks / (tp x pp))");
  cmd->add_option("--tp", ta.opts.layout.tp, "tensor-parallel ranks");
  cmd->add_flag("--strict-placement", ta.opts.strict_placement,
                "refuse a layout whose TP group spans nodes (default: a warning naming it)");
  cmd->add_option("--pp", ta.opts.layout.pp, "pipeline stages");
  cmd->add_option("--schedule", ta.schedule, "pipeline schedule: gpipe | 1f1b | interleaved")
      ->capture_default_str();
  cmd->add_option("--recompute", ta.recompute,
                  "none | block: keep only each transformer block's input per micro-batch "
                  "and recompute the block in backward (less memory, the same losses)")
      ->check(one_of({"none", "block"}))
      ->capture_default_str();
  cmd->add_option("--virtual-stages", ta.opts.layout.virtual_stages,
                  "model chunks per pipeline rank (--schedule interleaved)");
  cmd->add_option("--stage-layers", ta.opts.layout.stage_layers,
                  "blocks per pipeline stage, e.g. 3,3,2,4 (default: balanced)")
      ->delimiter(',');
  cmd->add_option("--zero", ta.opts.layout.zero,
                  "ZeRO stage: 0, 1 (moments sharded), 2 (+ gradients)");
  cmd->add_option("--dp-reduce", ta.dp_reduce, "allreduce | ring | gather-scatter");
  cmd->add_option("--bucket-mb", ta.opts.layout.bucket_mb,
                  "gradient bucket size (MiB); 0: one reduction after backward");
  cmd->add_option(
      "--threads", ta.opts.threads,
      "compute threads per rank (0: the cores this process may use / the ranks on its node)");
  cmd->add_option("--trace-flush-every", ta.opts.trace_flush_every,
                  "trace rows buffered before a flush");
  cmd->add_option("--offload", ta.offload,
                  "none | optimizer | optimizer,master: the optimizer state (fp32 moments, or "
                  "adamw8bit's codes) in host memory and its update on the host's cores, through "
                  "host copies of the gradient and parameter shard off the CPU (the same bits); "
                  "with master, the fp32 master weights in host memory too and only their 16-bit "
                  "copy on the device (bf16 and fp16)")
      ->check(one_of({"none", "optimizer", "optimizer,master"}))
      ->capture_default_str();
  cmd->add_option("--lm-head-chunk", ta.opts.lm_head_chunk,
                  "the LM head and its loss over this many token rows at a time, the logits "
                  "recomputed in backward: B x T x V logits never held whole (0: at once)");
  cmd->add_option("--max-device-memory", ta.max_device_memory,
                  "cap on each rank's device memory, e.g. 11GiB: a memory plan above it is refused "
                  "before any work (mpitron plan says what fits), an allocation past it stops the "
                  "run naming it");
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* kernels = cpu::better_blas_kernels()) {
    setenv("OPENBLAS_CORETYPE", kernels, 1);
    execv("/proc/self/exe", argv);  // returns only on failure: then go on with the slow kernels
  }
  if (needs_mpi(argc, argv)) init_mpi(&argc, &argv);
  spdlog::set_pattern("[%H:%M:%S] %v");
  const int rank = world_rank();
  int rc = 0;
  try {
    CLI::App app{"mpitron: MPI-native transformer training with exact parallel layouts"};
    app.require_subcommand(1);
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    app.failure_message([](const CLI::App*, const CLI::Error& e) {
      return fmt::format("error: {} (see --help)\n", e.what());
    });

    // ---- train
    auto* train =
        app.add_subcommand("train", "train a model (run under mpirun/srun for parallel layouts)");
    cli::TrainArgs ta;
    add_train_options(train, ta);
    auto* plan = app.add_subcommand(
        "plan",
        "the memory each rank's device would hold for these training settings (the flags of "
        "train), by kind, and what would fit --max-device-memory");
    cli::TrainArgs pa;
    add_train_options(plan, pa);
    cli::PlanNetworkArgs pn;
    plan->add_option("--nodes", pn.nodes,
                     "predict the step time on this many nodes (needs --ranks-per-node, "
                     "--network and the compute time)")
        ->check(CLI::PositiveNumber);
    plan->add_option("--ranks-per-node", pn.ranks_per_node,
                     "ranks on each node, consecutive ranks together (the job scripts' placement)")
        ->check(CLI::PositiveNumber);
    plan->add_option("--network", pn.network,
                     "TOML alpha-beta model of the links: [intra_node] and [inter_node], each "
                     "alpha_s and beta_s_per_byte (bench/network_model.sh measures one)");
    plan->add_option("--compute-step-s", pn.compute_step_s,
                     "seconds of one step of the global batch on one rank");
    plan->add_option("--compute-trace", pn.compute_trace,
                     "a one-rank run's trace.h5 (or its folder): its median step_s is the compute");
    plan->add_option("--cores-per-node", pn.cores_per_node,
                     "cores a node gives its ranks: compute slows by ranks per node / cores where "
                     "that is above 1 (default: a core per rank)");

    // ---- eval
    auto* eval = app.add_subcommand("eval",
                                    "loss of a checkpoint: on a token batch (with --dump: logits "
                                    "and gradients), or validation loss on --data (classifiers: "
                                    "accuracy; question answering: exact match)");
    cli::EvalArgs ea;
    add_checkpoint_argument(eval, ea.ckpt, "ckpt", "checkpoint, or a run folder (its latest)");
    eval->add_option("--tokens", ea.tokens,
                     "HDF5 file with /tokens (B, T+1) int32; for classifiers /images (B, pixels) "
                     "0-255 and /labels (B)");
    eval->add_option("--dump", ea.dump, "write /loss, /logits, /grads/<name> here");
    eval->add_option("--data", ea.data,
                     "validation data: text file or image folder (default: the family's)");
    eval->add_option("--batches", ea.batches, "validation batches (default: the trainer's)");
    eval->add_option("--batch-size", ea.batch_size, "samples per batch (default: the trainer's)");
    eval->add_option("--seq-len", ea.seq_len, "tokens per sequence (default: the trainer's)");
    eval->add_option("--seed", ea.seed, "seed of the validation batches (default: the run's)");
    eval->add_flag(
        "--whole-split", ea.whole_split,
        "classifiers: every validation image (or verse) once, in order (the test accuracy)");
    eval->add_option("--tokenizer", ea.tokenizer,
                     "BPE tokenizer folder: encode a text --data with it (default: the one of the "
                     "token file the checkpoint was trained on)");

    // ---- generate
    auto* gen = app.add_subcommand("generate", "sample text from a checkpoint");
    cli::GenerateArgs ga;
    add_checkpoint_argument(gen, ga.ckpt, "ckpt", "checkpoint, or a run folder (its latest)");
    gen->add_option("--prompt", ga.prompt,
                    "text to continue; only its last block_size bytes condition the model (empty: "
                    "start from a line break)");
    gen->add_option("--new-tokens", ga.tokens, "tokens to generate")->capture_default_str();
    std::optional<int> old_new_tokens;  // the old spelling (eval's --tokens is a file)
    gen->add_option("--tokens", old_new_tokens)->group("");
    gen->add_option("--temperature", ga.temperature, "softmax temperature (0: greedy)")
        ->capture_default_str();
    gen->add_option("--top-k", ga.top_k, "sample among the k most likely (0: all)")
        ->capture_default_str();
    gen->add_option("--top-p", ga.top_p, "sample within probability mass p")->capture_default_str();
    gen->add_option("--seed", ga.seed, "sampling seed")->capture_default_str();
    gen->add_option("--tokenizer", ga.tokenizer,
                    "BPE tokenizer folder for prompt and output (default: the one of the token "
                    "file the checkpoint was trained on; else byte tokens)");

    // ---- tokenize
    auto* tokz = app.add_subcommand(
        "tokenize",
        "encode a text file with a GPT-2 BPE or BERT WordPiece tokenizer into a token file for "
        "--data, or learn a SentencePiece BPE model (--learn N) from text files");
    std::string tokz_dir, tokz_out;
    std::vector<std::string> tokz_in;
    int tokz_learn = 0;
    tokz->add_option("--tokenizer", tokz_dir,
                     "BPE: a folder with encoder.json + vocab.bpe or vocab.json + merges.txt "
                     "(io/get_gpt2_tokenizer.sh fetches GPT-2's); WordPiece: vocab.txt, or a "
                     "folder with it (io/get_bert_tokenizer.sh); SentencePiece: a .model file");
    tokz->add_option(
            "--learn", tokz_learn,
            "learn a SentencePiece BPE model of N pieces from the --in files (one sentence "
            "a line; unk 0, bos 1, eos 2, pad 3) and write it to --out (.model)")
        ->check(CLI::Range(8, 1 << 20));
    tokz->add_option("--in", tokz_in,
                     "text file (with --learn: files, repeated or comma-separated)")
        ->required();
    tokz->add_option("--out", tokz_out,
                     "token file to write (.h5: /tokens and attributes), or with --learn the "
                     "SentencePiece model (.model)")
        ->required();

    // ---- translate
    auto* trn = app.add_subcommand(
        "translate", "translate the lines of a file with a translation checkpoint (gpt task 1)");
    cli::TranslateArgs tra;
    add_checkpoint_argument(trn, tra.ckpt, "ckpt", "ckpt_<step>.h5, or a run folder (its latest)");
    trn->add_option("--in", tra.in, "source text, one sentence a line")->required();
    trn->add_option("--out", tra.out, "where to write the translations, line k for line k")
        ->required();
    trn->add_option("--batch-size", tra.batch_size, "lines decoded together")
        ->capture_default_str();
    trn->add_option("--beam", tra.beam, "beam width (1: greedy)")->capture_default_str();
    trn->add_flag("--no-cache", tra.no_cache,
                  "recompute the whole prefix each step instead of keeping keys and values "
                  "(greedy; the reference the cache is checked against)");
    trn->add_option("--tokenizer", tra.tokenizer,
                    "the SentencePiece model (default: the one kept with the checkpoint)");

    // ---- compare
    auto* cmp = app.add_subcommand(
        "compare",
        "compare the loss curves of two traces (--bitwise: two traces or two checkpoints, bit for "
        "bit)");
    std::string cmp_a, cmp_b;
    double rtol = 1e-5;
    bool allow_partial = false, cmp_bitwise = false;
    cmp->add_flag("--bitwise", cmp_bitwise,
                  "every bit: traces' losses, norms and learning rates at every step, or "
                  "checkpoints' parameters, optimizer state and buffers (--bitwise training)");
    cmp->add_flag("--allow-partial", allow_partial,
                  "compare the common steps even when the traces cover different ones");
    cmp->add_option("a", cmp_a, "trace.h5 (or, with --bitwise, a checkpoint)")->required();
    cmp->add_option("b", cmp_b, "trace.h5 (or, with --bitwise, a checkpoint)")->required();
    cmp->add_option("--rtol", rtol, "largest accepted relative loss difference")
        ->capture_default_str();

    // ---- bleu
    auto* bleu = app.add_subcommand(
        "bleu",
        "corpus BLEU of translations against references (sacreBLEU's default: 13a, 4-grams)");
    std::string bleu_hyp, bleu_ref;
    bleu->add_option("hypotheses", bleu_hyp, "text file, one translation a line")->required();
    bleu->add_option("references", bleu_ref, "text file, line k the reference of line k")
        ->required();
    int bleu_width = 2;
    bleu->add_option("--width,-w", bleu_width, "decimals of the score")
        ->check(CLI::Range(0, 16))
        ->capture_default_str();

    // ---- info
    auto* info = app.add_subcommand("info", "what a trace or checkpoint holds");
    std::string info_path;
    add_checkpoint_argument(info, info_path, "file",
                            "trace.h5, ckpt_<step>.h5, or a run folder (its latest checkpoint)");
    bool info_all = false, info_verify = false;
    info->add_flag("--all", info_all, "every attribute and dataset, not a summary");
    info->add_flag(
        "--verify", info_verify,
        "read every tensor of a checkpoint and check its checksums (exit 1 if any fails)");

    // ---- batch
    auto* bat = app.add_subcommand("batch", "write the global token batches of steps to HDF5");
    cli::BatchArgs ba;
    bat->add_option("--data", ba.data, "text file")->capture_default_str();
    bat->add_option("--config", ba.config,
                    "a run's config: its batch size, sequence length and seed are the defaults");
    bat->add_option("--seed", ba.seed, "seed (default: the config's, else 1337)");
    bat->add_option("--first-step", ba.first_step, "first step (or evaluation batch)")
        ->capture_default_str();
    bat->add_option("--steps", ba.steps, "number of steps")->capture_default_str();
    bat->add_option("--batch-size", ba.batch_size, "global batch (default: the config's, else 8)");
    bat->add_option("--seq-len", ba.seq_len,
                    "tokens per sequence (default: the config's, else 64)");
    bat->add_option("--out", ba.out, "output HDF5 (dataset /tokens)")->required();
    bat->add_flag("--val", ba.val, "validation split");

    auto* sched = app.add_subcommand(
        "schedule", "simulate a pipeline schedule: timeline, bubble, activations in flight");
    pipeline::ScheduleSpec sched_spec{pipeline::ScheduleKind::one_f_one_b, 4, 8, 1};
    std::string sched_kind = "1f1b", sched_png;
    double sched_tf = 1.0, sched_tb = 2.0;
    sched->add_option("--pp", sched_spec.pp, "pipeline stages")->capture_default_str();
    sched->add_option("--micro-batches", sched_spec.micro_batches, "micro-batches per step")
        ->capture_default_str();
    sched->add_option("--schedule", sched_kind, "gpipe | 1f1b | interleaved")
        ->capture_default_str();
    sched
        ->add_option("--virtual-stages", sched_spec.virtual_stages,
                     "model chunks per rank (interleaved)")
        ->capture_default_str();
    sched
        ->add_option("--forward-time", sched_tf,
                     "time of a stage's forward over one micro-batch (an interleaved chunk takes "
                     "1/virtual-stages of it)")
        ->capture_default_str();
    sched->add_option("--backward-time", sched_tb, "time of a stage's backward, likewise")
        ->capture_default_str();
    sched->add_option("--png", sched_png, "also draw the timeline (a Gantt chart per rank) here");

    // ---- import / export (Hugging Face GPT-2 and BERT weights, by config.json's model_type)
    auto* imp = app.add_subcommand(
        "import",
        "a Hugging Face GPT-2 or BERT (model.safetensors + config.json) as an mpitron checkpoint");
    std::string imp_from, imp_out;
    bool imp_plan = false;
    imp->add_option("from,--from", imp_from,
                    "folder with model.safetensors and config.json, or the "
                    ".safetensors file (config.json beside it)")
        ->required();
    imp->add_option("--out", imp_out, "checkpoint to write (.h5)");
    imp->add_flag("--plan", imp_plan,
                  "print the tensors, shapes and bytes from the header; read no tensor data");
    auto* exp = app.add_subcommand(
        "export",
        "an mpitron GPT or bert checkpoint as Hugging Face GPT-2 or BERT (model.safetensors, "
        "config.json)");
    std::string exp_ckpt, exp_out;
    add_checkpoint_argument(exp, exp_ckpt, "ckpt",
                            "checkpoint (.h5), or a run folder (its latest)");
    exp->add_option("--out", exp_out, "folder to write model.safetensors and config.json into")
        ->required();

    app.add_subcommand("devices", "list the compute devices this build can use");

    // ---- data-path
    auto* dpath = app.add_subcommand(
        "data-path",
        "print the data a preset trains on without --data ([data] path, else the "
        "model family's default)");
    cli::TrainArgs da;
    dpath->add_option("--config", da.config_path, "model and run preset (TOML)")->required();
    dpath->add_option("--set", da.overrides, "override a config key, section.key=value")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);

    std::vector<std::string> commands;
    for (const CLI::App* sub : app.get_subcommands({})) commands.push_back(sub->get_name());
    if (argc > 1 && argv[1][0] != '-' &&
        std::find(commands.begin(), commands.end(), argv[1]) == commands.end())
      throw UsageError(fmt::format("'{}' is not a command{}; commands: {}", argv[1],
                                   cli::suggestion(argv[1], commands), fmt::join(commands, ", ")));
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      // --help prints and exits 0; every other parse error is a usage error, exit 1.
      const std::string unknown =
          dynamic_cast<const CLI::ExtrasError*>(&e) ? unexpected_arguments(app, argc, argv) : "";
      if (rank == 0 && unknown.empty()) app.exit(e);
      if (rank == 0 && !unknown.empty()) fmt::print(stderr, "error: {} (see --help)\n", unknown);
      finalize_mpi();
      return e.get_exit_code() == 0 ? 0 : 1;
    }

    // Old spellings still work, with a note for scripts.
    for (cli::TrainArgs* a : {&ta, &pa})
      if (a->old_warmup) {
        if (rank == 0) fmt::print(stderr, "note: --warmup is now --warmup-steps (as in configs)\n");
        if (!a->warmup) a->warmup = a->old_warmup;
      }
    if (old_new_tokens) {
      if (rank == 0)
        fmt::print(stderr, "note: generate's --tokens is now --new-tokens (eval's is a file)\n");
      ga.tokens = *old_new_tokens;
    }
    if (train->parsed()) {
      rc = cli::cmd_train(std::move(ta));
    } else if (plan->parsed()) {
      rc = cli::cmd_plan(std::move(pa), pn);
    } else if (eval->parsed()) {
      require_argument(ea.ckpt, "eval", "a checkpoint");
      ea.ckpt = cli::checkpoint_of(ea.ckpt);
      rc = cli::cmd_eval(ea);
    } else if (gen->parsed()) {
      require_argument(ga.ckpt, "generate", "a checkpoint");
      ga.ckpt = cli::checkpoint_of(ga.ckpt);
      rc = cli::cmd_generate(ga);
    } else if (tokz->parsed()) {
      if (rank == 0) {  // one writer
        if (tokz_learn > 0) {
          std::vector<std::string> files;  // --in a,b as well as --in a --in b
          for (const std::string& in : tokz_in)
            for (size_t at = 0; at <= in.size();) {
              const size_t comma = std::min(in.find(',', at), in.size());
              if (comma > at) files.push_back(in.substr(at, comma - at));
              at = comma + 1;
            }
          rc = cli::cmd_learn_tokenizer(files, tokz_learn, tokz_out, tokz_dir);
        } else if (tokz_in.size() != 1)
          throw UsageError("tokenize encodes one --in file (several are for --learn)");
        else
          rc = cli::cmd_tokenize(tokz_dir, tokz_in.front(), tokz_out);
      }
    } else if (cmp->parsed()) {
      rc = cmp_bitwise ? cli::cmd_compare_bits(cmp_a, cmp_b)
                       : cli::cmd_compare(cmp_a, cmp_b, rtol, allow_partial);
    } else if (trn->parsed()) {
      require_argument(tra.ckpt, "translate", "a checkpoint");
      tra.ckpt = cli::checkpoint_of(tra.ckpt);
      if (rank == 0) rc = cli::cmd_translate(tra);  // one writer
    } else if (bleu->parsed()) {
      rc = cli::cmd_bleu(bleu_hyp, bleu_ref, bleu_width);
    } else if (info->parsed()) {
      require_argument(info_path, "info", "a trace or checkpoint");
      rc = cli::cmd_info(cli::checkpoint_of(info_path), info_all, info_verify);
    } else if (sched->parsed()) {
      sched_spec.kind = pipeline::parse_schedule(sched_kind);
      rc = cli::cmd_schedule(sched_spec, sched_tf, sched_tb, sched_png);
    } else if (imp->parsed()) {
      rc = cli::cmd_import(imp_from, imp_out, imp_plan);
    } else if (exp->parsed()) {
      require_argument(exp_ckpt, "export", "a checkpoint");
      rc = cli::cmd_export(cli::checkpoint_of(exp_ckpt), exp_out);
    } else if (bat->parsed()) {
      rc = cli::cmd_batch(ba);
    } else if (dpath->parsed()) {
      rc = cli::cmd_data_path(std::move(da));
    } else {
      rc = cli::cmd_devices();
    }
  } catch (const UsageError& e) {
    // Configuration errors are detected identically on every rank; rank 0 speaks for all.
    if (rank == 0) std::fprintf(stderr, "error: %s\n", e.what());
    rc = 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] error: %s\n", rank, e.what());
    std::fflush(stderr);
    int up = 0;
    MPI_Initialized(&up);
    if (!up) return 1;
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  finalize_mpi();
  return rc;
}
