// train/train_configure.h — the training command's configuration, agreed by every rank.
#ifndef FEMTOTRON_TRAIN_CONFIGURE_H
#define FEMTOTRON_TRAIN_CONFIGURE_H

#include "config.h"

// Load the --config files (config_files, n_files, in order), apply the command-line
// keys (argc/argv: the arguments after the --config files) to cfg, let the planner choose the layout when parallel.auto asks, and validate
// the result. Every rank does the same with the same inputs, so a configuration
// error is every rank's error: it is printed once (by the lowest rank that found
// it; without the rank when rank 0 did) and every rank exits with status 1 through
// comm_exit (a normal end of the job, not comm_abort's), so the launcher adds no
// abort banner. Collective.
void train_configure(Config *cfg, char **config_files, int n_files, int argc, char **argv);

#endif
