/* SPDX-License-Identifier: BSD-3-Clause */
/* OS primitives of the workflow channel (prim/chan.c). Same contract as
 * prim.h: 0 or a non-negative count on success, a negative errno on failure;
 * real paths, never under an fsroot. */
#ifndef HM_PRIM_CHAN_H
#define HM_PRIM_CHAN_H

#include <stddef.h>
#include <stdint.h>

/* Opens path read-write; create: 0 open only, 1 create exclusively, 2
 * create or truncate an existing one. Returns the descriptor (O_CLOEXEC). */
int _hm_prim_chan_open(const char *path, int create);
int _hm_prim_chan_size(int fd, uint64_t *size);
int _hm_prim_chan_truncate(int fd, uint64_t size);
/* MAP_SHARED read-write mapping of the first len bytes of fd; sync asks for
 * MAP_SYNC (DAX) and falls back to a plain shared mapping where refused. */
int _hm_prim_chan_map(int fd, size_t len, int sync, void **out);
int _hm_prim_chan_unlink(const char *path);
/* Allocates [off, off+len) of the file (-ENOSPC when the tier is full). */
int _hm_prim_chan_reserve(int fd, uint64_t off, uint64_t len);
int _hm_prim_chan_pid(void);

#endif
