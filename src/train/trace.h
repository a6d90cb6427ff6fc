// train/trace.h — Chrome trace-event timeline (logging.trace), opens in Perfetto
// (ui.perfetto.dev) or chrome://tracing. Each rank appends complete events
// ("ph": "X") to its own file PATH.rankN while training; trace_close merges them
// into PATH (rank 0), one track (tid) per rank.
#ifndef FEMTOTRON_TRACE_H
#define FEMTOTRON_TRACE_H

// Start tracing to `path` (no-op when path is ""). t_origin: the time 0 of the trace.
void trace_open(const char *path, double t_origin);
int trace_enabled(void);
// One event [t0, t1) (seconds from now_seconds()); micro < 0 for none.
void trace_event(const char *name, double t0, double t1, int step, int chunk, int micro);
// Collective: every rank closes its file, rank 0 merges them into the path.
void trace_close(void);

#endif
