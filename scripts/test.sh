#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs every test: C++ unit tests, the same under
# AddressSanitizer + UndefinedBehaviorSanitizer, the fuzz targets for a bounded time each, and the
# pytest parity and bad-input suites.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

export PATH="$PWD/.venv/bin:$PATH"
jobs=$(nproc)
python_exe="$PWD/.venv/bin/python"

echo "== C++ unit tests (at ${SECONDS} s)"
# The Python extension is built (and tested) by the pip install in setup.sh.
cmake -S . -B build/unit -G Ninja -DHFX_BUILD_TESTS=ON -DHFX_PYTHON_EXTENSION=OFF -DPython3_EXECUTABLE="$python_exe" >/dev/null
ninja -C build/unit -j "$jobs"
ctest --test-dir build/unit --output-on-failure -j "$jobs"

echo "== C++ unit tests under ASan + UBSan (at ${SECONDS} s)"
cmake -S . -B build/asan -G Ninja -DHFX_BUILD_TESTS=ON -DHFX_PYTHON_EXTENSION=OFF -DHFX_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug \
  -DPython3_EXECUTABLE="$python_exe" >/dev/null
ninja -C build/asan -j "$jobs"
ctest --test-dir build/asan --output-on-failure -j "$jobs"

echo "== fuzzing every parser of user files (libFuzzer, ASan + UBSan), 60 s per target (at ${SECONDS} s)"
bash scripts/fuzz.sh 60

echo "== bad-input CLI tests with the sanitized binary (at ${SECONDS} s)"
HFEXPORT_BIN="$PWD/build/asan/hfexport" python -m pytest -q tests/parity/test_bad_input.py

echo "== parity tests (at ${SECONDS} s)"
python -m pytest -q --durations=25 tests
echo "== done (at ${SECONDS} s)"
