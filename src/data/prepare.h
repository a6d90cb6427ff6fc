// data/prepare.h — `femtotron prepare`: text files → byte-level llm.c token shards.
#ifndef FEMTOTRON_PREPARE_H
#define FEMTOTRON_PREPARE_H

// argv[0] is "prepare". Returns the process exit status (0); bad input is fatal.
int prepare_main(int argc, char **argv);

#endif
