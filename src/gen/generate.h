// gen/generate.h — `femtotron generate`: sample text from a checkpoint or a Hugging
// Face Llama directory, streaming it to stdout.
#ifndef FEMTOTRON_GENERATE_H
#define FEMTOTRON_GENERATE_H

// argv[0] is "generate". Returns the process exit status; bad input is fatal.
int generate_main(int argc, char **argv);

#endif
