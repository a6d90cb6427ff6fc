// dist/comm_stage.c — the pinned staging of MPI's collectives of GPU buffers (see
// comm_stage.h). One area per request slot of dist/comm.c, grown to the largest
// message the slot has carried and kept (pinned allocations take milliseconds).
#include "dist/comm_stage.h"

#include <string.h>

#include "dist/device_comm.h"
#include "util.h"

#define STAGE_SLOTS 256  // dist/comm.c's MAX_REQUESTS

typedef struct {
    char *host;           // (cap) pinned
    size_t cap;
    void *dst;            // the result's destination at completion, NULL: none pending
    size_t off, bytes;    // the result: host[off .. off + bytes)
} StageSlot;
static StageSlot slots[STAGE_SLOTS];
static size_t staged_total;

static StageSlot *slot_of(int slot) {
    if (slot < 0 || slot >= STAGE_SLOTS) die("comm staging: request slot %d out of range", slot);
    return &slots[slot];
}

// Slot's staging, at least `bytes` (contents not kept across a growth).
static char *area(int slot, size_t bytes) {
    StageSlot *s = slot_of(slot);
    if (bytes > s->cap) {
        if (s->host) devcomm_host_free(s->host);
        s->host = devcomm_host_alloc(bytes);
        s->cap = bytes;
    }
    return s->host;
}

static void copy(void *dst, const void *src, size_t bytes) {
    devcomm_copy(dst, src, bytes);
    staged_total += bytes;
}

// At completion: `bytes` at offset `off` of slot's staging go to dst.
static void result(int slot, void *dst, size_t off, size_t bytes) {
    StageSlot *s = slot_of(slot);
    s->dst = dst, s->off = off, s->bytes = bytes;
}

int stage_wanted(const void *buf) { return buf && devcomm_usable(buf); }

void *stage_inplace(int slot, void *buf, size_t bytes) {
    if (!stage_wanted(buf)) return buf;
    char *h = area(slot, bytes);
    copy(h, buf, bytes);
    result(slot, buf, 0, bytes);
    return h;
}

const void *stage_send(int slot, const void *buf, size_t bytes) {
    if (!stage_wanted(buf)) return buf;
    char *h = area(slot, bytes);
    copy(h, buf, bytes);
    return h;
}

void *stage_recv(int slot, void *buf, size_t bytes) {
    if (!stage_wanted(buf)) return buf;
    result(slot, buf, 0, bytes);
    return area(slot, bytes);
}

char *stage_in_out(int slot, const void *in, size_t in_bytes, void *out, size_t out_bytes, int keep_out) {
    if (!stage_wanted(in) && !stage_wanted(out)) return NULL;
    char *h = area(slot, in_bytes + out_bytes);
    copy(h, in, in_bytes);
    if (keep_out) copy(h + in_bytes, out, out_bytes);
    result(slot, out, in_bytes, out_bytes);
    return h;
}

void stage_local_copy(void *dst, const void *src, size_t bytes) {
    if (stage_wanted(dst) || stage_wanted(src)) devcomm_copy(dst, src, bytes);
    else memcpy(dst, src, bytes);
}

void stage_complete(int slot) {
    StageSlot *s = slot_of(slot);
    if (!s->dst) return;
    copy(s->dst, s->host + s->off, s->bytes);
    s->dst = NULL;
}

size_t stage_bytes(void) { return staged_total; }

void stage_free_all(void) {
    for (int i = 0; i < STAGE_SLOTS; i++) {
        if (slots[i].host) devcomm_host_free(slots[i].host);
        slots[i] = (StageSlot){0};
    }
}
