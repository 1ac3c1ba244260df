// The Python interpreter hfexport's Python side runs under (runners, AOTInductor), and running it.
#pragma once
#include <string>
#include <vector>

namespace hfx {

// HFEXPORT_PYTHON, else the Python next to this executable (a venv's bin/), else python3 on PATH.
std::string python_interpreter();

// Runs `args` (args[0] looked up on PATH) to completion; returns its exit status (-1: it could
// not start; 128 + N: killed by signal N). Its stdout and stderr together go to `output`.
int run_capturing(const std::vector<std::string>& args, std::string& output);

}  // namespace hfx
