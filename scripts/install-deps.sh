#!/bin/sh
# Installs from Debian's archive what a make target needs, once. Safe to rerun.
#   install-deps.sh build   the build (make, make demo)
#   install-deps.sh check   the build, unit and end-to-end tests (make check)
#   install-deps.sh [all]   every test: Python, torch, browser (make test)
set -e
# libzstd-dev: mlprof export compresses its Parquet pages with zstd.
# libunwind-dev: the stack sampler's native frames (--stacks HZ,native).
build="cmake gcc make pkg-config python3 python3-venv libmicrohttpd-dev libzstd-dev libunwind-dev"
# Both MPIs, for the MPI tests (each called by its own name: mpirun.openmpi,
# mpirun.mpich; which is the default mpirun does not matter).
# time: GNU time measures the export's peak memory (tests/e2e/test_parquet.py).
# libpython3.11-testsuite: CPython's own regression tests of signals and
# subprocesses, run under mlprof run by the end-to-end tests
# (tests/e2e/test_cpython_suite.py). protobuf-compiler: protoc --decode reads
# the Perfetto traces back (tests/e2e/test_perfetto.py).
check="$build time python3-pytest prometheus tmux openmpi-bin libopenmpi-dev mpich libmpich-dev faketime libpython3.11-testsuite protobuf-compiler"
# g++: torch.compile's default backend (inductor) compiles C++
# (tests/python/test_compile.py).
all="$check g++ clang clang-format libclang-rt-14-dev python3-dev python3-pip python3-setuptools python3-wheel python3-torch chromium"
case "${1:-all}" in
  build) want=$build ;;
  check) want=$check ;;
  all) want=$all ;;
  *)
    echo "usage: install-deps.sh [build|check|all]" >&2
    exit 2
    ;;
esac
need=""
for pkg in $want; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need="$need $pkg"
done
[ -z "$need" ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "missing Debian packages:$need (run as root, or: sudo apt-get install$need)" >&2
  exit 1
fi
echo "installing:$need"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need
