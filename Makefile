# The two commands a new user needs: `make demo` and `make test`.
# Both create .venv and install everything they need on a fresh machine.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SECONDS ?= 60
# test processes: the Spark tests share one session in one of them, the engine's spread
TEST_WORKERS ?= auto
ARGS ?=

.PHONY: venv test demo demo-library fuzz bench docs-cli dist clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@# Spark (antkv.spark and its tests) runs on a JVM: install a JDK when none is on PATH.
	command -v java >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q default-jre-headless; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,bench,dist]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest tests -n $(TEST_WORKERS) --dist loadgroup --durations=15

# The Spark pipeline demo: a streaming query on antkv state, rescaled mid-stream, checked
# against plain Spark (ARGS, e.g. ARGS="--users 10000", sizes it).
demo: $(STAMP)
	$(PY) -m antkv.spark.tools.demo $(ARGS)

# The embedded-library demo.
demo-library: $(STAMP)
	$(PY) -m antkv.demo

# the differential fuzzer against RocksDB, the multi-threaded stress test, then read-only views
# beside a live writer (two processes), SECONDS each
fuzz: $(STAMP)
	$(PY) -m fuzz --seconds $(SECONDS)
	$(PY) -m fuzz.stress --seconds $(SECONDS)
	$(PY) -m fuzz.beside_writer --seconds $(SECONDS)

bench: $(STAMP)
	$(PY) -m bench $(ARGS)

# docs/cli.md, regenerated from the antkv command's parser (tests/test_docs_cli.py checks it)
docs-cli: $(STAMP)
	$(PY) tests/test_docs_cli.py --write

# dist/: the wheel and the sdist (built offline with .venv's setuptools), and the wheel again as a
# .zip, the file Spark's --py-files ships to executors (docs/spark-howto.md)
dist: $(STAMP)
	rm -rf dist
	$(PY) -m build --no-isolation --outdir dist .
	cd dist && for w in *.whl; do cp "$$w" "$${w%.whl}.zip"; done

clean:
	rm -rf $(VENV) build dist *.egg-info
