// train/checkpointer.c — synchronous and asynchronous saves (checkpointer.h).
#include "train/checkpointer.h"

#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "dist/comm.h"
#include "ops/ops.h"
#include "train/metrics_log.h"
#include "train/trainer.h"
#include "util.h"

// The writer thread: this rank's pieces, from the snapshot, onto the disk. No MPI.
static void *writer_main(void *arg) {
    Trainer *t = arg;
    omp_set_num_threads(1);  // the checksum's loops: leave the cores to training
    checkpoint_save_write(&t->ckpt.save);
    atomic_store(&t->ckpt.writing, 0);
    return NULL;
}

// Rank 0, once a save is published: the console line and the metrics record. An
// async save is reported when it is published, some steps after it began; its
// seconds are from the snapshot to the publishing rename.
static void report(const Trainer *t, int step, double seconds, const char *how) {
    if (comm_world_rank() != 0) return;
    char path[CFG_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/step_%07d", t->cfg.checkpoint.dir, step);
    const double bytes = dir_file_bytes(path);
    printf("checkpoint: step %d written to %s (%.1f MiB, %.2f s%s)\n", step, path, bytes / (1024.0 * 1024.0),
           seconds, how);
    fflush(stdout);
    if (t->ckpt.metrics) metrics_checkpoint(t->ckpt.metrics, step, path, bytes, seconds);
}

void checkpointer_finish(Trainer *t) {
    Checkpointer *c = &t->ckpt;
    if (!c->in_flight) return;
    pthread_join(c->writer, NULL);
    checkpoint_save_finish(&c->save);
    c->in_flight = 0;
    report(t, c->save.st.step, now_seconds() - c->t_begin, ", written in the background");
}

int checkpointer_writing(const Trainer *t) { return atomic_load(&t->ckpt.writing); }

void checkpointer_save(Trainer *t) {
    Checkpointer *c = &t->ckpt;
    const char *dir = t->cfg.checkpoint.dir;
    const int n = dp_save_pieces(&t->rank.dp, c->pieces);
    double t0 = now_seconds();
    if (!c->async) {
        ops_sync();  // the host reads the pieces: the last update must have finished
        checkpoint_save_pieces(dir, &t->cfg, &t->rank.model, c->pieces, n, &t->state);
        report(t, t->state.step, now_seconds() - t0, "");
        return;
    }
    checkpointer_finish(t);  // at most one save in flight
    // Snapshot the pieces: training may change the live buffers from the next step on.
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        c->snap[i] = c->pieces[i];
        c->snap[i].data = t->rank.snapshot + at;
        copy_f32(c->snap[i].data, c->pieces[i].data, c->pieces[i].hi - c->pieces[i].lo);
        at += c->pieces[i].hi - c->pieces[i].lo;
    }
    ops_sync();  // the snapshot's copies have finished before the host reads them
    checkpoint_save_begin(&c->save, dir, &t->cfg, &t->rank.model, c->snap, n, &t->state);
    c->t_begin = t0;
    c->in_flight = 1;
    atomic_store(&c->writing, 1);
    if (pthread_create(&c->writer, NULL, writer_main, t) != 0) die("cannot start the checkpoint writer thread");
}
