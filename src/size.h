/* SPDX-License-Identifier: BSD-3-Clause */
/* The size parser shared by libhetmem and the benchmark kernels (size.c). */
#ifndef HM_SIZE_H
#define HM_SIZE_H
#include <stddef.h>
#include <stdint.h>

/* Bytes in text: 0, -EINVAL (not a size, or fractional bytes) or -ERANGE. */
int _hm_parse_size(const char *text, uint64_t *out);
/* Bytes as people read them in messages: "512 bytes", "1.5 MiB", "23.5 GiB". */
void _hm_format_size(uint64_t bytes, char *out, size_t len);

#endif
