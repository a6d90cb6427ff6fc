// dist/comm_links.h — the point-to-point links over the device library
// (dist/comm.h: group_open_links; dist/device_comm.h, "Links"): which (group,
// sender, receiver, tag) has one, opened and looked up for dist/comm.c, which
// alone includes this header.
#ifndef FEMTOTRON_COMM_LINKS_H
#define FEMTOTRON_COMM_LINKS_H

#include <mpi.h>
#include <stddef.h>

#include "dist/comm.h"

// group_open_links for group g, whose MPI communicator is comm and whose
// collectives go through the device library: gathers every member's ends over
// comm, checks each has its opposite (fatal, naming both, if not), and splits each
// link not yet open off the group's device communicator. Collective over comm.
void comm_links_open(GroupId g, MPI_Comm comm, const CommLink *ends, int n);
// This rank's device end of the open link of (g, from, to, tag) for a message of
// n floats at buf (counted in comm_links_bytes), or -1 when there is no such link (the
// message goes over MPI). Fatal when buf is not GPU memory.
int comm_links_device_end(GroupId g, int from, int to, int tag, const void *buf, size_t n);
// Bytes of the messages that went over links so far.
size_t comm_links_bytes(void);
// Forget every link (comm_finalize; devcomm_finalize destroys their communicators).
void comm_links_free(void);

#endif
