/* share.c: processor-sharing servers on the engine (see share.h).
 *
 * A server keeps its transfers in progress with the bytes each has left,
 * as of `at`.  Whenever the set changes (a transfer begins or ends) the
 * bytes left are brought up to now (each lost elapsed x W / k), and one
 * event is scheduled for the earliest end; an event made stale by a later
 * change carries an older generation and is ignored. */
#include "exec/share.h"

#include <math.h>

typedef struct {
  double left;   /* bytes still to carry */
  uint64_t item;
} Transfer;

typedef struct {
  GArray *on;    /* Transfer, in the order they began */
  ps_time_t at;  /* `left` is as of this time */
  uint64_t gen;  /* generation of the pending event */
  double carried;
} Server;

struct PsShareSet {
  PsEngine *engine;
  uint32_t ev;
  double bw;
  Server *servers;
  int n;
  PsShareDoneFn done;
  void *ctx;
};

/* Bytes a tick's rounding may leave over: a transfer within them of its
 * end has ended. */
static double slack(const PsShareSet *set)
{
  return set->bw * ps_time_to_s(1) * 2.0;
}

/* Brings every transfer's bytes left up to now. */
static void advance(PsShareSet *set, Server *s)
{
  ps_time_t now = ps_engine_now(set->engine);
  int k = (int)s->on->len;
  if (k > 0 && now > s->at) {
    double each = set->bw * ps_time_to_s(now - s->at) / k;
    for (int i = 0; i < k; i++) {
      Transfer *t = &g_array_index(s->on, Transfer, i);
      double d = MIN(each, t->left);
      t->left -= d;
      s->carried += d;
    }
  }
  s->at = now;
}

/* Schedules the earliest end of server i's transfers. */
static void schedule(PsShareSet *set, int i)
{
  Server *s = &set->servers[i];
  s->gen++;
  int k = (int)s->on->len;
  if (k == 0)
    return;
  double least = INFINITY;
  for (int j = 0; j < k; j++)
    least = MIN(least, g_array_index(s->on, Transfer, j).left);
  double dt = least * k / set->bw;
  ps_time_t ticks = ps_time_from_s(dt); /* saturates at PS_TIME_NEVER */
  if (ticks < PS_TIME_NEVER && ps_time_to_s(ticks) < dt)
    ticks++;
  ps_engine_after(set->engine, ticks, set->ev, (uint32_t)i, s->gen);
}

static void on_end(PsEngine *engine, const PsEvent *ev, void *ctx)
{
  PsShareSet *set = ctx;
  Server *s = &set->servers[ev->target];
  if (ev->arg.u != s->gen)
    return; /* stale: the set changed since */
  advance(set, s);
  /* those that ended, in the order they began; the callbacks may add */
  g_autoptr(GArray) ended = g_array_new(FALSE, FALSE, sizeof(uint64_t));
  double eps = slack(set);
  for (guint j = 0; j < s->on->len;) {
    Transfer *t = &g_array_index(s->on, Transfer, j);
    if (t->left <= eps) {
      s->carried += t->left;
      g_array_append_val(ended, t->item);
      g_array_remove_index(s->on, j);
    } else {
      j++;
    }
  }
  schedule(set, (int)ev->target);
  for (guint j = 0; j < ended->len; j++)
    set->done(set->ctx, (int)ev->target, g_array_index(ended, uint64_t, j));
}

PsShareSet *ps_share_set_new(PsEngine *engine, int n, double bandwidth_Bps, PsShareDoneFn done,
                             void *ctx)
{
  g_return_val_if_fail(engine != NULL && n >= 0 && bandwidth_Bps > 0 && done != NULL, NULL);
  PsShareSet *set = g_new0(PsShareSet, 1);
  set->engine = engine;
  set->bw = bandwidth_Bps;
  set->n = n;
  set->done = done;
  set->ctx = ctx;
  set->servers = g_new0(Server, n > 0 ? n : 1);
  for (int i = 0; i < n; i++)
    set->servers[i].on = g_array_new(FALSE, FALSE, sizeof(Transfer));
  set->ev = ps_engine_register(engine, "share-end", on_end, set);
  return set;
}

void ps_share_set_free(PsShareSet *set)
{
  if (!set)
    return;
  for (int i = 0; i < set->n; i++)
    g_array_free(set->servers[i].on, TRUE);
  g_free(set->servers);
  g_free(set);
}

void ps_share_add(PsShareSet *set, int server, double bytes, uint64_t item)
{
  g_return_if_fail(set != NULL && server >= 0 && server < set->n && bytes >= 0);
  Server *s = &set->servers[server];
  advance(set, s);
  Transfer t = {bytes, item};
  g_array_append_val(s->on, t);
  schedule(set, server);
}

int ps_share_active(const PsShareSet *set, int server)
{
  g_return_val_if_fail(set != NULL && server >= 0 && server < set->n, 0);
  return (int)set->servers[server].on->len;
}

double ps_share_carried(const PsShareSet *set, int server)
{
  g_return_val_if_fail(set != NULL && server >= 0 && server < set->n, 0);
  return set->servers[server].carried;
}
