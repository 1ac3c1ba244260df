#!/usr/bin/env bash
# One-time setup on a fresh Debian machine: the C++ build dependencies from Debian, and a Python
# virtual environment at .venv holding hfexport (built from this checkout) and the test tools.
# Safe to re-run: it installs only what is missing and rebuilds hfexport.
set -euo pipefail
cd "$(dirname "$0")/.."

debian_packages=(g++ libprotobuf-dev protobuf-compiler nlohmann-json3-dev libgtest-dev libcli11-dev libpugixml-dev pybind11-dev zlib1g-dev
  flatbuffers-compiler libflatbuffers-dev libkissfft-dev)
missing=()
for p in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=(); [ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
pip=(.venv/bin/python -m pip install -q --disable-pip-version-check)
# torch first and pinned: the CPU wheel; an unpinned resolve would pull a multi-GB CUDA build.
.venv/bin/python -c "import torch" 2>/dev/null || "${pip[@]}" "torch==2.13.0"
"${pip[@]}" -r requirements-test.txt
"${pip[@]}" --no-build-isolation --no-deps .
# optimum's ORTModel classes, optimum-intel's OVModel classes and sentence-transformers 5 with its
# ONNX / OpenVINO backends, runners our exports are tested in and the encoder benchmark's peers:
# optimum-onnx 0.1.0 pins transformers < 4.58, which the main .venv must not be downgraded to, so
# they share a venv of their own (the same CPU torch, pinned first).
[ -x .venv-optimum-onnx/bin/python ] || python3 -m venv .venv-optimum-onnx
if ! .venv-optimum-onnx/bin/python -c "import optimum.onnxruntime, optimum.intel.openvino, sentence_transformers" 2>/dev/null; then
  .venv-optimum-onnx/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0"
  .venv-optimum-onnx/bin/python -m pip install -q --disable-pip-version-check "optimum-onnx[onnxruntime]==0.1.0" \
    "optimum-intel[openvino]==1.27.0" "sentence-transformers==5.7.0"
fi
# sentence-transformers 6 with its OpenVINO backend (optimum-intel 2.2, which supports transformers
# 5 up to 5.5): its own venv, as the main one has transformers 5.24. optimum-intel's torchvision and
# nncf requirements are left out (its OVModel classes import neither; PyPI's torchvision does not
# load beside the CPU torch). Its ONNX backend needs optimum-onnx, whose only release pins
# transformers < 4.58, which sentence-transformers 6 refuses: the peer venv above tests version 5's.
[ -x .venv-st6/bin/python ] || python3 -m venv .venv-st6
if ! .venv-st6/bin/python -c "import optimum.intel.openvino, sentence_transformers" 2>/dev/null; then
  .venv-st6/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0"
  .venv-st6/bin/python -m pip install -q --disable-pip-version-check "sentence-transformers==6.0.1" \
    "transformers>=5,<5.6" "optimum~=2.3.0" "huggingface-hub>=1.3,<1.22" "requests>=2.33,<3" setuptools \
    "openvino==2026.4.1" "openvino-tokenizers==2026.4.1.0"
  .venv-st6/bin/python -m pip install -q --disable-pip-version-check --no-deps "optimum-intel==2.2.0"
fi
echo "setup: ready ($(.venv/bin/hfexport --version))"
