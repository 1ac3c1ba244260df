#!/usr/bin/env bash
# Sets up (scripts/setup.sh), then exports a tiny Qwen3 checkpoint and runs it in onnxruntime,
# printing its largest difference from transformers.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python scripts/demo.py --hfexport .venv/bin/hfexport
