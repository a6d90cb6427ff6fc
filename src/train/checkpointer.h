// train/checkpointer.h — saving a rank's training state, synchronously or, with
// checkpoint.async, from a snapshot that a background thread writes while training
// goes on.
//
// An async save: the rank's checkpoint pieces (its own parameters and AdamW
// moments) are copied into the snapshot, a planned buffer (Rank.snapshot,
// MEM_SNAPSHOT: in the memory line and predicted by the planner); the save begins
// (collective: the temporary directory and the sized files); a writer thread
// pwrite()s, checksums and fsyncs this rank's share from the snapshot — it never
// communicates, so MPI stays on the main thread. Each step the trainer's control
// all-reduce (train_cmd.c) says whether every rank's writer is done; then the save
// is finished (collective: checksums summed, manifest, the publishing rename). At
// most one save is in flight: a new one, the end of training and preemption finish
// the one in flight first. A job killed during an async save leaves only a
// temporary directory beside the previous checkpoint, which stays intact.
#ifndef FEMTOTRON_CHECKPOINTER_H
#define FEMTOTRON_CHECKPOINTER_H

#include <pthread.h>
#include <stdatomic.h>

#include "io/checkpoint.h"

typedef struct {
    int async;
    CkptPiece *pieces;     // (max_pieces) the live buffers' pieces (dp_save_pieces)
    CkptPiece *snap;       // (max_pieces) the same pieces in the snapshot
    CkptSave save;         // the save in flight
    pthread_t writer;
    atomic_int writing;    // 1 while this rank's writer thread runs
    int in_flight;         // begun and not yet published (the same on every rank)
    double t_begin;        // when the save in flight began (for the report)
    struct MetricsLog *metrics;  // where a published save is recorded (NULL: nowhere)
} Checkpointer;

struct Trainer;
struct MetricsLog;

// Write the trainer's state as a checkpoint of its current step (collective); with
// async, start it and return (finishing a save still in flight first).
void checkpointer_save(struct Trainer *t);
// 1 while this rank's writer thread is still writing.
int checkpointer_writing(const struct Trainer *t);
// Publish the save in flight, waiting for this rank's writer (collective; nothing
// to do when none is in flight).
void checkpointer_finish(struct Trainer *t);

#endif
