// dist/comm_links.c — the point-to-point links (dist/comm_links.h): the table of
// open links and their opening, collective over the group. See dist/device_comm.h,
// "Links", for why each (group, sender, receiver, tag) has a communicator of its own.
#include "dist/comm_links.h"

#include <stdio.h>
#include <stdlib.h>

#include "dist/device_comm.h"
#include "util.h"

// The links open in this rank's groups, this rank's own and its group peers'
// alike, so that every member counts the same split rounds; slot is the device
// link on its two ends, -1 elsewhere.
typedef struct {
    GroupId g;
    int from, to, tag;  // group ranks of the sender and the receiver; the messages' tag
    int slot;
} Link;
static Link *links;  // (n_links)
static int n_links;
static size_t bytes_sent;  // comm_links_bytes

static int find_link(GroupId g, int from, int to, int tag) {
    for (int i = 0; i < n_links; i++)
        if (links[i].g == g && links[i].from == from && links[i].to == to && links[i].tag == tag) return i;
    return -1;
}

// Whether rank r's ends (3 ints each: peer, tag, send) include (peer, tag, send).
static int has_end(const int *ends, int n, int peer, int tag, int send) {
    for (int i = 0; i < n; i++)
        if (ends[3 * i] == peer && ends[3 * i + 1] == tag && ends[3 * i + 2] == send) return 1;
    return 0;
}

void comm_links_open(GroupId g, MPI_Comm comm, const CommLink *ends, int n) {
    int size = 1, me = 0;
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &me);
    // Every member's ends: their counts, then (peer, tag, send) triples.
    int *counts = xcalloc(sizeof(int) * (size_t)size, "link counts");  // (size)
    int *displs = xcalloc(sizeof(int) * (size_t)size, "link offsets");  // (size)
    MPI_Allgather(&n, 1, MPI_INT, counts, 1, MPI_INT, comm);
    int total = 0;
    for (int r = 0; r < size; r++) displs[r] = 3 * total, total += counts[r], counts[r] *= 3;
    int *mine = xcalloc(sizeof(int) * 3 * (size_t)(n > 0 ? n : 1), "link ends");       // (n, 3)
    int *all = xcalloc(sizeof(int) * 3 * (size_t)(total > 0 ? total : 1), "link ends");  // (total, 3)
    for (int i = 0; i < n; i++) mine[3 * i] = ends[i].peer, mine[3 * i + 1] = ends[i].tag, mine[3 * i + 2] = !!ends[i].send;
    MPI_Allgatherv(mine, 3 * n, MPI_INT, all, counts, displs, MPI_INT, comm);
    // Every end has its opposite on the peer; the sending ends, in rank order, are
    // the links, one split round each on every member.
    for (int r = 0; r < size; r++)
        for (int i = 0; i < counts[r] / 3; i++) {
            const int *e = all + displs[r] + 3 * i, peer = e[0], tag = e[1], send = e[2];
            if (peer < 0 || peer >= size || peer == r)
                die("point-to-point link of the %s group: rank %d names rank %d as its peer (the group has %d ranks)",
                    group_name(g), r, peer, size);
            if (!has_end(all + displs[peer], counts[peer] / 3, r, tag, !send))
                die("point-to-point link of the %s group with one end only: rank %d %s rank %d with tag %d, but rank %d "
                    "does not %s it", group_name(g), r, send ? "sends to" : "receives from", peer, tag, peer,
                    send ? "receive from" : "send to");
            const int from = send ? r : peer, to = send ? peer : r;
            if (!send || find_link(g, from, to, tag) >= 0) continue;  // once per link
            char name[64];
            snprintf(name, sizeof name, "%s group's link %d->%d (tag %d)", group_name(g), from, to, tag);
            const int end = me == from ? 0 : me == to ? 1 : -1;
            Link *grown = realloc(links, sizeof(Link) * (size_t)(n_links + 1));
            if (!grown) die("out of memory for the point-to-point links");
            links = grown;
            links[n_links++] = (Link){g, from, to, tag, devcomm_link_split((int)g, end, name)};
        }
    free(counts);
    free(displs);
    free(mine);
    free(all);
}

// A link's message must be in GPU memory on both ends: each end decides alone, so a
// bug is fatal rather than a send one way and a receive the other.
int comm_links_device_end(GroupId g, int from, int to, int tag, const void *buf, size_t n) {
    const int i = find_link(g, from, to, tag);
    if (i < 0) return -1;
    if (!devcomm_usable(buf))
        die("a point-to-point message on the %s group's link %d->%d (tag %d) is not in GPU memory (a bug)",
            group_name(g), from, to, tag);
    bytes_sent += n * sizeof(float);
    return links[i].slot;
}

size_t comm_links_bytes(void) { return bytes_sent; }

void comm_links_free(void) {
    free(links);
    links = NULL;
    n_links = 0;
}
