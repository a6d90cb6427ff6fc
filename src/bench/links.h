// bench/links.h — `femtotron bench links`: the attained bandwidth and latency of
// every pair of ranks (one rank per node: the links between nodes), written into
// a hardware profile's "links" matrix for `plan --links` (plan/placement.h).
#ifndef FEMTOTRON_BENCH_LINKS_H
#define FEMTOTRON_BENCH_LINKS_H

// Round r of the round-robin schedule of n ranks (n even; the circle method:
// rank n-1 stays, the others rotate): the partner of rank i, or -1 (odd n: the
// "bye"). Over rounds 0..n'-2 (n' = n rounded up to even) every pair meets
// exactly once, and in each round the pairs are disjoint.
int links_partner(int n, int round, int i);

// `femtotron bench links [--output FILE] [--bytes B] [--reps R]`; argv[0] is
// "links". Every rank of the world calls it; rank 0 writes FILE.
int bench_links_main(int argc, char **argv);

#endif
