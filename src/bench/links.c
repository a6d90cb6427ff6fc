// bench/links.c — `femtotron bench links` (bench/links.h).
//
// Schedule: n-1 rounds (n even; n rounds for odd n, one rank idle per round) of
// n/2 disjoint pairs, every pair exactly once (round-robin, circle method). All
// pairs of a round measure at once, between world barriers: the time is O(n)
// rounds of a constant per-pair cost (about 2·reps·(B/bw + 64 lat) each), not
// O(n^2) pairs one after another: 1,000 nodes at 8 MiB and 25 GB/s take about
// a thousand rounds of ~10 ms, some 10 s. Pairs measured at once share the
// fabric as they do in training (a link that is fast alone but shares an
// oversubscribed uplink shows what it delivers under load).
//
// Per pair (i < j):
//   latency  64 ping-pongs of one value; lat = best round trip / 2;
//   bw i->j  i sends B bytes, j answers one value; t = best of reps;
//            bw = B / (t - 2·lat) (the answer's and the send's latency removed);
//   bw j->i  the same the other way.
// Every rank fills its row; the matrix is summed over the world (each entry is
// written by exactly one rank), and rank 0 writes it into FILE's "links" object
// (other keys kept: run it before or after bench calibrate, which rewrites the
// file: so bench links goes second).
#define _POSIX_C_SOURCE 200809L
#include "bench/links.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/comm.h"
#include "plan/placement.h"
#include "util.h"

int links_partner(int n, int round, int i) {
    const int m = n + (n & 1);  // even: the odd rank count gets a bye slot m-1
    int partner;
    if (i == m - 1) {
        partner = round % (m - 1);  // the fixed rank meets the one at position 0 of the circle
    } else {
        int pos = (i - round + (m - 1)) % (m - 1);  // position on the circle
        partner = pos == 0 ? m - 1 : (round + (m - 1 - pos)) % (m - 1);
    }
    return partner >= n ? -1 : partner;
}

// One ping-pong: the lower rank sends `n` floats and receives one back.
static void ping(float *buf, size_t n, int me, int other, int first) {
    CommRequest r;
    if (first) {
        r = group_isend_f32(GROUP_WORLD, buf, n, other, 7);
        comm_wait(&r, "links send");
        r = group_irecv_f32(GROUP_WORLD, buf, 1, other, 8);
        comm_wait(&r, "links answer");
    } else {
        r = group_irecv_f32(GROUP_WORLD, buf, n, other, 7);
        comm_wait(&r, "links receive");
        r = group_isend_f32(GROUP_WORLD, buf, 1, other, 8);
        comm_wait(&r, "links answer");
    }
    (void)me;
}

// Best time of `reps` ping-pongs where `sender` sends n floats and the other answers.
static double best_pingpong(float *buf, size_t n, int me, int other, int sender, int reps) {
    double best = 1e30;
    for (int k = 0; k < reps; k++) {
        double t0 = now_seconds();
        ping(buf, n, me, other, me == sender);
        double t = now_seconds() - t0;
        if (t < best) best = t;
    }
    return best;
}

static long long parse_pos(const char *opt, const char *v) {
    char *end;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || x < 1) die("bench links: %s %s: expected a positive integer", opt, v);
    return x;
}

int bench_links_main(int argc, char **argv) {
    const char *out = "profile.json";
    long long bytes = 8 << 20, reps = 3;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) die("bench links: %s needs a value", argv[i]);
        if (strcmp(argv[i], "--output") == 0) out = argv[++i];
        else if (strcmp(argv[i], "--bytes") == 0) bytes = parse_pos(argv[i], argv[i + 1]), i++;
        else if (strcmp(argv[i], "--reps") == 0) reps = parse_pos(argv[i], argv[i + 1]), i++;
        else die("bench links: unknown option \"%s\" (--output FILE, --bytes B, --reps R)", argv[i]);
    }
    const int n = comm_world_size(), me = comm_world_rank();
    if (n < 2) die("bench links: needs at least 2 ranks, one per node (mpirun -np NODES --map-by ppr:1:node)");
    const size_t count = (size_t)(bytes / 4 > 0 ? bytes / 4 : 1);
    float *buf = xcalloc(sizeof(float) * count, "links buffer");  // (count)
    LinkMatrix m;
    links_init(&m, n);
    // Host names: each rank's in turn (n broadcasts of 64 bytes).
    char host[64] = {0};
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "rank%d", me);
    for (int r = 0; r < n; r++) {
        char name[64];
        memcpy(name, host, sizeof name);
        group_broadcast_bytes(GROUP_WORLD, name, sizeof name, r);
        memcpy(m.names[r], name, sizeof name);
        m.names[r][63] = '\0';
    }
    const int rounds = n + (n & 1) - 1;
    double t_start = now_seconds();
    for (int round = 0; round < rounds; round++) {
        group_barrier(GROUP_WORLD);
        int other = links_partner(n, round, me);
        if (other < 0) continue;
        int lo = me < other ? me : other;
        best_pingpong(buf, 1, me, other, lo, 4);  // warm the pair's connection up
        double lat = best_pingpong(buf, 1, me, other, lo, 64) / 2;
        // Lower rank sends first, then the higher: both ends run the same exchanges
        // in the same order, and each keeps the time of the direction it sent.
        double first = best_pingpong(buf, count, me, other, lo, (int)reps);
        double second = best_pingpong(buf, count, me, other, lo == me ? other : me, (int)reps);
        double to = lo == me ? first : second;  // me -> other
        double payload = (double)count * 4;
        m.lat[(size_t)me * n + other] = lat;
        m.bw[(size_t)me * n + other] = payload / (to - 2 * lat > 1e-9 ? to - 2 * lat : 1e-9);
    }
    group_allreduce_sum_f64(GROUP_WORLD, m.bw, (size_t)n * n);
    group_allreduce_sum_f64(GROUP_WORLD, m.lat, (size_t)n * n);
    double elapsed = now_seconds() - t_start;
    if (me == 0) {
        links_save(&m, out);
        double lo = 1e300, hi = 0, lsum = 0;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                if (i == j) continue;
                double b = m.bw[(size_t)i * n + j];
                lo = b < lo ? b : lo;
                hi = b > hi ? b : hi;
                lsum += m.lat[(size_t)i * n + j];
            }
        printf("bench links: %d ranks, %d rounds of disjoint pairs, %.2f s; bandwidth %.3g .. %.3g GB/s, mean "
               "latency %.3g us; written to %s (\"links\")\n", n, rounds, elapsed, lo / 1e9, hi / 1e9,
               1e6 * lsum / ((double)n * (n - 1)), out);
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++)
                if (strcmp(m.names[i], m.names[j]) == 0) {
                    printf("bench links: note: ranks %d and %d share host %s: these entries are links inside one "
                           "node (start one rank per node to measure nodes)\n", i, j, m.names[i]);
                    i = j = n;  // once
                }
    }
    links_free(&m);
    free(buf);
    return 0;
}
