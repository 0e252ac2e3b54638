/* SPDX-License-Identifier: BSD-3-Clause */
/* A run stopped by a signal.
 *
 * Exit handlers do not run when a signal's default action ends a process,
 * so a run stopped with Ctrl-C, `kill`, or a batch system's SIGTERM at its
 * time limit would leave no profile (`hetmem profile`) and no statistics
 * (`hetmem run --stats`). While the program leaves SIGINT, SIGTERM or SIGHUP
 * at its default, the interposer catches it: the handler (async-signal-safe:
 * a sem_post, no descriptor the program could close) wakes a finisher
 * thread, which writes the outputs in an ordinary context (the writers
 * allocate), puts the default action back and raises the signal again on
 * itself, so the process still dies of it and its exit status is what it
 * would have been. Further signals meanwhile are absorbed: they come in
 * pairs (`timeout` signals the whole group, and `hetmem profile`/`run`
 * forward SIGTERM and SIGHUP too). A program that sets its own disposition
 * replaces ours, and reads SIG_DFL where ours was (_hm_pl_term_action); its
 * handler decides, and a normal exit writes the outputs as usual; setting
 * SIG_DFL again puts ours back. A forked child has no finisher: there the
 * handler only re-raises. Cost: one thread blocked in sem_wait for the life
 * of the process; nothing on any hook. */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "preload.h"
#include "prim/prim.h"

static struct {
  void (*finish)(void);
  _Atomic int sig;       /* the signal that stopped the run, 0 none */
  sem_t sem;
  pid_t pid; /* the process the finisher belongs to */
} hm__t;

static const int hm__sigs[] = {SIGINT, SIGTERM, SIGHUP};

static int hm__is_term(int sig) {
  for (size_t i = 0; i < sizeof hm__sigs / sizeof hm__sigs[0]; i++)
    if (hm__sigs[i] == sig) return 1;
  return 0;
}

/* Async-signal-safe. */
static void hm__default_and_raise(int sig) {
  _hm_pl_set_default(sig);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  pthread_sigmask(SIG_UNBLOCK, &one, NULL);
  _hm_prim_raise(sig);
}

static void hm__handler(int sig);

/* Our stand-in for the default action. */
static void hm__ours(struct sigaction *sa) {
  memset(sa, 0, sizeof *sa);
  sa->sa_handler = hm__handler;
  sa->sa_flags = SA_RESTART;
  sigemptyset(&sa->sa_mask);
}

static void hm__handler(int sig) {
  int saved = errno;
  if (_hm_prim_pid() != hm__t.pid) {
    hm__default_and_raise(sig); /* a forked child: no finisher there */
  } else {
    int first = 0;
    if (atomic_compare_exchange_strong(&hm__t.sig, &first, sig)) sem_post(&hm__t.sem);
    /* else: the finisher is at work and raises the first one when done */
  }
  errno = saved;
}

static void *hm__finisher(void *unused) {
  (void)unused;
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  while (sem_wait(&hm__t.sem) != 0)
    if (errno != EINTR) return NULL;
  hm__t.finish();
  hm__default_and_raise(atomic_load(&hm__t.sig));
  return NULL;
}

void _hm_pl_term_catch(void (*finish)(void)) {
  if (hm__t.finish || sem_init(&hm__t.sem, 0, 0)) return;
  hm__t.finish = finish;
  hm__t.pid = _hm_prim_pid();
  pthread_t t;
  if (pthread_create(&t, NULL, hm__finisher, NULL)) return;
  pthread_detach(t);
  for (size_t i = 0; i < sizeof hm__sigs / sizeof hm__sigs[0]; i++) {
    int sig = hm__sigs[i];
    struct sigaction cur, sa;
    /* not for one the program ignores: nohup, background jobs */
    if (_hm_pl_real_sigaction(sig, NULL, &cur) || cur.sa_handler != SIG_DFL) continue;
    hm__ours(&sa);
    (void)_hm_pl_real_sigaction(sig, &sa, NULL);
  }
}

int _hm_pl_term_signal(void) { return atomic_load(&hm__t.sig); }

int _hm_pl_term_action(int sig, const struct sigaction *act, struct sigaction *old, int *rc) {
  if (!hm__is_term(sig) || !hm__t.finish) return 0;
  const struct sigaction *use = act;
  struct sigaction mine;
  /* A program that ignored the signal for a while and sets the default
   * again gets our stand-in for the default back. A forked child has no
   * finisher: there the default is the kernel's. */
  int dfl = act && _hm_prim_pid() == hm__t.pid && !(act->sa_flags & SA_SIGINFO) &&
            act->sa_handler == SIG_DFL;
  if (dfl) {
    hm__ours(&mine);
    use = &mine;
  }
  *rc = _hm_pl_real_sigaction(sig, use, old);
  if (*rc == 0 && old && old->sa_handler == hm__handler) {
    memset(old, 0, sizeof *old); /* ours stands for the default */
    old->sa_handler = SIG_DFL;
  }
  return 1;
}
