/* SPDX-License-Identifier: BSD-3-Clause */
/* A full storage tier: put fails with -ENOSPC and the step committed before
 * stays readable. The tier is a 4 MiB tmpfs mounted in a private mount
 * namespace of a child process, so nothing outlives the test; where the
 * namespace cannot be made (not root), the test says so and passes. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hetmem.h"
#include "testhelper.h"

static int child(void) {
  char dir[] = "/tmp/hmchanfullXXXXXX";
  if (!mkdtemp(dir)) return 10;
  if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
      mount("tmpfs", dir, "tmpfs", 0, "size=4m")) {
    rmdir(dir);
    return 77; /* no private namespace here */
  }
  hm_ctx_t *ctx = NULL;
  if (hm_ctx_new(&ctx, NULL)) return 11;
  char tier[128];
  snprintf(tier, sizeof tier, "file:%s", dir);
  hm_chan_config_t cfg;
  hm_chan_config_default(&cfg);
  cfg.tier = tier;
  cfg.name = "full";
  cfg.slots = 2;
  cfg.slot_bytes = 16 << 20; /* more than the tier holds */
  cfg.max_objects = 64;
  CHECK_EQ_INT(hm_chan_create(ctx, &cfg), 0);
  hm_chan_t *w = NULL, *r = NULL;
  CHECK_EQ_INT(hm_chan_open(ctx, tier, "full", HM_CHAN_WRITER, 0, &w), 0);
  CHECK_EQ_INT(hm_chan_open(ctx, tier, "full", HM_CHAN_READER, 0, &r), 0);
  if (!w || !r) return 12;
  static unsigned char buf[1 << 20];
  memset(buf, 0xab, sizeof buf);
  CHECK_EQ_INT(hm_chan_put(w, "first", 0, buf, sizeof buf), 0);
  CHECK_EQ_INT(hm_chan_commit(w, 0), 0);
  int rc = 0, puts = 0; /* 1 MiB objects into what is left of 4 MiB */
  char key[16];
  for (int i = 0; i < 16 && !rc; i++) {
    snprintf(key, sizeof key, "k%d", i);
    rc = hm_chan_put(w, key, 1, buf, sizeof buf);
    if (!rc) puts++;
  }
  CHECK_EQ_INT(rc, -ENOSPC);
  CHECK(strstr(hm_ctx_last_error(ctx), "full") != NULL);
  CHECK(puts < 4);
  CHECK_EQ_INT(hm_chan_wait(r, 0, 1000), 0);
  const void *p = NULL;
  size_t n = 0;
  CHECK_EQ_INT(hm_chan_get(r, "first", 0, &p, &n), 0);
  CHECK(n == sizeof buf && p && !memcmp(p, buf, sizeof buf));
  hm_chan_close(w);
  hm_chan_close(r);
  CHECK_EQ_INT(hm_chan_unlink(ctx, tier, "full"), 0);
  hm_ctx_free(ctx);
  umount(dir);
  rmdir(dir);
  int rc2 = hm_test_done("test_channel_enospc child");
  fflush(stdout);
  return rc2;
}

int main(void) {
  pid_t pid = fork();
  if (pid == 0) _exit(child());
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
    printf("test_channel_enospc: no private mount namespace (not root): skipped\n");
    return 0;
  }
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return hm_test_done("test_channel_enospc");
}
