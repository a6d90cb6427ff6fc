// dist/comm_device.c — parallel.comm at the grid's start: whether the collectives
// of GPU buffers go through the device library (NCCL, dist/device_comm.h) or MPI,
// and that library's communicators, one per grid group. Called by
// dist/comm.c's comm_grid_init alone (dist/comm_device.h).
#include "dist/comm_device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/device_comm.h"
#include "util.h"

// A GPU that two ranks of this node run on (its PCI bus id into shared), or 0
// when every rank of the node has its own. Collective over the node.
static int gpu_shared_on_node(char shared[DEVCOMM_GPU_ID_BYTES]) {
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    int n = 1;
    MPI_Comm_size(local, &n);
    char me[DEVCOMM_GPU_ID_BYTES] = {0};
    devcomm_gpu_id(me);
    char (*ids)[DEVCOMM_GPU_ID_BYTES] = xcalloc((size_t)n * DEVCOMM_GPU_ID_BYTES, "GPU ids");  // (n, 64)
    MPI_Allgather(me, DEVCOMM_GPU_ID_BYTES, MPI_CHAR, ids, DEVCOMM_GPU_ID_BYTES, MPI_CHAR, local);
    MPI_Comm_free(&local);
    int found = 0;
    for (int i = 0; i < n && !found; i++)
        for (int j = i + 1; j < n && !found; j++)
            if (!strncmp(ids[i], ids[j], DEVCOMM_GPU_ID_BYTES)) {
                snprintf(shared, DEVCOMM_GPU_ID_BYTES, "%s", ids[i]);
                found = 1;
            }
    free(ids);
    return found;
}

// parallel.comm: NCCL for the collectives of GPU buffers, or MPI. NCCL refuses two
// ranks of one communicator on one GPU: NCCL only when no two ranks of a node run on
// the same GPU (compared by PCI bus id, so CUDA_VISIBLE_DEVICES per rank counts as
// the distinct GPUs it is). Collective over the world, so that every rank decides alike.
static int use_device_comm(const ParallelConfig *p) {
    if (p->comm == COMM_MPI) return 0;
    if (!devcomm_available()) {
        if (p->comm == COMM_NCCL)
            die("parallel.comm = nccl: this binary has no NCCL (it is the CPU build); build ./femtotron-cuda with "
                "`make cuda`, or set parallel.comm = mpi or auto");
        return 0;
    }
    char gpu[DEVCOMM_GPU_ID_BYTES] = {0};
    const int here = gpu_shared_on_node(gpu);
    int crowded = here;  // some node runs two ranks on one GPU
    MPI_Allreduce(MPI_IN_PLACE, &crowded, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (!crowded) return 1;
    const char *where = here ? gpu : "a GPU of another node";
    if (p->comm == COMM_NCCL)
        die("parallel.comm = nccl: ranks share GPUs (two ranks run on %s), and NCCL refuses two ranks of one "
            "communicator on one GPU: run one rank per GPU, or set parallel.comm = mpi or auto (MPI through "
            "pinned host memory)", where);
    if (comm_world_rank() == 0)
        fprintf(stderr, "femtotron: note: parallel.comm = auto: ranks share GPUs (two ranks run on %s), so "
                        "collectives of GPU buffers go over MPI, staged through pinned host memory, not NCCL\n", where);
    return 0;
}

int comm_device_setup(const ParallelConfig *p, const MPI_Comm groups[GROUP_COUNT]) {
    if (!use_device_comm(p)) return 0;
    // One NCCL communicator per group of more than one rank, in group order on every
    // rank (each member joins its group's at the same step); its rank 0 makes the id.
    _Static_assert(GROUP_COUNT <= DEVCOMM_MAX_GROUPS, "device_comm.h holds a communicator per group");
    for (int i = 1; i <= GROUP_EDP; i++) {
        const GroupId g = (GroupId)i;
        if (group_size(g) == 1) continue;
        unsigned char id[DEVCOMM_ID_BYTES];
        if (group_rank(g) == 0) devcomm_unique_id(id);
        MPI_Bcast(id, DEVCOMM_ID_BYTES, MPI_BYTE, 0, groups[i]);
        devcomm_group_init(i, group_name(g), id, group_rank(g), group_size(g), p->timeout_s);
    }
    return 1;
}
