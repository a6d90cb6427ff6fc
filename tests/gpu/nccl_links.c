// tests/gpu/nccl_links.c — point-to-point links over NCCL (dist/comm.h:
// group_open_links), two ranks with a GPU each: `mpirun -np 2 nccl_links`
// (tests/gpu/nccl.sh runs it where there are two GPUs, or under the emulation,
// tests/emu/nccl_emu.h). The two ranks form a pp group of two with
// parallel.comm = nccl; each opens a link it sends on (tag 5 from rank 0, tag 6
// from rank 1) and one it receives on, then:
//   - three messages each way on one link arrive in the order they were sent, in
//     the right buffers, and an op queued after comm_wait reads the received
//     values with no host wait between (the ops' stream waits for the message's
//     event);
//   - they went over the links (comm_link_bytes counts them) and nothing was
//     staged through MPI; a message of a tag without a link (7) goes over MPI,
//     staged through pinned host memory, and arrives too;
//   - opening the same links again keeps them (nothing new, no hang).
// With --mismatch the ranks declare ends that do not match (rank 0 sends tag 5,
// rank 1 receives tag 9): the job must end with a message naming the lone end.
// Every rank prints its own PASS/FAIL lines, then "N passed, N failed".
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/check.h"
#include "config.h"
#include "dist/comm.h"
#include "ops/ops.h"
#include "util.h"

#define N 4096  // floats per message

int main(int argc, char **argv) {
    comm_init(&argc, &argv);
    ops_init(comm_launched_local_rank());  // dies, saying so, without a GPU
    if (comm_world_size() != 2) die("nccl_links: run it on 2 ranks (mpirun -np 2), not %d", comm_world_size());
    Config cfg;
    config_defaults(&cfg);
    cfg.parallel.pp = 2;
    cfg.parallel.comm = COMM_NCCL;
    cfg.parallel.timeout_s = 30;
    comm_grid_init(&cfg.parallel);
    const int me = group_rank(GROUP_PP), peer = 1 - me;
    if (argc == 2 && !strcmp(argv[1], "--mismatch")) {
        const CommLink lone = me == 0 ? (CommLink){peer, 5, 1} : (CommLink){peer, 9, 0};
        group_open_links(GROUP_PP, &lone, 1);
        printf("rank %d: mismatched links were opened\n", me);
        comm_exit(0);
    }
    const int out_tag = me == 0 ? 5 : 6, in_tag = me == 0 ? 6 : 5;
    const CommLink ends[2] = {{peer, out_tag, 1}, {peer, in_tag, 0}};
    group_open_links(GROUP_PP, ends, 2);
    group_open_links(GROUP_PP, ends, 2);  // open already: kept

    // Message k of rank r holds r * 1000 + k * 10 + i / N.
    float *host = xmalloc(sizeof(float) * 3 * N, "host messages");                // (3, N)
    float *x = buf_alloc(MEM_ACTIVATIONS, sizeof(float) * 3 * N, "sent");         // (3, N)
    float *y = buf_alloc(MEM_ACTIVATIONS, sizeof(float) * 4 * N, "received");     // (4, N): 3 on the link, 1 over MPI
    float *z = buf_alloc(MEM_ACTIVATIONS, sizeof(float) * N, "read by an op");    // (N)
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < N; i++) host[(size_t)k * N + i] = (float)(me * 1000 + k * 10) + (float)i / N;
    ops_upload(x, host, sizeof(float) * 3 * N);
    zero_f32(y, 4 * N);

    CommRequest rx[3], tx[3];
    for (int k = 0; k < 3; k++) rx[k] = group_irecv_f32(GROUP_PP, y + (size_t)k * N, N, peer, in_tag);
    for (int k = 0; k < 3; k++) tx[k] = group_isend_f32(GROUP_PP, x + (size_t)k * N, N, peer, out_tag);
    for (int k = 0; k < 3; k++) comm_wait(&rx[k], "test receive");
    copy_f32(z, y + 2 * (size_t)N, N);  // queued behind the third message's event, no host wait
    for (int k = 0; k < 3; k++) comm_wait(&tx[k], "test send");
    const size_t over_links = comm_link_bytes(), staged_before = comm_staged_bytes();

    // Tag 7 has no link: MPI, staged through pinned host memory.
    CommRequest m_rx = group_irecv_f32(GROUP_PP, y + 3 * (size_t)N, N, peer, 7);
    CommRequest m_tx = group_isend_f32(GROUP_PP, x, N, peer, 7);
    comm_wait(&m_rx, "test receive over MPI");
    comm_wait(&m_tx, "test send over MPI");

    float *got = xmalloc(sizeof(float) * 4 * N, "received, on the host");  // (4, N)
    float *gz = xmalloc(sizeof(float) * N, "copied, on the host");         // (N)
    ops_sync();
    ops_download(got, y, sizeof(float) * 4 * N);
    ops_download(gz, z, sizeof(float) * N);
    int in_order = 1, mpi_ok = 1;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < N; i++)
            in_order &= got[(size_t)k * N + i] == (float)(peer * 1000 + k * 10) + (float)i / N;
    for (int i = 0; i < N; i++) mpi_ok &= got[3 * (size_t)N + i] == (float)(peer * 1000) + (float)i / N;
    CHECK(in_order, "rank %d: three messages on the link from rank %d (tag %d) arrived in the order sent", me, peer,
          in_tag);
    CHECK(!memcmp(gz, got + 2 * (size_t)N, sizeof(float) * N),
          "rank %d: an op queued after comm_wait read the received message (the ops' stream waited for it)", me);
    CHECK(over_links == 6 * N * sizeof(float) && staged_before == 0,
          "rank %d: the six messages went over NCCL links (%zu bytes), none staged through MPI (%zu)", me, over_links,
          staged_before);
    CHECK(mpi_ok && comm_staged_bytes() > staged_before && comm_link_bytes() == over_links,
          "rank %d: a message of a tag without a link went over MPI, staged (%zu bytes), and arrived", me,
          comm_staged_bytes() - staged_before);
    free(host);
    free(got);
    free(gz);
    buf_free(x);
    buf_free(y);
    buf_free(z);
    const int rc = check_summary();
    comm_exit(rc);
}
