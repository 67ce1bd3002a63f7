# Two commands do everything on a fresh machine: `make demo` and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DEMO    := data/demo
OUT     := out/demo
WORKERS ?= $(shell getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)

.PHONY: install demo test lint bench clean browser-deps notebooks

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# torch==2.13.0 first, by itself: it is the CPU build on local disk; a looser pin would pull CUDA.
# (Not editable_mode=compat, which pyright and mypy would follow from another folder: setuptools calls it transitional
# and warns; inside this folder both find `toolkit/` themselves. User trial BP.)
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	@mkdir -p $(OUT)
	$(BIN)/hrt ingest $(DEMO) --store $(OUT)/store.duckdb
	$(BIN)/hrt run --dataset $(DEMO) --split test --store $(OUT)/store.duckdb --config bm25-only --out $(OUT)/bm25.trec
	$(BIN)/hrt run --dataset $(DEMO) --split test --store $(OUT)/store.duckdb --config vector-only --out $(OUT)/vector.trec
	$(BIN)/hrt run --dataset $(DEMO) --split test --store $(OUT)/store.duckdb --config qmd --out $(OUT)/qmd.trec
	$(BIN)/hrt eval --dataset $(DEMO) --split test --run $(OUT)/bm25.trec --run $(OUT)/vector.trec --run $(OUT)/qmd.trec
	$(BIN)/hrt search "why does the deploy fail with ECONNREFUSED?" --store $(OUT)/store.duckdb --config qmd --scope platform
	@echo "demo output: $(OUT)/ (store.duckdb, *.trec)"

# The browser tests drive JupyterLab in Debian's chromium (no browser download is possible here).
browser-deps:
	@command -v chromium >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium >/dev/null; }

# Tests and tutorials in one run, a worker per core, one file per worker (a tutorial's cells stay in order in
# one kernel), files holding a `long` test first (tests/conftest.py; hence --no-loadscope-reorder: xdist's own
# order ran them last). On 2 cores, 2 workers beat 3 once the long files no longer end the run (see
# benchmarks/RESULTS.md). Tutorials opened at once share notebooks/.cache safely: the first builds the store,
# the others wait (`Store.open_built`), and models and configs are written whole (`toolkit.files`).
# Bytecode is written even where PYTHONDONTWRITEBYTECODE is set (this machine sets it): otherwise every worker,
# tutorial kernel and `hrt` subprocess compiles the toolkit and rewrites the test modules again (collection
# alone: 7.4 s against 5.0 s per process).
# One torch thread per worker (OMP_NUM_THREADS=1): a worker per core already fills the cores, and two OpenMP
# threads per worker beside DuckDB's spun on a busy core (embedding six short texts between two DuckDB writes took
# 0.2-0.9 s with two threads, 0.1 s with one; benchmarks/RESULTS.md). Likewise one DuckDB thread per store
# (HRT_DUCKDB_THREADS=1): about 15% less CPU time on the store-heavy test files.
test: $(STAMP) browser-deps
	$(BIN)/ruff check toolkit tests benchmarks data notebooks
	env -u PYTHONDONTWRITEBYTECODE OMP_NUM_THREADS=1 HRT_DUCKDB_THREADS=1 HRT_REQUIRE_BROWSER=1 $(BIN)/pytest -q -p no:cacheprovider -n $(WORKERS) --dist loadfile --no-loadscope-reorder --nbval-lax tests notebooks

# Run the tutorials top to bottom as CI does, then strip their outputs (only checked cells keep theirs).
notebooks: $(STAMP)
	$(BIN)/pytest -q -p no:cacheprovider --nbval-lax notebooks
	$(BIN)/python notebooks/strip_outputs.py notebooks/*.ipynb

lint: $(STAMP)
	$(BIN)/ruff check toolkit tests benchmarks
	$(BIN)/ruff format --check toolkit tests benchmarks

bench: $(STAMP)
	$(BIN)/python benchmarks/throughput.py

clean:
	rm -rf $(VENV) out .hrt
