/* The size parser shared by libhetmem and the benchmark kernels (size.c). */
#ifndef HM_SIZE_H
#define HM_SIZE_H
#include <stdint.h>

/* Bytes in text: 0, -EINVAL (not a size, or fractional bytes) or -ERANGE. */
int _hm_parse_size(const char *text, uint64_t *out);

#endif
