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
MICRO ?= 4
CONFIG ?= configs/gpt-tiny.toml
STEPS ?= 200
RUN ?= runs/main
CTEST_ARGS ?=

PACKAGES := build-essential cmake pkg-config libopenmpi-dev openmpi-bin libhdf5-openmpi-dev \
  hdf5-tools libeigen3-dev libgtest-dev libgmock-dev libcli11-dev libfmt-dev libspdlog-dev \
  libtoml11-dev libopenblas-dev libopenblas0-openmp python3-h5py python3-numpy \
  python3-matplotlib python3-torch slurm-wlm slurmctld slurmd slurm-client munge bible-kjv \
  shellcheck zlib1g-dev libpng-dev dataset-fashion-mnist nlohmann-json3-dev libpcre2-dev \
  clang libclang-rt-14-dev

# Open MPI on a small machine: root allowed, more ranks than cores, ranks that yield when idle.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export OMPI_MCA_rmaps_base_oversubscribe := 1
export OMPI_MCA_mpi_yield_when_idle := 1

.PHONY: help deps build data main test clean

help:
	@echo "make main   install dependencies, build, fetch the Bible, train $(CONFIG) on $(RANKS) local ranks"
	@echo "make test   install dependencies, build, run every CTest test"
	@echo "make deps | build | data | clean"
	@echo "variables: RANKS DP TP PP ZERO SCHEDULE MICRO CONFIG STEPS RUN BUILD JOBS CTEST_ARGS"

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

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j$(JOBS)

data: deps
	./io/get_bible.sh data/kjv.txt

main: build data
	mpirun -n $(RANKS) $(BUILD)/mpitron train --config $(CONFIG) --data data/kjv.txt \
	  --dp $(DP) --tp $(TP) --pp $(PP) --zero $(ZERO) --schedule $(SCHEDULE) \
	  --micro-batches $(MICRO) --steps $(STEPS) --out $(RUN) --resume auto
	/usr/bin/python3 validate/plot_loss.py -o $(RUN)/loss.png $(RUN)/trace.h5
	$(BUILD)/mpitron generate --ckpt $$(ls -v $(RUN)/ckpt_*.h5 | tail -n 1) --prompt "And God said" --tokens 200 --temperature 0.8 --top-k 40

test: build data
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) $(CTEST_ARGS)

clean:
	rm -rf $(BUILD)
