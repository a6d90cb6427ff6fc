// train/train_cmd.h — the `femtotron train` subcommand.
#ifndef FEMTOTRON_TRAIN_CMD_H
#define FEMTOTRON_TRAIN_CMD_H

// argv[0] is "train". Returns the process exit status.
int train_main(int argc, char **argv);

#endif
