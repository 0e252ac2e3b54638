/* SPDX-License-Identifier: BSD-3-Clause */
/* The pager's error contract: each bad configuration or storage directory
 * gives a negative errno and a one-line message that says what to fix. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sdm_testutil.h"
#include "testhelper.h"

#define MiB (1024ull * 1024ull)

static char mnt_ro[600], mnt_tmpfs[600], mnt_small[600], img[600];

static void cleanup_mounts(void) {
  if (mnt_ro[0]) umount2(mnt_ro, MNT_DETACH), rmdir(mnt_ro);
  if (mnt_tmpfs[0]) umount2(mnt_tmpfs, MNT_DETACH), rmdir(mnt_tmpfs);
  if (mnt_small[0]) umount2(mnt_small, MNT_DETACH), rmdir(mnt_small);
  if (img[0]) unlink(img);
}

static int try_open(hm_ctx_t *ctx, const char *dir, uint64_t budget, uint64_t unit,
                    hm_pager_t **out) {
  hm_pager_config_t cfg;
  hm_pager_config_default(ctx, &cfg);
  cfg.dram_budget = budget;
  cfg.fetch_unit = unit;
  cfg.backing_dir = dir;
  *out = NULL;
  int rc = hm_pager_open(ctx, &cfg, out);
  printf("open(%s, budget=%llu, unit=%llu) = %d: %s\n", dir ? dir : "(null)",
         (unsigned long long)budget, (unsigned long long)unit, rc,
         rc ? hm_ctx_last_error(ctx) : "ok");
  return rc;
}

static int one_line(const char *msg) { return *msg && strchr(msg, '\n') == NULL; }

int main(void) {
  const char *dir = hm_sdm_scratch();
  atexit(cleanup_mounts);
  hm_ctx_t *ctx = NULL;
  CHECK_EQ_INT(hm_ctx_new(&ctx, NULL), 0);
  hm_pager_t *p = NULL;

  /* Budget smaller than one fetch unit. */
  CHECK_EQ_INT(try_open(ctx, dir, 128 * 1024, 256 * 1024, &p), -EINVAL);
  CHECK(strstr(hm_ctx_last_error(ctx), "budget 131072 is smaller than one fetch unit 262144"));
  CHECK(one_line(hm_ctx_last_error(ctx)));
  /* Fetch units must be powers of two in 64 KiB..2 MiB. */
  CHECK_EQ_INT(try_open(ctx, dir, 64 * MiB, 100000, &p), -EINVAL);
  CHECK(strstr(hm_ctx_last_error(ctx), "fetch unit"));
  CHECK_EQ_INT(try_open(ctx, dir, 64 * MiB, 32 * 1024, &p), -EINVAL);
  CHECK_EQ_INT(try_open(ctx, dir, 64 * MiB, 4 * MiB, &p), -EINVAL);
  /* A budget of exactly one unit leaves no room for the pager's own memory. */
  CHECK_EQ_INT(try_open(ctx, dir, 256 * 1024, 256 * 1024, &p), -EINVAL);
  CHECK(strstr(hm_ctx_last_error(ctx), "own memory"));

  /* Missing directory, a file instead of a directory. */
  char missing[700];
  snprintf(missing, sizeof missing, "%s/does-not-exist", dir);
  CHECK_EQ_INT(try_open(ctx, missing, 8 * MiB, 256 * 1024, &p), -ENOENT);
  CHECK(strstr(hm_ctx_last_error(ctx), missing));
  char file[700];
  snprintf(file, sizeof file, "%s/plain-file", dir);
  int fd = open(file, O_CREAT | O_WRONLY, 0600);
  CHECK(fd >= 0);
  if (fd >= 0) close(fd);
  CHECK_EQ_INT(try_open(ctx, file, 8 * MiB, 256 * 1024, &p), -ENOTDIR);
  CHECK(strstr(hm_ctx_last_error(ctx), "not a directory"));
  unlink(file);
  /* /proc takes no files: an error, with the directory named. */
  int rc = try_open(ctx, "/proc", 8 * MiB, 256 * 1024, &p);
  CHECK(rc < 0);
  CHECK(strstr(hm_ctx_last_error(ctx), "/proc") != NULL);
  CHECK(one_line(hm_ctx_last_error(ctx)));

  int root = geteuid() == 0;
  /* A read-only filesystem. */
  snprintf(mnt_ro, sizeof mnt_ro, "%s/ro", dir);
  mkdir(mnt_ro, 0700);
  if (root && mount("hetmem-ro", mnt_ro, "tmpfs", MS_RDONLY, "size=1m") == 0) {
    CHECK_EQ_INT(try_open(ctx, mnt_ro, 8 * MiB, 256 * 1024, &p), -EROFS);
    CHECK(strstr(hm_ctx_last_error(ctx), "not writable"));
  } else {
    printf("SKIP read-only mount (needs root)\n");
    rmdir(mnt_ro);
    mnt_ro[0] = 0;
  }
  /* tmpfs is memory (and had no O_DIRECT before Linux 6.6): a clear
   * refusal, not a "storage tier" that eats the DRAM it should extend. */
  snprintf(mnt_tmpfs, sizeof mnt_tmpfs, "%s/tmpfs", dir);
  mkdir(mnt_tmpfs, 0700);
  if (root && mount("hetmem-tmpfs", mnt_tmpfs, "tmpfs", 0, "size=4m") == 0) {
    CHECK_EQ_INT(try_open(ctx, mnt_tmpfs, 8 * MiB, 256 * 1024, &p), -EINVAL);
    CHECK(strstr(hm_ctx_last_error(ctx), "tmpfs"));
  } else {
    printf("SKIP tmpfs mount (needs root)\n");
    rmdir(mnt_tmpfs);
    mnt_tmpfs[0] = 0;
  }
  /* A full disk: a 16 MiB ext4 image; the map fails, nothing crashes later. */
  snprintf(mnt_small, sizeof mnt_small, "%s/small", dir);
  snprintf(img, sizeof img, "%s/small.img", dir);
  mkdir(mnt_small, 0700);
  char cmd[3000];
  snprintf(cmd, sizeof cmd,
           "truncate -s 16M %s && mkfs.ext4 -q -F %s >/dev/null 2>&1 && "
           "mount -o loop %s %s 2>/dev/null",
           img, img, img, mnt_small);
  if (root && system(cmd) == 0) {
    CHECK_EQ_INT(try_open(ctx, mnt_small, 8 * MiB, 256 * 1024, &p), 0);
    if (p) {
      void *a = NULL;
      rc = hm_pager_map(p, 64 * MiB, &a);
      printf("map 64 MiB on a 16 MiB filesystem = %d: %s\n", rc, hm_ctx_last_error(ctx));
      CHECK_EQ_INT(rc, -ENOSPC);
      CHECK(a == NULL);
      CHECK(strstr(hm_ctx_last_error(ctx), "no space"));
      CHECK(one_line(hm_ctx_last_error(ctx)));
      /* What fits still works, and the failed map left no space taken. */
      CHECK_EQ_INT(hm_pager_map(p, 8 * MiB, &a), 0);
      if (a) {
        memset(a, 0x5a, 8 * MiB);
        CHECK_EQ_INT(((unsigned char *)a)[8 * MiB - 1], 0x5a);
        CHECK_EQ_INT(hm_pager_unmap(p, a, 8 * MiB), 0);
      }
      CHECK_EQ_INT(hm_pager_close(p), 0);
    }
  } else {
    printf("SKIP full-disk check (needs root, mkfs.ext4 and loop devices)\n");
    umount2(mnt_small, MNT_DETACH);
    rmdir(mnt_small);
    mnt_small[0] = 0;
  }

  /* userfaultfd permission: as an unprivileged user the pager either works
   * (UFFD_USER_MODE_ONLY) or says which sysctl to change. */
  if (root) {
    chmod(dir, 0777);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      if (setgid(65534) || setuid(65534)) _exit(3);
      hm_ctx_t *c2 = NULL;
      if (hm_ctx_new(&c2, NULL)) _exit(4);
      hm_pager_t *p2 = NULL;
      hm_pager_config_t cfg;
      hm_pager_config_default(c2, &cfg);
      cfg.dram_budget = 8 * MiB;
      cfg.backing_dir = dir;
      int r = hm_pager_open(c2, &cfg, &p2);
      printf("unprivileged open = %d: %s\n", r, r ? hm_ctx_last_error(c2) : "ok");
      fflush(stdout);
      if (r == 0) {
        hm_pager_close(p2);
        _exit(0);
      }
      _exit(r == -EPERM && strstr(hm_ctx_last_error(c2), "vm.unprivileged_userfaultfd") ? 0 : 5);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    chmod(dir, 0700);
  }

  /* Bad handles and ranges. */
  CHECK_EQ_INT(try_open(ctx, dir, 8 * MiB, 256 * 1024, &p), 0);
  if (p) {
    void *a = NULL;
    CHECK(hm_pager_map(p, 0, &a) == -EINVAL);
    CHECK_EQ_INT(hm_pager_map(p, MiB, &a), 0);
    CHECK(hm_pager_unmap(p, (char *)a + 4096, 4096) == -EINVAL);
    CHECK_EQ_INT(hm_pager_unmap(p, a, MiB), 0);
    CHECK(hm_pager_unmap(p, a, MiB) == -EINVAL);
    CHECK(hm_pager_advise(p, a, 4096, HM_ADVICE_WILLNEED) == -EINVAL);
    CHECK_EQ_INT(hm_pager_close(p), 0);
  }
  /* Nothing but the mount points and the image this test made itself. */
  CHECK_EQ_INT(hm_sdm_count_files(dir),
               !!mnt_ro[0] + !!mnt_tmpfs[0] + !!mnt_small[0] + !!mnt_small[0]);
  hm_ctx_free(ctx);
  return hm_test_done("test_sdm_errors");
}
