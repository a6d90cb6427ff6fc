// train/preempt.h — stopping a run cleanly on a signal (preemption).
//
// Cluster schedulers warn a job before they stop it: Slurm sends SIGTERM (or the
// signal of --signal, e.g. SIGUSR1, some seconds ahead), and a person presses
// Ctrl-C. On SIGTERM, SIGINT or SIGUSR1 every rank finishes the optimizer step it
// is in, the ranks agree (the trainer's per-step control all-reduce: whichever rank
// saw the signal), a checkpoint of that step is written, a line says so, and the
// program exits with EXIT_PREEMPTED. A second SIGINT stops at once, saving nothing.
// The flag the handlers set is a per-process singleton (docs/DESIGN.md,
// "Per-process singletons").
#ifndef FEMTOTRON_PREEMPT_H
#define FEMTOTRON_PREEMPT_H

// The exit code of a run stopped by a signal after writing its checkpoint
// (EX_TEMPFAIL of sysexits.h: try again later, i.e. resume).
#define EXIT_PREEMPTED 75

// Install the handlers (SIGTERM, SIGINT, SIGUSR1).
void preempt_install(void);
// The signal received so far, 0 when none.
int preempt_signal(void);
// "SIGTERM", "SIGINT", "SIGUSR1", or "signal N".
const char *preempt_signal_name(int sig);

#endif
