# Short commands for the README. The build itself is CMake.
BUILD   ?= build
PREFIX  ?= /usr/local
JOBS    ?= $(shell nproc)
CMAKE_FLAGS ?=
# The project's Python environment: made from PYTHON, holding what the tests
# and benchmarks need (tests/requirements.txt: torch, pytest, playwright and
# the peer profilers). Every Python command of the build and tests runs in it.
PYTHON  ?= python3
VENV    ?= .venv
PY      := $(abspath $(VENV))/bin/python

.PHONY: all venv demo test check noserve-check bench install deps sanitize tsan fuzz clean python-install python-test python-test-oldest python-test-versions bench-python-versions bench-python browser-test format format-check distclean

all: $(BUILD)/.configured
	cmake --build $(BUILD) -j $(JOBS)

# Configured again when Debian's packages change (dpkg's status file), so
# that what the configure step looked for and did not find (MPI for the MPI
# tests, say) is built once make test has installed it.
$(BUILD)/.configured: CMakeLists.txt $(wildcard /var/lib/dpkg/status)
	cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)
	touch $@

# The environment is remade when tests/requirements.txt changes. pip takes
# torch 2.13.0 (CPU) from the machine's wheel directory where it has one.
venv: $(VENV)/.installed
$(VENV)/.installed: tests/requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r tests/requirements.txt
	touch $@

# Profiles the bundled inference loop, then prints its report and writes a
# Chrome/Perfetto trace. Installs what the build needs first when it can (as
# root); without libmicrohttpd it builds all but mlprof serve.
demo:
	-sh scripts/install-deps.sh build
	$(MAKE) all
	$(MAKE) python-install
	rm -rf $(BUILD)/demo-run
	$(BUILD)/mlprof run -o $(BUILD)/demo-run -- $(BUILD)/inference_loop 1000
	$(BUILD)/mlprof trace $(BUILD)/demo-run -o $(BUILD)/demo-trace.json
	$(BUILD)/mlprof html $(BUILD)/demo-run -o $(BUILD)/demo-report.html
	@echo "trace: $(BUILD)/demo-trace.json (open it in https://ui.perfetto.dev)"
	@echo "dashboard: $(BUILD)/demo-report.html (any browser, no network needed)"

deps:
	sh scripts/install-deps.sh

# The C side in minutes: build, unit tests, end-to-end tests of the real
# binary (with the Python package in $(BUILD)/python, which mlprof run loads
# into Python programs), and the build without mlprof serve (no browser).
check:
	sh scripts/install-deps.sh check
	$(MAKE) venv
	$(MAKE) all CMAKE_FLAGS="-DMLPROF_WERROR=ON $(CMAKE_FLAGS)"
	$(MAKE) python-install
	$(BUILD)/mlprof_unit
	MLPROF_BUILD=$(abspath $(BUILD)) $(PY) -m pytest -q tests/e2e
	$(MAKE) noserve-check

# Every test: make check, then the Python package and the browser tests.
test: deps
	$(MAKE) check
	$(MAKE) python-test
	$(MAKE) python-test-oldest
	$(MAKE) python-test-versions
	$(MAKE) browser-test

# The CLI builds without libmicrohttpd, and its serve then says so (exit 2).
noserve-check:
	cmake -S . -B build-noserve -DMLPROF_WITH_SERVE=OFF -DMLPROF_BUILD_TESTS=OFF \
	  -DMLPROF_BUILD_BENCH=OFF -DMLPROF_WERROR=ON
	cmake --build build-noserve -j $(JOBS) --target mlprof_cli
	build-noserve/mlprof serve . 2>build-noserve/serve.err; test $$? -eq 2
	grep -q "built without libmicrohttpd" build-noserve/serve.err

bench: all
	sh bench/run.sh $(BUILD)

# The Python package, installed into $(BUILD)/python, and its tests.
python-install: all venv
	rm -rf $(BUILD)/python && $(PY) -m pip install -q --no-deps --no-build-isolation --target $(BUILD)/python ./python

python-test: python-install
	MLPROF_BUILD=$(abspath $(BUILD)) PYTHONPATH=$(abspath $(BUILD))/python $(PY) -m pytest -q tests/python

