"""CTest oracle for `mpitron import` of Hugging Face BERTs: a random BERT in HF layout, imported,
gives PyTorch's logits and loss; bad models get one clear error line.

The model is validate/bert_torch.py's (independent of mpitron and of transformers), written here
as a HF folder (config.json, model.safetensors by gpt_torch.write_safetensors, vocab.txt) with
HF's names: the encoder and pooler under "bert." (BertModel's own files have no prefix), the heads
as transformers names them. Three layouts:
  pretraining  BertForPreTraining: F32, LayerNorm gamma/beta (TF-era names), the pooler, the
               next-sentence head, the tied decoder weight and bias, the position_ids buffer;
               vocab.txt with the special tokens at ids other than mpitron's defaults;
  mlm_bf16     masked LM without prefix, BF16, no decoder tensors, no vocab.txt (ids 0, 100-103);
  classifier   BertForSequenceClassification (2 labels), rows with padding and sentence pairs.
Each is imported, `mpitron eval --tokens batch.h5 --dump` evaluates a batch, and the torch model
(fp32, fp64 beside it) fed the dump's inputs must give the logits and the loss to --rtol relative
(max|a-b|/max|b|); a reference with two weights swapped must not (the test can fail). Then:
--plan's lines; export -> import gives every tensor and every special id back without vocab.txt
(export writes the ids to config.json; a vocab.txt beside it that disagrees is refused), for the
HF models and for a BERT mpitron trained (specials at 256-260); `train --init-from` the HF
folder loads exactly the imported parameters (masked LM) and, for a classifier run, the HF pooler
with a fresh classifier; a bare BertModel is refused by import, taken by --init-from; and each
bad model (hidden_act gelu_new, num_labels 3, a missing or misshapen tensor, an untied decoder,
...) fails with exit 1 and one `error:` line naming the problem.
Usage: hf_bert_oracle_test.py --mpitron BIN --workdir DIR. Exit 0 pass, 1 fail, 2 an mpitron
command failed, 77 skipped (torch or h5py missing).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

try:
    import h5py
    import numpy as np
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bert_torch
    import gpt_torch  # write_safetensors, read_safetensors, bf16 bits
    from bert_oracle_test import (corpus_lines, mlm_rows, read_dump, verse_file, write_batch,
                                  write_config)
    from oracle_test import synthetic_corpus
except ImportError as e:
    print(f"SKIP: {e.name} is not importable by {sys.executable} "
          "(Debian: apt-get install python3-torch python3-h5py)")
    sys.exit(77)

# vocab.txt of the pretraining layout: specials shuffled, none at mpitron's 256-260
VOCAB_SPECIALS = {"[UNK]": 290, "[SEP]": 291, "[CLS]": 292, "[MASK]": 293, "[PAD]": 294}
# bert-base's order (what a vocab.txt of another model may say)
BASE_SPECIALS = {"[PAD]": 0, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103}
FAILED: list[str] = []


def run(cmd: list, log: Path) -> subprocess.CompletedProcess:
    cmd = [str(c) for c in cmd]
    p = subprocess.run(cmd, capture_output=True, text=True)
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n{p.stdout}{p.stderr}(exit {p.returncode})\n")
    return p


def must(cmd: list, log: Path) -> str:
    p = run(cmd, log)
    if p.returncode != 0:
        sys.stderr.write(f"FAILED ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stdout}"
                         f"{p.stderr}")
        sys.exit(2)
    return p.stdout


def check(ok: bool, what: str) -> bool:
    print(f"  {'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        FAILED.append(what)
    return ok


# ---- the HF folder ------------------------------------------------------------------------------

def hf_config(cfg: bert_torch.BertConfig, **over) -> dict:
    c = {"architectures": ["BertForMaskedLM" if cfg.task == 0 else
                           "BertForSequenceClassification"],
         "attention_probs_dropout_prob": 0.1, "classifier_dropout": None, "hidden_act": "gelu",
         "hidden_dropout_prob": 0.1, "hidden_size": cfg.n_embd, "initializer_range": 0.02,
         "intermediate_size": 4 * cfg.n_embd, "layer_norm_eps": 1e-12,
         "max_position_embeddings": cfg.block_size, "model_type": "bert",
         "num_attention_heads": cfg.n_head, "num_hidden_layers": cfg.n_layer,
         "pad_token_id": cfg.pad_id, "position_embedding_type": "absolute",
         "transformers_version": "4.40.0", "type_vocab_size": cfg.type_vocab, "use_cache": True,
         "vocab_size": cfg.vocab_size}
    if cfg.task != 0:
        c["id2label"] = {"0": "LABEL_0", "1": "LABEL_1"}
        c["label2id"] = {"LABEL_0": 0, "LABEL_1": 1}
    c.update(over)
    return {k: v for k, v in c.items() if v is not Ellipsis}  # Ellipsis: drop the key


def hf_name(name: str, prefix: str, gamma_beta: bool) -> str:
    if gamma_beta and ".LayerNorm." in name:
        name = name.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias",
                                                                           "LayerNorm.beta")
    return name if name.startswith(("cls.", "classifier.")) else prefix + name


def hf_tensors(model: bert_torch.Bert, prefix: str = "bert.", gamma_beta: bool = False,
               pretraining: bool = False, seed: int = 0) -> dict:
    """{HF name: float32 array}; pretraining adds the pooler, the next-sentence head, the tied
    decoder weight and bias (copies) and the position_ids buffer (I64)."""
    t = {hf_name(n, prefix, gamma_beta): p.detach().numpy().astype(np.float32)
         for n, p in model.named_parameters()}
    if pretraining:
        C, g = model.cfg.n_embd, np.random.default_rng(seed)
        t[prefix + "pooler.dense.weight"] = (g.standard_normal((C, C)) / C ** 0.5).astype(
            np.float32)
        t[prefix + "pooler.dense.bias"] = (0.1 * g.standard_normal(C)).astype(np.float32)
        t["cls.seq_relationship.weight"] = (0.1 * g.standard_normal((2, C))).astype(np.float32)
        t["cls.seq_relationship.bias"] = np.zeros(2, np.float32)
        t["cls.predictions.decoder.weight"] = t[prefix + "embeddings.word_embeddings.weight"].copy()
        t["cls.predictions.decoder.bias"] = t["cls.predictions.bias"].copy()
        t[prefix + "embeddings.position_ids"] = (
            "I64", np.arange(model.cfg.block_size, dtype=np.int64)[None])
    return t


def write_folder(folder: Path, tensors: dict, config: dict, vocab: dict | None = None,
                 dtype: str = "F32") -> Path:
    folder.mkdir(parents=True)
    out = {}
    for k, v in tensors.items():
        if isinstance(v, tuple) or dtype == "F32":
            out[k] = v
        else:  # BF16
            out[k] = ("BF16", gpt_torch.to_bf16_bits(v))
    gpt_torch.write_safetensors(folder / "model.safetensors", out, {"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if vocab is not None:
        write_vocab(folder / "vocab.txt", vocab, config["vocab_size"])
    return folder


def write_vocab(path: Path, specials: dict, V: int) -> None:
    """A vocab.txt of V tokens: the specials at their ids, tok<i> elsewhere."""
    by_id = {i: t for t, i in specials.items()}
    path.write_text("".join(by_id.get(i, f"tok{i}") + "\n" for i in range(V)))


def round_bf16(model: bert_torch.Bert) -> None:
    with torch.no_grad():
        for p in model.parameters():
            a = gpt_torch.from_bf16_bits(gpt_torch.to_bf16_bits(p.detach().numpy()))
            p.copy_(torch.from_numpy(a.copy()))


def params_of(ckpt: Path) -> dict:
    with h5py.File(ckpt, "r") as f:
        out = {}
        f["params"].visititems(
            lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
        attrs = {k: (v.item() if hasattr(v, "item") else v) for k, v in f.attrs.items()}
    return out, attrs


# ---- the oracle ---------------------------------------------------------------------------------

def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def reference(model: bert_torch.Bert, dump: dict, dtype) -> tuple[np.ndarray, float]:
    m = bert_torch.Bert(model.cfg).to(dtype)
    m.load_state_dict(model.state_dict())
    with torch.no_grad():
        logits, loss = m(*(bert_torch.as_long(dump[k]) for k in
                           ("inputs", "token_types", "lengths", "targets")))
    return logits.numpy(), loss.item()


def oracle(label: str, binary: str, work: Path, folder, model: bert_torch.Bert,
           rows: np.ndarray, rtol: float, log: Path) -> Path:
    ckpt, batch, dump = work / f"{label}.h5", work / f"{label}_batch.h5", work / f"{label}_dump.h5"
    out = must([binary, "import", "--from", folder, "--out", ckpt], log)
    write_batch(batch, rows)
    must([binary, "eval", "--ckpt", ckpt, "--tokens", batch, "--dump", dump], log)
    d = read_dump(dump)
    lg32, l32 = reference(model, d, torch.float32)
    lg64, l64 = reference(model, d, torch.float64)
    r = (rel_err(d["logits"], lg32), abs(d["loss"] - l32) / abs(l32))
    r64 = (rel_err(d["logits"], lg64), abs(d["loss"] - l64) / abs(l64))
    check(r[0] < rtol and r[1] < rtol,
          f"{label}: logits {tuple(d['logits'].shape)} rel {r[0]:.3e} (fp64 {r64[0]:.3e}), loss "
          f"{d['loss']:.6f} rel {r[1]:.3e} (fp64 {r64[1]:.3e}), tolerance {rtol:.0e}")
    # The test can fail: the reference with layer 0's query and key weights swapped.
    wrong = bert_torch.Bert(model.cfg)
    wrong.load_state_dict(model.state_dict())
    with torch.no_grad():
        att = wrong.encoder.layer[0].attention.self
        q = att.query.weight.clone()
        att.query.weight.copy_(att.key.weight)
        att.key.weight.copy_(q)
    lgw, _ = reference(wrong, d, torch.float32)
    sensed = rel_err(d["logits"], lgw)
    check(sensed >= rtol, f"{label}: a mis-mapped reference (query/key swapped) differs by "
          f"{sensed:.3e}")
    return ckpt, out


def expect_error(label: str, binary: str, folder: Path, want: str, log: Path,
                 plan: bool = False) -> None:
    out = folder.parent / f"{folder.name}.h5"
    cmd = [binary, "import", "--from", folder] + (["--plan"] if plan else ["--out", out])
    p = run(cmd, log)
    lines = p.stderr.strip().splitlines()
    good = (p.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: ")
            and want in lines[0] and not out.exists())
    check(good, f"refused, {label}: {lines[0] if lines else '(no message)'}"
          + ("" if good else f" [exit {p.returncode}, {len(lines)} lines, wanted '{want}']"))


def classifier_rows(cfg: bert_torch.BertConfig, T: int, rng) -> np.ndarray:
    """[CLS] a [SEP] (b [SEP]) [PAD]... with content ids that are not specials, label at row[T]."""
    specials = {cfg.pad_id, cfg.unk_id, cfg.cls_id, cfg.sep_id, cfg.mask_id}
    content = np.array([i for i in range(cfg.vocab_size) if i not in specials])
    rows = np.full((6, T + 1), cfg.pad_id, np.int32)
    for r, parts in enumerate([(T - 2,), (1,), (5, 9), (12, 3), (20,), (7, 7)]):
        seq = [cfg.cls_id]
        for n in parts:
            seq += list(rng.choice(content, n)) + [cfg.sep_id]
        rows[r, :len(seq)] = seq
    rows[:, T] = [1, 0, 1, 1, 0, 1]
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mpitron", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--rtol", type=float, default=1e-5)
    args = ap.parse_args()
    t0 = time.perf_counter()
    torch.set_num_threads(1)
    work = Path(args.workdir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    log = work / "commands.log"
    binary = str(Path(args.mpitron).resolve())
    rng = np.random.default_rng(5)
    corpus = work / "corpus.txt"
    synthetic_corpus(corpus)
    text = corpus.read_bytes()
    verses = work / "verses.txt"
    verse_file(corpus_lines(corpus), verses)
    shape = dict(n_layer=2, n_head=4, n_embd=64, block_size=64, vocab_size=301)  # odd: tp pads

    # ---- 1. masked LM as BertForPreTraining (F32, gamma/beta, pooler, NSP, decoder, vocab.txt)
    print("pretraining layout (BertForPreTraining, F32, gamma/beta, vocab.txt):")
    ids = {"pad_id": VOCAB_SPECIALS["[PAD]"], "unk_id": VOCAB_SPECIALS["[UNK]"],
           "cls_id": VOCAB_SPECIALS["[CLS]"], "sep_id": VOCAB_SPECIALS["[SEP]"],
           "mask_id": VOCAB_SPECIALS["[MASK]"]}
    mlm_cfg = bert_torch.BertConfig(**shape, task=0, **ids)
    mlm = bert_torch.Bert(mlm_cfg)
    bert_torch.randomize(mlm, 21)
    pre_t = hf_tensors(mlm, gamma_beta=True, pretraining=True, seed=3)
    pre = write_folder(work / "hf_pretraining", pre_t,
                       hf_config(mlm_cfg, architectures=["BertForPreTraining"]), VOCAB_SPECIALS)
    mlm_ckpt, notes = oracle("pretraining", binary, work, pre, mlm,
                             mlm_rows(text, 6, 34, rng), args.rtol, log)
    _, attrs = params_of(mlm_ckpt)
    got = {k: int(attrs[f"model.{k}"]) for k in ids}
    check(got == ids and int(attrs["model.task"]) == 0 and int(attrs["step"]) == 0,
          f"checkpoint: task {attrs['model.task']}, step {attrs['step']}, special ids {got} "
          "(vocab.txt's)")
    check("cls.seq_relationship.bias, cls.seq_relationship.weight not imported" in notes and
          "bert.pooler.dense.bias, bert.pooler.dense.weight not imported" in notes and
          "from " + str(pre / "vocab.txt") in notes,
          "import's notes name the next-sentence head, the pooler and vocab.txt")
    plan = must([binary, "import", "--from", pre, "--plan"], log)
    print("    " + "\n    ".join(plan.strip().splitlines()[:3]) + "\n    ...\n    "
          + "\n    ".join(plan.strip().splitlines()[-7:]))
    check("bert.encoder.layer.1.output.LayerNorm.gamma" in plan and
          "-> encoder.layer.1.output.LayerNorm.weight" in plan and
          "cls.predictions.decoder.weight" in plan and "seq_relationship" in plan and
          "task 0" in plan and "total: " in plan, "--plan maps the names and says what is left out")

    # ---- 2. masked LM, no prefix, BF16, no decoder tensors, no vocab.txt
    print("masked LM without prefix, BF16, no vocab.txt:")
    cfg2 = bert_torch.BertConfig(**shape, task=0, pad_id=0, unk_id=100, cls_id=101, sep_id=102,
                                 mask_id=103)
    m2 = bert_torch.Bert(cfg2)
    bert_torch.randomize(m2, 22)
    round_bf16(m2)
    bf = write_folder(work / "hf_mlm_bf16", hf_tensors(m2, prefix=""), hf_config(cfg2),
                      dtype="BF16")
    _, notes2 = oracle("mlm_bf16", binary, work, bf / "model.safetensors", m2,
                       mlm_rows(text, 6, 24, rng), args.rtol, log)
    check("no vocab.txt beside" in notes2 and "[PAD] 0 [UNK] 100 [CLS] 101 [SEP] 102 [MASK] 103"
          in notes2, "without vocab.txt: pad_token_id and 100-103, said so")

    # ---- 3. BertForSequenceClassification
    print("sequence classifier (BertForSequenceClassification, 2 labels):")
    cfg3 = bert_torch.BertConfig(**shape, task=1, pad_id=0, unk_id=100, cls_id=101, sep_id=102,
                                 mask_id=103)
    m3 = bert_torch.Bert(cfg3)
    bert_torch.randomize(m3, 23)
    cls_t = hf_tensors(m3)
    cls = write_folder(work / "hf_classifier", cls_t, hf_config(cfg3))
    cls_ckpt, _ = oracle("classifier", binary, work, cls, m3, classifier_rows(cfg3, 40, rng),
                         args.rtol, log)

    # ---- export -> import: every tensor bitwise, BertForMaskedLM / ...SequenceClassification names
    print("export and import again:")
    for label, ckpt, source, vocab in (("masked LM", mlm_ckpt, pre_t, True),
                                       ("classifier", cls_ckpt, cls_t, False)):
        out = work / f"exported_{ckpt.stem}"
        must([binary, "export", ckpt, "--out", out], log)
        ex = gpt_torch.read_safetensors(out / "model.safetensors")
        cfg = json.loads((out / "config.json").read_text())
        want = {n.replace("LayerNorm.gamma", "LayerNorm.weight")
                .replace("LayerNorm.beta", "LayerNorm.bias"): v for n, v in source.items()
                if not isinstance(v, tuple) and "seq_relationship" not in n
                and "decoder" not in n and not (ckpt == mlm_ckpt and "pooler" in n)}
        same = sorted(ex) == sorted(want) and all(
            ex[n].shape == want[n].shape and ex[n].tobytes() == want[n].tobytes() for n in want)
        check(same, f"{label}: exported {len(ex)} tensors bitwise equal to the HF file's, HF names"
              f" ({cfg['architectures'][0]})")
        # config.json names every special id: the export alone imports as the same model.
        again = work / f"again_{ckpt.stem}.h5"
        must([binary, "import", "--from", out, "--out", again], log)
        (a, aa), (b, ba) = params_of(ckpt), params_of(again)
        check(sorted(a) == sorted(b) and all(a[n].tobytes() == b[n].tobytes() for n in a) and
              all(aa[k] == ba[k] for k in aa if k.startswith("model.")),
              f"{label}: import of the export (no vocab.txt): the same {len(a)} parameters and "
              "model, special ids included")
        if vocab:  # the model's own vocab.txt beside it agrees; bert-base's order does not
            shutil.copy(pre / "vocab.txt", out / "vocab.txt")
            must([binary, "import", "--from", out, "--out", work / f"agrees_{ckpt.stem}.h5"], log)
            agrees = dict(params_of(work / f"agrees_{ckpt.stem}.h5")[1])
            tok = agrees.pop("tokenizer", None)  # the vocabulary beside the weights, recorded
            tok = tok.decode() if isinstance(tok, bytes) else tok
            check(agrees == ba and tok == str(out.resolve()),
                  f"{label}: with the model's vocab.txt beside the export, the same model, the "
                  "vocabulary's folder recorded")
            write_vocab(out / "vocab.txt", BASE_SPECIALS, int(cfg["vocab_size"]))
            expect_error(f"{label}: a vocab.txt whose specials disagree with config.json", binary,
                         out, "the ids would change meaning", log)

    # ---- a BERT trained by mpitron (byte ids, specials at 256-260): export -> import bitwise
    native = work / "native_bert.toml"
    write_config(native, {**shape, "task": 0})
    must([binary, "train", "--config", native, "--data", corpus, "--steps", 2, "--batch-size", 4,
          "--seq-len", 32, "--eval-every", 0, "--log-every", 0, "--out", work / "native"], log)
    must([binary, "export", work / "native" / "ckpt_2.h5", "--out", work / "native_hf"], log)
    must([binary, "import", "--from", work / "native_hf", "--out", work / "native_again.h5"], log)
    (a, aa), (b, ba) = params_of(work / "native" / "ckpt_2.h5"), params_of(work / "native_again.h5")
    check(sorted(a) == sorted(b) and all(a[n].tobytes() == b[n].tobytes() for n in a) and
          all(aa[k] == ba[k] for k in aa if k.startswith("model.")) and
          int(ba["model.mask_id"]) == 260,
          f"mpitron's own BERT (specials at 256-260): export -> import gives the same "
          f"{len(a)} parameters and model")

    # ---- train --init-from
    print("train --init-from:")
    toml = work / "bert_mlm.toml"
    write_config(toml, {**shape, "task": 0, **ids})
    common = ["--config", toml, "--batch-size", 4, "--seq-len", 32, "--dropout", 0,
              "--eval-every", 0, "--log-every", 1]
    must([binary, "train", *common, "--data", corpus, "--steps", 0, "--init-from", pre,
          "--out", work / "init_hf"], log)
    a, _ = params_of(mlm_ckpt)
    b, _ = params_of(work / "init_hf" / "ckpt_0.h5")
    check(sorted(a) == sorted(b) and all(a[n].tobytes() == b[n].tobytes() for n in a),
          f"--init-from the HF folder: step 0 holds the imported {len(a)} parameters bitwise")
    env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMP_NUM_THREADS": "1"}
    os.environ.update({k: v for k, v in env.items() if k not in os.environ})
    must(["mpiexec", "-n", 2, binary, "train", *common, "--tp", 2, "--data", corpus, "--steps", 0,
          "--init-from", pre / "model.safetensors", "--out", work / "init_tp2"], log)
    b, _ = params_of(work / "init_tp2" / "ckpt_0.h5")
    check(sorted(a) == sorted(b) and all(a[n].tobytes() == b[n].tobytes() for n in a),
          "--init-from at tp 2 (vocabulary 301 padded): the same parameters bitwise")
    p = run([binary, "train", *common, "--data", corpus, "--steps", 3, "--init-from", mlm_ckpt,
             "--out", work / "tune_mlm"], log)
    loss = np.array([])
    if p.returncode == 0:
        with h5py.File(work / "tune_mlm" / "trace.h5", "r") as f:
            loss = f["trace/loss"][:]
    check(p.returncode == 0 and len(loss) == 3 and np.all(np.isfinite(loss)),
          "train --init-from the imported checkpoint: 3 steps, losses "
          f"{np.round(loss, 4).tolist()}")
    out = must([binary, "train", *common, "--set", "model.task=1", "--data", verses, "--seq-len",
                40, "--steps", 0, "--init-from", pre, "--out", work / "init_cls"], log)
    b, _ = params_of(work / "init_cls" / "ckpt_0.h5")
    pooler_ok = (b["pooler.dense.weight"].tobytes() == pre_t["bert.pooler.dense.weight"].tobytes()
                 and b["embeddings.word_embeddings.weight"].tobytes()
                 == pre_t["bert.embeddings.word_embeddings.weight"].tobytes())
    check(pooler_ok and "classifier.weight, classifier.bias" in out,
          "a classifier run --init-from the HF pretraining folder: its pooler and encoder loaded,"
          " the classifier fresh")
    bare = write_folder(work / "hf_bare", {k.removeprefix("bert."): v for k, v in cls_t.items()
                                           if not k.startswith("classifier.")},
                        hf_config(cfg3, architectures=["BertModel"], id2label=...,
                                  label2id=...))
    expect_error("bare BertModel", binary, bare, "bare BertModel", log)
    toml3 = work / "bert_cls.toml"
    write_config(toml3, {**shape, "task": 1, "pad_id": 0, "unk_id": 100, "cls_id": 101,
                         "sep_id": 102, "mask_id": 103})
    out = run([binary, "train", "--config", toml3, "--batch-size", 4, "--seq-len", 40,
               "--data", verses, "--steps", 1, "--eval-every", 0, "--init-from", bare,
               "--out", work / "tune_bare"], log)
    check(out.returncode == 0 and "classifier.weight, classifier.bias" in out.stdout + out.stderr,
          "train --init-from a bare BertModel: the classifier starts fresh, 1 step trains")
    p = run([binary, "train", *common, "--set", "model.pad_id=256", "--data", corpus, "--steps",
             0, "--init-from", pre, "--out", work / "bad_init"], log)
    check(p.returncode == 1 and "model.pad_id is 294 there, 256 in this run's config" in p.stderr,
          f"--init-from with other special ids: {p.stderr.strip()}")

    # ---- refusals, one line each
    print("refusals:")
    base_t = hf_tensors(mlm)  # BertForMaskedLM: no pooler, no decoder tensors
    base_c = hf_config(mlm_cfg)
    bad = work / "bad"
    bad.mkdir()
    variants = [
        ("hidden_act gelu_new", base_t, {"hidden_act": "gelu_new"},
         'hidden_act "gelu_new" is not supported'),
        ("layer_norm_eps 1e-7", base_t, {"layer_norm_eps": 1e-7}, "layer_norm_eps 1e-07"),
        ("intermediate_size 3 * hidden", base_t, {"intermediate_size": 192},
         "intermediate_size 192 is not supported"),
        ("position_embedding_type relative_key", base_t,
         {"position_embedding_type": "relative_key"}, "position_embedding_type"),
        ("is_decoder true", base_t, {"is_decoder": True}, "is_decoder true"),
        ("model_type roberta", base_t, {"model_type": "roberta"},
         'model_type "roberta" is not supported'),
        ("missing tensor", {k: v for k, v in base_t.items()
                            if k != "bert.encoder.layer.1.output.dense.bias"}, {},
         "missing tensor 'bert.encoder.layer.1.output.dense.bias'"),
        ("misshapen tensor", {**base_t, "bert.encoder.layer.0.intermediate.dense.weight":
                              np.ascontiguousarray(
                                  base_t["bert.encoder.layer.0.intermediate.dense.weight"].T)}, {},
         "'bert.encoder.layer.0.intermediate.dense.weight' has shape (64,256)"),
        ("unexpected tensor", {**base_t, "bert.encoder.layer.5.output.dense.bias":
                               base_t["bert.encoder.layer.1.output.dense.bias"]}, {},
         "unexpected tensor 'bert.encoder.layer.5.output.dense.bias'"),
        ("decoder weight not tied", {**base_t, "cls.predictions.decoder.weight":
                                     base_t["bert.embeddings.word_embeddings.weight"] + 1}, {},
         "cls.predictions.decoder.weight differs from the word embeddings"),
        ("decoder bias not cls.predictions.bias", {**base_t, "cls.predictions.decoder.bias":
                                                   base_t["cls.predictions.bias"] + 1}, {},
         "cls.predictions.decoder.bias differs from cls.predictions.bias"),
        ("both heads", {**base_t, "classifier.weight": cls_t["classifier.weight"],
                        "classifier.bias": cls_t["classifier.bias"]}, {}, "two heads"),
    ]
    three = {**cls_t, "classifier.weight": np.zeros((3, 64), np.float32),
             "classifier.bias": np.zeros(3, np.float32)}
    for i, (label, tensors, over, want) in enumerate(variants):
        folder = write_folder(bad / f"v{i}", tensors, hf_config(mlm_cfg, **over)
                              if over else base_c)
        expect_error(label, binary, folder, want, log)
    folder = write_folder(bad / "labels3", three, hf_config(
        cfg3, id2label={"0": "a", "1": "b", "2": "c"}, label2id={"a": 0, "b": 1, "c": 2}))
    expect_error("num_labels 3", binary, folder, "num_labels 3 is not supported", log)
    expect_error("num_labels 3 (--plan)", binary, folder, "num_labels 3 is not supported", log,
                 plan=True)

    verdict = "PASS" if not FAILED else f"FAIL ({len(FAILED)}: {'; '.join(FAILED)})"
    print(f"hf bert oracle: {verdict} ({time.perf_counter() - t0:.1f}s; commands in {log})")
    return 0 if not FAILED else 1


if __name__ == "__main__":
    sys.exit(main())
