#include "tools/cli_interrupt.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

namespace doppler::cli {
namespace {

std::atomic<int> interrupts{0};  // lock-free, so safe to touch from the handler

void OnInterrupt(int) {
  if (interrupts.fetch_add(1) >= 1) {
    constexpr char kBye[] = "\ninterrupted twice: exiting\n";
    (void)!::write(STDERR_FILENO, kBye, sizeof(kBye) - 1);
    ::_exit(130);  // 128 + SIGINT, as a shell reports a process killed by it
  }
  constexpr char kStopping[] = "\n(stopping the generation; Ctrl-C again exits)\n";
  (void)!::write(STDERR_FILENO, kStopping, sizeof(kStopping) - 1);
}

}  // namespace

void CatchInterrupts() {
  struct sigaction action = {};
  action.sa_handler = OnInterrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a chat waiting for its next line keeps waiting
  sigaction(SIGINT, &action, nullptr);
}

bool Interrupted() { return interrupts.load() > 0; }

void ClearInterrupt() { interrupts.store(0); }

}  // namespace doppler::cli