# The same tests with the oldest torch supported: Debian's python3-torch
# (1.13) under /usr/bin/python3, with the package built above (the same
# Python ABI, 3.11). Tests of torch 2's features are marked torch2.
python-test-oldest: python-install
	MLPROF_BUILD=$(abspath $(BUILD)) PYTHONPATH=$(abspath $(BUILD))/python /usr/bin/python3 -m pytest -q -m "not torch2" tests/python

# The package's tests that need no torch under each CPython 3.12+ on the
# machine (the image's pyenv: 3.12, 3.13), each in an environment of its own.
python-test-versions: all
	sh scripts/test-python-versions.sh $(BUILD)

# The call tracer's benchmark (sys.monitoring) under each CPython 3.12+.
bench-python-versions: all
	sh scripts/test-python-versions.sh $(BUILD) bench $(BENCH_ARGS)

# The HTML report and the live dashboard in headless Debian Chromium
# (/usr/bin/chromium, or CHROMIUM), driven by pytest and playwright from the
# venv, never a browser download; screenshots go to $(BUILD)/screenshots.
# MLPROF_UPDATE_DOCS=1 refreshes docs/screenshot-overview.png. The Layers and
# call views are drawn from profiles the Python package makes.
browser-test: python-install
	MLPROF_BUILD=$(abspath $(BUILD)) PYTHONPATH=$(abspath $(BUILD))/python $(PY) -m pytest -q tests/browser

# mlprof's Python side beside the profilers a user would try instead
# (cProfile, VizTracer, yappi, pyinstrument, line_profiler, torch.profiler:
# tests/requirements.txt puts them in the environment), each table measured
# in one run on one workload, beside the baseline of that run.
bench-python: python-install
	PYTHONPATH=$(abspath $(BUILD))/python $(PY) bench/bench_python.py
	PYTHONPATH=$(abspath $(BUILD))/python $(PY) bench/bench_calls.py
	PYTHONPATH=$(abspath $(BUILD))/python $(PY) bench/bench_auto.py
	PYTHONPATH=$(abspath $(BUILD))/python $(PY) bench/bench_stacks.py

install: all
	cmake --install $(BUILD) --prefix $(PREFIX)

# Unit and end-to-end tests under ASan+UBSan. The unit tests cover the
# library instrumented; end to end, the CLI is instrumented while the
# programs it runs and preloads into (python, sh, the examples) use the
# uninstrumented build $(BUILD), since ASan must come first in a process.
sanitize: deps python-install
	$(MAKE) all BUILD=build-asan CMAKE_FLAGS="-DMLPROF_SANITIZE=address,undefined -DMLPROF_BUILD_BENCH=OFF -DMLPROF_WERROR=ON"
	MLPROF_TEST_TIMEOUT=600 build-asan/mlprof_unit
	MLPROF_BUILD=$(abspath build-asan) MLPROF_LIB=$(abspath $(BUILD))/libmlprof.so \
	  MLPROF_PROGRAMS=$(abspath $(BUILD)) \
	  MLPROF_PY_STARTUP=$(abspath $(BUILD))/python/mlprof/_startup \
	  $(PY) -m pytest -q tests/e2e

# The threaded tests under TSan (fewer zones: TSan is ~10x slower): the
# recorder, the stack sampler, the allocation hooks and their folding.
tsan:
	$(MAKE) all BUILD=build-tsan CMAKE_FLAGS="-DMLPROF_SANITIZE=thread -DMLPROF_BUILD_BENCH=OFF -DMLPROF_WERROR=ON"
	MLPROF_STRESS_ZONES=100000 MLPROF_TEST_TIMEOUT=600 \
	  TSAN_OPTIONS="halt_on_error=1 suppressions=$(abspath tests/tsan/suppressions.txt)" \
	  build-tsan/mlprof_unit record/ stack/ memory/ fold/

fuzz:
	sh fuzz/run.sh 60

# C sources in the style of .clang-format.
FORMAT_FILES = $(shell git ls-files '*.c' '*.h')
format:
	clang-format -i $(FORMAT_FILES)

format-check: deps
	clang-format --dry-run -Werror $(FORMAT_FILES)

clean:
	rm -rf build build-asan build-tsan build-fuzz build-noserve

# clean, and the Python environment too.
distclean: clean
	rm -rf $(VENV)
