#!/bin/bash
# Coverage-guided fuzzing of every parser that reads user files (tests/fuzz: safetensors, the
# sharded index, config.json and generation_config.json through a whole export, export.json as
# the runners read it). Builds the libFuzzer targets with clang (ASan + UBSan on everything),
# makes seed corpora of real-shaped files (tests/fuzz/make_seeds.py), replays every input kept in
# tests/fuzz/regressions/<target>/, then fuzzes each target for SECONDS (default 60), one target per core. A finding
# is copied into tests/fuzz/regressions/<target>/ (commit it with its fix) and fails the run.
#
#   scripts/fuzz.sh [SECONDS]        (after scripts/setup.sh; installs Debian's clang and libFuzzer)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
for p in clang libclang-rt-dev; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    echo "fuzz: installing Debian's clang and libFuzzer"
    sudo_cmd=(); [ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq clang libclang-rt-dev >/dev/null
    break
  fi
done
cxx=${HFX_FUZZ_CXX:-$(command -v clang++ || command -v clang++-14 || true)}
[[ -n "$cxx" ]] || { echo "fuzz: clang++ not found" >&2; exit 1; }
# The compiler only on the first configure: naming it again (another spelling) would reset the cache.
compiler=(); [[ -f build/fuzz/CMakeCache.txt ]] || compiler=(-DCMAKE_CXX_COMPILER="$cxx")
PATH="$PWD/.venv/bin:$PATH" cmake -S . -B build/fuzz -G Ninja -DHFX_FUZZ=ON "${compiler[@]}" \
  -DPython3_EXECUTABLE="$PWD/.venv/bin/python" > build-fuzz-configure.log || { cat build-fuzz-configure.log; exit 1; }
rm -f build-fuzz-configure.log
ninja -C build/fuzz fuzz_safetensors fuzz_sharded_index fuzz_config fuzz_manifest

work=$(mktemp -d "${HFX_FUZZ_WORK:-/dev/shm}/hfx-fuzz.XXXXXX" 2>/dev/null || mktemp -d)
trap 'rm -rf "$work"' EXIT
.venv/bin/python tests/fuzz/make_seeds.py "$work" "${HFEXPORT_BIN:-.venv/bin/hfexport}" > "$work/seeds.log" 2>&1 ||
  { cat "$work/seeds.log"; exit 1; }
export HFX_FUZZ_CHECKPOINT="$work/checkpoint" TMPDIR="$work"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# target name -> binary and what it needs set
declare -A binary=([safetensors]=fuzz_safetensors [sharded_index]=fuzz_sharded_index [config]=fuzz_config
                   [generation_config]=fuzz_config [manifest]=fuzz_manifest)
# One target: replay its kept inputs, then fuzz it; its lines go to $work/<target>.out and its
# status to $work/<target>.rc (the targets run side by side, one per core, printed in order).
fuzz_one() {
  local target=$1 status=0
  local env=()
  [[ $target == generation_config ]] && env=(HFX_FUZZ_FILE=generation_config.json HFX_FUZZ_GENERATION=1)
  local run=(env "${env[@]}" "build/fuzz/${binary[$target]}")
  local kept=tests/fuzz/regressions/$target
  if compgen -G "$kept/*" > /dev/null; then
    "${run[@]}" -runs=0 "$kept"/* > "$work/$target.replay.log" 2>&1 ||
      { echo "fuzz: $target: a kept regression input fails again:"; tail -30 "$work/$target.replay.log"; status=1; }
  fi
  mkdir -p "$work/corpus/$target" "$work/artifacts/$target"
  if "${run[@]}" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -max_len=16384 -print_final_stats=1 \
       -artifact_prefix="$work/artifacts/$target/" "$work/corpus/$target" "$work/seeds/$target" \
       > "$work/$target.log" 2>&1; then
    local runs cov
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/$target.log" | grep -o '[0-9]*$' || echo "?")
    cov=$(grep -o 'cov: [0-9]*' "$work/$target.log" | tail -1 || true)
    echo "fuzz: $target: ${seconds} s, $runs inputs, $cov, nothing found"
  else
    mkdir -p "$kept"
    cp "$work/artifacts/$target/"* "$kept/" 2>/dev/null || true
    echo "fuzz: $target: FOUND a failure (input kept in $kept):"
    grep -v -e '^#' -e 'NEW_FUNC' "$work/$target.log" | tail -40
    status=1
  fi
  echo "$status" > "$work/$target.rc"
}

targets=(safetensors sharded_index config generation_config manifest)
parallel=$(nproc)
for target in "${targets[@]}"; do
  while (( $(jobs -rp | wc -l) >= parallel )); do wait -n || true; done
  fuzz_one "$target" > "$work/$target.out" 2>&1 &
done
wait
status=0
for target in "${targets[@]}"; do
  cat "$work/$target.out"
  [[ "$(cat "$work/$target.rc" 2>/dev/null)" == 0 ]] || status=1
done
exit $status
