// train/plot_cmd.h — `femtotron plot`: metrics files (train/metrics_log.h) drawn as
// one PNG by gnuplot. One process, no MPI; safe on the file of a run still going.
#ifndef FEMTOTRON_PLOT_CMD_H
#define FEMTOTRON_PLOT_CMD_H

int plot_main(int argc, char **argv);

#endif
