/* SPDX-License-Identifier: BSD-3-Clause */
/* hm_dio_target: O_DIRECT reads into a large (tiered) buffer, checked.
 *
 *   hm_dio_target FILE MIB CALL
 *
 * Writes FILE (MIB MiB of a known pattern), then reads it back with
 * O_DIRECT, in one CALL, into an allocated buffer of MIB MiB that first holds
 * other bytes (posix_memalign, page-aligned): read, pread, readv, preadv, preadv2, preadv2cur (offset -1,
 * at the file position), read_chk (glibc's fortified entry), short (asks
 * for twice the file: a short read), buffered (read without O_DIRECT: the
 * kernel copies, nothing to bounce), chunks (two threads, each reading its
 * half in 64 KiB preads: the bounce buffer a thread keeps). Checks every byte and prints
 * "CALL ok BYTES" (exit 0), or where it differs (exit 1). odd: a length the
 * kernel refuses for O_DIRECT; prints "odd EINVAL" when it was refused.
 * Exit 77 when the filesystem refuses O_DIRECT.
 *
 * Under a --fast-budget well below MIB, the pager evicts parts of the
 * buffer while the device is still writing them: without the interposer's
 * bounce buffer (src/preload/dio.c) those bytes come back stale. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

ssize_t __read_chk(int fd, void *buf, size_t nbytes, size_t buflen);

static uint64_t word(size_t i) { return (uint64_t)i * 0x9E3779B97F4A7C15ull ^ 0x1234u; }

static int write_file(const char *path, size_t bytes) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return -1;
  uint64_t chunk[8192];
  for (size_t at = 0; at < bytes; at += sizeof chunk) {
    for (size_t k = 0; k < 8192; k++) chunk[k] = word(at / 8 + k);
    if (write(fd, chunk, sizeof chunk) != (ssize_t)sizeof chunk) return -1;
  }
  return fsync(fd) || close(fd) ? -1 : 0;
}

typedef struct {
  int fd;
  char *buf;
  size_t from, to;
  ssize_t got;
} chunk_job_t;

/* 64 KiB preads of [from, to) into the same offsets of buf. */
static void *chunk_reader(void *p) {
  chunk_job_t *j = p;
  j->got = 0;
  for (size_t at = j->from; at < j->to; at += 65536) {
    ssize_t n = pread(j->fd, j->buf + at, 65536, (off_t)at);
    if (n != 65536) return NULL;
    j->got += n;
  }
  return NULL;
}

static ssize_t two_threads(int fd, char *buf, size_t len) {
  chunk_job_t j[2] = {{fd, buf, 0, len / 2, -1}, {fd, buf, len / 2, len, -1}};
  pthread_t t;
  if (pthread_create(&t, NULL, chunk_reader, &j[1])) return -1;
  chunk_reader(&j[0]);
  pthread_join(t, NULL);
  return j[0].got + j[1].got;
}

static ssize_t one_call(const char *call, int fd, char *buf, size_t len) {
  size_t half = len / 2;
  struct iovec iov[2] = {{buf, half}, {buf + half, len - half}};
  if (!strcmp(call, "read") || !strcmp(call, "short") || !strcmp(call, "odd") || !strcmp(call, "buffered"))
    return read(fd, buf, len);
  if (!strcmp(call, "pread")) return pread(fd, buf, len, 0);
  if (!strcmp(call, "readv")) return readv(fd, iov, 2);
  if (!strcmp(call, "preadv")) return preadv(fd, iov, 2, 0);
  if (!strcmp(call, "preadv2")) return preadv2(fd, iov, 2, 0, 0);
  if (!strcmp(call, "preadv2cur")) return preadv2(fd, iov, 2, -1, 0);
  if (!strcmp(call, "read_chk")) return __read_chk(fd, buf, len, len);
  if (!strcmp(call, "chunks")) return two_threads(fd, buf, len);
  errno = EINVAL;
  return -2;
}

/* The first byte that differs from the pattern, or bytes when none does. */
static size_t first_wrong(const char *buf, size_t bytes) {
  for (size_t i = 0; i < bytes / 8; i++) {
    uint64_t w;
    memcpy(&w, buf + 8 * i, 8);
    if (w != word(i)) return 8 * i;
  }
  return bytes;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: hm_dio_target FILE MIB CALL\n");
    return 2;
  }
  const char *call = argv[3];
  size_t bytes = (size_t)strtoull(argv[2], NULL, 10) << 20;
  int is_short = !strcmp(call, "short"), odd = !strcmp(call, "odd");
  size_t len = is_short ? 2 * bytes : odd ? bytes - 1000 : bytes;
  if (!bytes || write_file(argv[1], bytes)) {
    perror("hm_dio_target: writing the file");
    return 2;
  }
  int fd = open(argv[1], O_RDONLY | (strcmp(call, "buffered") ? O_DIRECT : 0));
  if (fd < 0) {
    printf("no O_DIRECT here\n");
    return 77;
  }
  char *buf = NULL; /* aligned as O_DIRECT wants it (malloc's blocks start 16 bytes in) */
  if (posix_memalign((void **)&buf, 4096, len)) return 2;
  memset(buf, 0x5a, len); /* stale bytes that the pattern never has */
  ssize_t n = one_call(call, fd, buf, len);
  if (odd) {
    printf("odd %s\n", n < 0 && errno == EINVAL ? "EINVAL" : "not refused");
    return n < 0 && errno == EINVAL ? 0 : 1;
  }
  if (n != (ssize_t)bytes) {
    printf("%s returned %zd (errno %d), expected %zu\n", call, n, n < 0 ? errno : 0, bytes);
    return 1;
  }
  size_t bad = first_wrong(buf, bytes);
  if (bad != bytes) {
    printf("%s: byte %zu of %zu differs from the file\n", call, bad, bytes);
    return 1;
  }
  printf("%s ok %zd\n", call, n);
  free(buf);
  close(fd);
  return 0;
}
