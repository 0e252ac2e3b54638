/* SPDX-License-Identifier: BSD-3-Clause */
/* Tagged allocation: one non-inlined function per data structure, so that a
 * call-stack-based allocation-site profiler (hetmem profile/run) sees each
 * structure as its own site, plus bytes per tag and an in-app placement policy
 * that binds the "fast" tags' pages to a chosen NUMA node with mbind. */
#include "lattice.h"

#include <numa.h>
#include <numaif.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const lat_tag_names[NTAGS] = {"gauge", "clover", "vectors", "testvec",
                                          "coarse", "krylov", "halo"};

static size_t hm__bytes[NTAGS], hm__peak[NTAGS];
static int hm__fast[NTAGS];
static int hm__node = -1; /* node to bind fast tags to; -1: no binding */

/* 64-byte header keeps the tag and size so lat_free can account for it */
typedef struct { size_t size; int tag; char pad[64 - sizeof(size_t) - sizeof(int)]; } hdr_t;

static void *hm__alloc(int tag, size_t bytes)
{
    hdr_t *h = malloc(sizeof(hdr_t) + bytes);
    if (!h) {
        fprintf(stderr, "hm-lattice: out of memory allocating %zu bytes for %s\n", bytes,
                lat_tag_names[tag]);
        MPI_Abort(MPI_COMM_WORLD, 2);
        return NULL;
    }
    h->size = bytes;
    h->tag = tag;
    char *p = (char *)(h + 1);
    if (hm__fast[tag] && hm__node >= 0) {
        /* bind the page-aligned interior before first touch */
        uintptr_t a = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;
        uintptr_t e = ((uintptr_t)p + bytes) & ~(uintptr_t)4095;
        if (e > a) {
            unsigned long mask[16] = {0};
            mask[hm__node / (8 * (int)sizeof(unsigned long))] |=
                1UL << (hm__node % (8 * (int)sizeof(unsigned long)));
            (void)mbind((void *)a, e - a, MPOL_BIND, mask, 16 * 8 * sizeof(unsigned long), 0);
        }
    }
    memset(p, 0, bytes);
    hm__bytes[tag] += bytes;
    if (hm__bytes[tag] > hm__peak[tag])
        hm__peak[tag] = hm__bytes[tag];
    return p;
}

void lat_free(void *p)
{
    if (!p)
        return;
    hdr_t *h = (hdr_t *)p - 1;
    hm__bytes[h->tag] -= h->size;
    free(h);
}

__attribute__((noinline)) void *lat_alloc_gauge(size_t b) { return hm__alloc(TAG_GAUGE, b); }
__attribute__((noinline)) void *lat_alloc_clover(size_t b) { return hm__alloc(TAG_CLOVER, b); }
__attribute__((noinline)) void *lat_alloc_vectors(size_t b) { return hm__alloc(TAG_VECTORS, b); }
__attribute__((noinline)) void *lat_alloc_testvec(size_t b) { return hm__alloc(TAG_TESTVEC, b); }
__attribute__((noinline)) void *lat_alloc_coarse(size_t b) { return hm__alloc(TAG_COARSE, b); }
__attribute__((noinline)) void *lat_alloc_krylov(size_t b) { return hm__alloc(TAG_KRYLOV, b); }
__attribute__((noinline)) void *lat_alloc_halo(size_t b) { return hm__alloc(TAG_HALO, b); }

size_t lat_tag_bytes(int tag) { return hm__bytes[tag]; }
size_t lat_tag_peak(int tag) { return hm__peak[tag]; }
int lat_tag_fast(int tag) { return hm__fast[tag]; }

int lat_alloc_policy(const char *fast, int node, char *note, size_t notelen)
{
    memset(hm__fast, 0, sizeof hm__fast);
    if (!strcmp(fast, "all")) {
        for (int t = 0; t < NTAGS; t++)
            hm__fast[t] = 1;
    } else if (strcmp(fast, "none") && fast[0]) {
        char buf[128];
        snprintf(buf, sizeof buf, "%s", fast);
        for (char *s = strtok(buf, ","); s; s = strtok(NULL, ",")) {
            int found = 0;
            for (int t = 0; t < NTAGS; t++)
                if (!strcmp(s, lat_tag_names[t]))
                    hm__fast[t] = found = 1;
            if (!found) {
                snprintf(note, notelen, "unknown tag '%s' in fast (tags: gauge,clover,vectors,"
                         "testvec,coarse,krylov,halo)", s);
                return -1;
            }
        }
    }
    int nodes = numa_available() < 0 ? 1 : numa_max_node() + 1;
    if (node < 0) {
        hm__node = -1;
        snprintf(note, notelen, "no fast node given: placement left to the OS");
    } else if (nodes <= 1) {
        hm__node = -1;
        snprintf(note, notelen, "one NUMA node: fast-tag binding is a no-op here");
    } else if (node >= nodes) {
        snprintf(note, notelen, "fast node %d does not exist (%d nodes)", node, nodes);
        return -1;
    } else {
        hm__node = node;
        snprintf(note, notelen, "fast tags bound to NUMA node %d with mbind", node);
    }
    return 0;
}
