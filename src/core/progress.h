// Progress of long work on stderr: a line per stage that shows bytes written, the total and the
// rate while it runs, and stays as a summary when the stage ends. Shown only when stderr is a
// terminal and the user did not ask for quiet; writers on several threads may report bytes.
#pragma once
#include <cstdint>
#include <string>

namespace hfx::progress {

void set_quiet(bool quiet);
// Starts a stage ("writing decode"), ending the one before.
void stage(const std::string& name);
// The current stage will write `bytes` more (writers call this before they write).
void expect(uint64_t bytes);
// `bytes` of the current stage were written.
void add(uint64_t bytes);
// Ends the stage: its line stays as a summary when it wrote anything.
void end();
// Clears a pending status line.
void clear();

// "412.0 MiB of 1.9 GiB, 310 MiB/s": what the line shows, for tests of the format.
std::string describe(uint64_t done, uint64_t total, double seconds);

}  // namespace hfx::progress
