#!/bin/bash
# A venv of its own for optimum-executorch, a peer of bench/bench_executorch.py: version 1.1.0
# pins transformers 5.0.0rc1, which the main .venv must not be downgraded to. Same torch (the CPU
# wheel, pinned first) and executorch as the main .venv.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv .venv-optimum
pip=(.venv-optimum/bin/python -m pip install -q --disable-pip-version-check)
"${pip[@]}" "torch==2.13.0"
"${pip[@]}" "executorch==1.5.1" "optimum-executorch==1.1.0"
.venv-optimum/bin/python -c "import optimum.exporters.executorch, executorch; print('optimum-executorch ready')"
