// train/preempt.c — the signal handlers of preempt.h: they only record the signal
// (async-signal-safe); the trainer acts on it at the end of the step.
#define _POSIX_C_SOURCE 200809L
#include "train/preempt.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

static volatile sig_atomic_t received = 0, sigints = 0;

static void on_signal(int sig) {
    if (sig == SIGINT && sigints++ > 0) {  // the second Ctrl-C: stop now
        static const char msg[] = "femtotron: second SIGINT: stopping at once, without a checkpoint\n";
        ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)ignored;
        _exit(128 + SIGINT);
    }
    if (!received) received = sig;
}

void preempt_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    const int sigs[] = {SIGTERM, SIGINT, SIGUSR1};
    for (int i = 0; i < 3; i++)
        if (sigaction(sigs[i], &sa, NULL) != 0) die_errno("cannot install the handler of signal %d", sigs[i]);
}

int preempt_signal(void) { return received; }

const char *preempt_signal_name(int sig) {
    static char other[24];
    if (sig == SIGTERM) return "SIGTERM";
    if (sig == SIGINT) return "SIGINT";
    if (sig == SIGUSR1) return "SIGUSR1";
    snprintf(other, sizeof other, "signal %d", sig);
    return other;
}
