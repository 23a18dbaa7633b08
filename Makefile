# make test   install what is missing, build (CUDA code too when nvcc is present), run pytest
# make bench  build, then benchmark every op against torch eager and torch.compile
PYTHON   ?= python3
MAX_JOBS ?= $(shell nproc)
# torch 2.14.1 on PyPI is built with CUDA 13.0, the same major version as nvcc 13.0.
TORCH_SPEC ?= torch==2.14.1
BENCH_ARGS ?=

export MAX_JOBS

.PHONY: deps build test bench clean

deps:
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PYTHON) -m pip install "$(TORCH_SPEC)"
	@$(PYTHON) -c "import pytest, hypothesis, numpy, ninja, setuptools, wheel" 2>/dev/null || \
		$(PYTHON) -m pip install pytest hypothesis numpy ninja setuptools wheel
	@$(PYTHON) -c "import matplotlib, tqdm" 2>/dev/null || $(PYTHON) -m pip install matplotlib tqdm
	@$(PYTHON) -c "import nbclient, nbformat, ipykernel" 2>/dev/null || $(PYTHON) -m pip install nbclient nbformat ipykernel

build: deps
	$(PYTHON) -m pip install --no-build-isolation --no-deps -e .

test: build
	$(PYTHON) -m pytest tests -q -rs

bench: build
	$(PYTHON) benchmarks/bench.py $(BENCH_ARGS)

clean:
	rm -rf build python/reduce_ops/*.so python/*.egg-info
