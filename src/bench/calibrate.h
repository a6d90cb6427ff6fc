// bench/calibrate.h — `femtotron bench calibrate`: measure the hardware profile
// "this" (plan/hardware.h) on the ranks of the job and write it as JSON.
#ifndef FEMTOTRON_CALIBRATE_H
#define FEMTOTRON_CALIBRATE_H

// `femtotron bench calibrate [--output FILE] [--threads T] [--quick]`; argv[0] is
// "calibrate". Every rank of the world calls it; rank 0 writes FILE.
int bench_calibrate_main(int argc, char **argv);

#endif
