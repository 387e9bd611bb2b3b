# Two entry points, each idempotent from a fresh clone:
#   make demo   set up, run the suites on whatever device is present, ingest, open the dashboard
#   make test   set up, run the test suite (make test-fast: the inner loop's subset)
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
TRITON_SPEC ?= triton>=3.0
# The venv is isolated from the host's site-packages, so the tests run on what pyproject.toml
# asks for, never on whatever pytest, numpy or pytest plugins the machine happens to have.
# SYSTEM_TORCH=1 (the GPU runners: `make install SYSTEM_TORCH=1`) makes it with
# --system-site-packages instead, to reuse the system's CUDA build of torch, triton and cupy.
SYSTEM_TORCH ?=
SYSTEM_SITE := $(filter 1,$(SYSTEM_TORCH))
STAMP := $(VENV)/.installed$(if $(SYSTEM_SITE),-system-torch)
# The dashboard's port for `make demo PORT=8502`; empty: attnwatch's own default (ci/port.py).
PORT ?=
export ATTNWATCH_DB ?= $(HOME)/.local/share/attnwatch/history.duckdb

.PHONY: demo test test-fast lint format install browser postgres clean port-free

install: $(STAMP)

$(STAMP): pyproject.toml
	@# A venv made in the other mode is made again: the mode decides what the tests run on.
	@if [ -f $(VENV)/pyvenv.cfg ] && ! grep -qx "include-system-site-packages = $(if $(SYSTEM_SITE),true,false)" $(VENV)/pyvenv.cfg; then \
	  echo "$(VENV) was made $(if $(SYSTEM_SITE),without,with) the system site packages: making it again"; rm -rf $(VENV); fi
	test -x $(PY) || $(PYTHON) -m venv $(if $(SYSTEM_SITE),--system-site-packages) $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -c "import triton" 2>/dev/null || $(PY) -m pip install -q "$(TRITON_SPEC)"
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

# Debian's Chromium for the browser test (Playwright drives it through executable_path).
browser:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null; \
	  else echo "chromium not found and cannot install it: the browser test will report that"; fi; }

# Debian's PostgreSQL server for the lake tests (tests/pg_server.py starts one in a temp dir).
postgres:
	@ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || command -v pg_ctl >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >/dev/null; \
	  else echo "PostgreSQL server not found and cannot install it: the lake tests will skip and say why"; fi; }

# A short main-branch history measured on an H200 (8 runs, docs/data/demo/README.md).
SAMPLE := docs/data/demo/h200-demo-history.tgz

# A taken port fails here, in a second, before the set-up and the measuring (bare python3: no venv yet).
port-free:
	@$(PYTHON) -m attnwatch.ci.port $(PORT)

# The repository the demo's runs are of: the shipped H200 sample records "attnwatch", and a
# history admits runs of one repository only (history/contract/repository.py).
demo: export ATTNWATCH_REPO ?= attnwatch
demo: port-free $(STAMP)
	$(PY) -m attnwatch run --shapes auto --ingest
	@# Real H200 runs shipped with the project, so every page has GPU data on any machine: a step
	@# that detection turns into alerts, and a newest push with regressions, intervals and ncu metrics.
	tmp=$$(mktemp -d) && tar xzf $(SAMPLE) -C $$tmp && $(PY) -m attnwatch ingest $$tmp/h200-demo-history/* && rm -rf $$tmp
	$(PY) -m attnwatch detect
	@# The CPU run's own cases, labelled as the run's summary labels them (ci/summary.py CPU_MEDIAN_LABEL).
	$(PY) -m attnwatch sql "select r.variant, r.shape_id, r.dtype, r.causal, round(r.median_us, 2) as \"median_us (CPU wall clock)\", round(r.tflops, 2) as tflops, round(r.gap_to_baseline, 3) as gap_to_baseline from results r join runs using (run_id) where runs.device_kind = 'cpu' and run_id = (select run_id from runs where device_kind = 'cpu' order by started_at desc limit 1) and r.status = 'ok' order by r.shape_id, r.variant"
	$(PY) -m attnwatch sql "select count(*) as results from results"
	@echo "history: $(ATTNWATCH_DB)  (query it: $(VENV)/bin/attnwatch sql \"select count(*) from results\")"
	@echo "attnwatch is installed in $(VENV), not on your PATH: run $(VENV)/bin/attnwatch --help, or 'source $(VENV)/bin/activate' first"
	$(PY) -m attnwatch dashboard $(if $(PORT),--port $(PORT))

# The suite over pytest-xdist workers, one per core (TEST_WORKERS=0: in this process): each test
# file runs whole on one worker (tests/worker_groups.py). `make test-fast` is the
# inner loop (README, "Development").
TEST_WORKERS ?= auto
PYTEST := $(PY) -m pytest -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

# The suite starts about 1,700 Python processes; measuring children run with
# PYTHONDONTWRITEBYTECODE (ci/child_env.py), so without compiled modules each one compiles the
# package's sources again: compiling them once first cut a subprocess-heavy file's CPU by 5-12%
# (docs/benchmarks/suite.md).
test: $(STAMP) browser postgres
	$(PY) -m compileall -q -j 0 attnwatch >/dev/null
	$(PYTEST) tests

# The inner loop's files: the bundle and history contracts, the statistics and detection rules,
# the ncu and timing parsers, the comment and the pages' numbers; none starts a server or an install.
FAST_TESTS := tests/test_bundle_contract.py tests/test_bundle_format.py tests/test_history_ingest.py \
  tests/test_case_rules.py tests/test_run_config.py tests/test_detect_thresholds.py \
  tests/test_history_ceilings.py tests/test_detect_changepoints.py tests/test_detect_ab.py \
  tests/test_timing_statistics.py tests/test_explain_exact.py tests/test_explain_aa.py \
  tests/test_attribution.py tests/test_compare_sequential.py tests/test_bisect_search.py \
  tests/test_ncu_parse.py tests/test_ncu_explain.py tests/test_gpu_identity.py \
  tests/test_build_record_paths.py tests/test_operators.py tests/test_kernels_references.py \
  tests/test_timing.py tests/test_timing_guard.py tests/test_run_state.py \
  tests/test_comment_render.py tests/test_compare_report.py tests/test_app_text.py \
  tests/test_app_numbers.py tests/test_app_compare_stats.py tests/test_history_links.py \
  tests/test_history_ncu_roofline.py tests/test_kernel_config_history.py tests/test_import_rules.py \
  tests/test_checkout_self_contained.py

test-fast: $(STAMP)
	$(PYTEST) -m "not slow and not browser" $(FAST_TESTS)

# The linter and the type checker alone (rule sets: pyproject.toml [tool.ruff], [tool.mypy]);
# `make test` runs the same two tests with the rest.
lint: $(STAMP)
	$(PY) -m pytest -p no:cacheprovider -q tests/test_lint.py tests/test_type_check.py

# Lay out every Python file as CI expects it (tests/test_lint.py checks `ruff format --check`).
format: $(STAMP)
	$(PY) -m ruff format .

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
