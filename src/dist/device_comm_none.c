// dist/device_comm_none.c — the CPU build's dist/device_comm.h: no device
// collectives library, so dist/comm.c carries every collective over MPI and
// parallel.comm = nccl is refused (comm_grid_init). ./femtotron-cuda links
// dist/device_comm_nccl.cu in its place.
#include "dist/device_comm.h"

#include "util.h"

int devcomm_available(void) { return 0; }
int devcomm_gpu_count(void) { return 0; }
void devcomm_gpu_id(char id[DEVCOMM_GPU_ID_BYTES]) { id[0] = '\0'; }
int devcomm_group_ready(int slot) {
    (void)slot;
    return 0;
}
void devcomm_finalize(void) {}
int devcomm_usable(const void *p) {
    (void)p;
    return 0;
}
void devcomm_abort_all(void) {}
void devcomm_set_compute_stream(void *stream) { (void)stream; }
void devcomm_watch(void) {}

// Never reached: comm.c asks devcomm_group_ready first, and no group is.
static _Noreturn void absent(const char *what) {
    die("%s: this build has no device collectives library (the CPU build: parallel.comm mpi)", what);
}
void devcomm_unique_id(unsigned char id[DEVCOMM_ID_BYTES]) {
    (void)id;
    absent("devcomm_unique_id");
}
void devcomm_group_init(int slot, const char *name, const unsigned char id[DEVCOMM_ID_BYTES], int rank, int size,
                        double timeout_s) {
    (void)slot, (void)name, (void)id, (void)rank, (void)size, (void)timeout_s;
    absent("devcomm_group_init");
}
int devcomm_link_split(int slot, int end, const char *name) {
    (void)slot, (void)end, (void)name;
    absent("devcomm_link_split");
}
int devcomm_alltoallv_f32(int slot, const float *send, const int *send_counts, const int *send_displs, float *recv,
                          const int *recv_counts, const int *recv_displs) {
    (void)slot, (void)send, (void)send_counts, (void)send_displs, (void)recv, (void)recv_counts, (void)recv_displs;
    absent("devcomm_alltoallv_f32");
}
int devcomm_send_f32(int link, const float *buf, size_t n) {
    (void)link, (void)buf, (void)n;
    absent("devcomm_send_f32");
}
int devcomm_recv_f32(int link, float *buf, size_t n) {
    (void)link, (void)buf, (void)n;
    absent("devcomm_recv_f32");
}
int devcomm_allreduce_f32(int slot, float *buf, size_t n, int max) {
    (void)slot, (void)buf, (void)n, (void)max;
    absent("devcomm_allreduce_f32");
}
int devcomm_reduce_scatter_f32(int slot, const float *in, float *out, size_t chunk) {
    (void)slot, (void)in, (void)out, (void)chunk;
    absent("devcomm_reduce_scatter_f32");
}
int devcomm_allgather_f32(int slot, float *buf, size_t chunk) {
    (void)slot, (void)buf, (void)chunk;
    absent("devcomm_allgather_f32");
}
int devcomm_reduce_scatter_split_f32(int slot, const float *in, float *out, size_t len) {
    (void)slot, (void)in, (void)out, (void)len;
    absent("devcomm_reduce_scatter_split_f32");
}
int devcomm_allgather_split_f32(int slot, float *buf, size_t len) {
    (void)slot, (void)buf, (void)len;
    absent("devcomm_allgather_split_f32");
}
int devcomm_event_test(int ev, const char *what) {
    (void)ev;
    absent(what);
}
int devcomm_event_follow(int ev, const char *what) {
    (void)ev;
    absent(what);
}
void *devcomm_host_alloc(size_t bytes) {
    (void)bytes;
    absent("devcomm_host_alloc");
}
void devcomm_host_free(void *p) {
    (void)p;
    absent("devcomm_host_free");
}
void devcomm_copy(void *dst, const void *src, size_t bytes) {
    (void)dst, (void)src, (void)bytes;
    absent("devcomm_copy");
}
