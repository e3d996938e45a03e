# lwmkit: `make data DOMAIN=android` and `make test` do all set-up on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU build of torch by default; users with GPUs set TORCH_SPEC to their own build.
TORCH_SPEC ?= torch==2.13.0
DOMAIN ?= android
OUT ?= out/$(DOMAIN)
INPUT ?=
EXECUTOR ?=

PACKAGES := schemas stages masking pipeline training

.PHONY: data test lint fmt bench bench-quick bench-large bench-scaling bytecode clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev,train,s3,viz,rl-test]"
	$(PY) -m pip install -q --no-deps "verl==0.9.1"
	touch $@

# The project's bytecode, as pip writes it for a wheel install: an editable install leaves it to the first
# import, which writes nothing where PYTHONDONTWRITEBYTECODE is set, and then every process (the CLI and each
# Ray worker) compiles all its modules again. compileall writes only what is missing or out of date.
bytecode: $(VENV)/.installed $(VENV)/.kernels
	$(PY) -m compileall -q $(PACKAGES)

# The dedup stage's compiled loops, into numba's cache once per change of their source (about 16 s), not in
# every worker of the first run that needs them.
$(VENV)/.kernels: $(VENV)/.installed stages/kernels.py stages/digit_fields.py stages/normalize_loops.py
	$(PY) -c "from stages.dedup import compile_kernels; compile_kernels()"
	touch $@

data: bytecode
	@set -e; if [ -z "$(INPUT)" ]; then \
	  $(VENV)/bin/lwm demo --domain $(DOMAIN) $(if $(filter android,$(DOMAIN)),--native) --out out/demo/$(DOMAIN); \
	  $(VENV)/bin/lwm run --input out/demo/$(DOMAIN) --domain $(DOMAIN) --out $(OUT) $(if $(EXECUTOR),--executor $(EXECUTOR)); \
	else \
	  $(VENV)/bin/lwm run --input "$(INPUT)" --domain $(DOMAIN) --out $(OUT) $(if $(EXECUTOR),--executor $(EXECUTOR)); \
	fi

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

fmt: $(VENV)/.installed
	$(VENV)/bin/ruff format .

test: bytecode
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/python -m pytest -q --durations=25

# datatrove is installed for the peer figure only (its tokenizer step, a full-run row), not a dependency of lwmkit.
bench: bytecode
	$(PY) -m pip install -q datatrove
	$(PY) -m bench

# A subset in under 5 minutes; the rows it skips are carried over from the last full run (see bench/__main__.py).
bench-quick: bytecode
	$(PY) -m bench --quick

# 2 GB through Ray on 2 CPUs (and 0.2 GB for the memory flatness figure): minutes, run on its own.
bench-large: bytecode
	$(PY) -m bench.large_run

# Ray on 1 and 2 CPUs against in-process at 41, 82, 164 and 328 MB, and the machine's ceiling for a second process.
bench-scaling: bytecode
	$(PY) -m bench.scaling

clean:
	rm -rf out .pytest_cache .ruff_cache
