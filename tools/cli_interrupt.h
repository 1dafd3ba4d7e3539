// Ctrl-C while generating: the first SIGINT asks the running generation to stop (it ends cleanly,
// with its summary; in a chat the reply ends and the chat goes on), a second one exits at once.
#pragma once

namespace doppler::cli {

// Installs the SIGINT handler for the rest of the process.
void CatchInterrupts();
// Whether Ctrl-C was pressed since the last ClearInterrupt.
bool Interrupted();
// Forgets an earlier Ctrl-C (a new chat turn starts): the next one stops again instead of exiting.
void ClearInterrupt();

}  // namespace doppler::cli
