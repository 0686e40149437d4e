/* fastpath.c: a collective round timed without events, for a round whose
 * links nothing else uses (collective.c decides when; see collective.h).
 *
 * What it computes is the event path's own schedule, not an approximation
 * of it: member m's step s starts when its step s-1 has ended (its
 * arrival, for s = 0), posts its sends then (each message down its route
 * chunk by chunk, hw/network.h's ps_network_book_message, the same lanes,
 * rounding and link statistics as the events), and ends when it has
 * started and every message it receives in step s has arrived.  The
 * executor's events do exactly this; what lets a sweep over the steps
 * stand for them is that the order in which a link is given chunks does
 * not depend on time:
 *   - every send of step s is for the receiver's step s (all the phase
 *     algorithms: ring, bidir, torus, multiring, hierarchical; p2p), so
 *     sweeping steps in order computes each step's start before its sends;
 *   - every link the round uses carries the messages of one (sender,
 *     receiver) pair only, so it is given them in the sender's order, which
 *     is step order, whatever the times; within a message, chunk order;
 *   - nothing else joins those links while the round uses them (the
 *     caller checks they are quiet from the first arrival on; see
 *     collective.c for what happens to traffic that comes later).
 * The pipelined trees of broadcast (a child forwards in the step after it
 * receives) and groups whose routes share a link (the members of a host
 * behind one NIC, a line's closing edge running back over its own links)
 * fail the first two tests: they run as events.
 * Invariant: an analysis is valid for the routes version it was made with;
 * a round booked here changes the links exactly as its events would. */
#include "collectives/collective-private.h"

#include <string.h>

struct PsCollFast {
  const PsCollGroup *g;
  const PsCollAlgo *algo;
  const PsCollPlan *plan;
  PsCollParams p;
  uint64_t version;       /* ps_network_routes_version of the analysis */
  gboolean ok;
  const char *why_not;    /* static text when !ok */
  int max_steps;
  int *n_steps;           /* per member */
  PsCollPeers pr;          /* each member's peers and routes (link ids) */
  GArray *links;          /* int: every link the round uses, once */
  ps_time_t *acc;         /* per member: the latest arrival for its step */
};

static void analysis_clear(PsCollFast *f)
{
  g_clear_pointer(&f->n_steps, g_free);
  ps_coll_peers_clear(&f->pr);
  g_clear_pointer(&f->acc, g_free);
  if (f->links)
    g_array_free(f->links, TRUE);
  f->links = NULL;
}

/* Records member mi's route to peer (once); FALSE when one of its links
 * already carries another pair's messages. */
static gboolean add_route(PsCollFast *f, GArray *peers, GArray *at, GArray *hops,
                          GArray *routes, int64_t *owner, int mi, int peer, int first)
{
  for (guint k = (guint)first; k < peers->len; k++)
    if (g_array_index(peers, int, k) == peer)
      return TRUE;
  int h;
  g_autofree int *r = ps_coll_route(f->g, mi, peer, &h);
  int64_t pair = (int64_t)mi * f->g->n + peer;
  for (int i = 0; i < h; i++) {
    if (owner[r[i]] >= 0 && owner[r[i]] != pair)
      return FALSE;
    if (owner[r[i]] < 0)
      g_array_append_val(f->links, r[i]);
    owner[r[i]] = pair;
  }
  int where = (int)routes->len;
  g_array_append_val(peers, peer);
  g_array_append_val(at, where);
  g_array_append_val(hops, h);
  g_array_append_vals(routes, r, (guint)h);
  return TRUE;
}

/* Walks every step of every member once: the peers, their routes and the
 * links, or why the sweep cannot stand for the events. */
static void analyse(PsCollFast *f)
{
  analysis_clear(f);
  const PsCollGroup *g = f->g;
  f->version = ps_network_routes_version(g->net);
  f->ok = FALSE;
  f->max_steps = 0;
  f->n_steps = g_new(int, g->n);
  f->pr.peer_at = g_new(int, g->n + 1);
  f->acc = g_new0(ps_time_t, g->n);
  f->links = g_array_new(FALSE, FALSE, sizeof(int));
  GArray *peers = g_array_new(FALSE, FALSE, sizeof(int));
  GArray *at = g_array_new(FALSE, FALSE, sizeof(int));
  GArray *hops = g_array_new(FALSE, FALSE, sizeof(int));
  GArray *routes = g_array_new(FALSE, FALSE, sizeof(int));
  int nl = ps_network_n_links(g->net);
  int64_t *owner = g_new(int64_t, nl > 0 ? nl : 1);
  for (int i = 0; i < nl; i++)
    owner[i] = -1;
  f->why_not = NULL;
  for (int m = 0; m < g->n && !f->why_not; m++) {
    f->pr.peer_at[m] = (int)peers->len;
    f->n_steps[m] = f->algo->n_steps(f->plan, m);
    f->max_steps = MAX(f->max_steps, f->n_steps[m]);
    for (int s = 0; s < f->n_steps[m] && !f->why_not; s++) {
      PsCollStep st;
      f->algo->step(f->plan, m, s, &st);
      for (int k = 0; k < st.n_send && !f->why_not; k++) {
        if (st.send[k].peer_step != s)
          f->why_not = "a message is for a later step of its receiver (a pipelined tree)";
        else if (!add_route(f, peers, at, hops, routes, owner, m, st.send[k].peer,
                            f->pr.peer_at[m]))
          f->why_not = "two pairs of members share a link";
      }
    }
  }
  f->pr.peer_at[g->n] = (int)peers->len;
  g_free(owner);
  f->ok = f->why_not == NULL;
  f->pr.peer = (int *)g_array_free(peers, FALSE);
  f->pr.route_at = (int *)g_array_free(at, FALSE);
  f->pr.hops = (int *)g_array_free(hops, FALSE);
  f->pr.routes = (int *)g_array_free(routes, FALSE);
}

PsCollFast *ps_coll_fast_new(const PsCollGroup *g, const PsCollAlgo *algo,
                             const PsCollPlan *plan, const PsCollParams *p)
{
  PsCollFast *f = g_new0(PsCollFast, 1);
  f->g = g;
  f->algo = algo;
  f->plan = plan;
  f->p = *p;
  f->version = UINT64_MAX;
  return f;
}

void ps_coll_fast_free(PsCollFast *f)
{
  if (!f)
    return;
  analysis_clear(f);
  g_free(f);
}

gboolean ps_coll_fast_usable(PsCollFast *f, const char **why_not)
{
  if (f->version != ps_network_routes_version(f->g->net))
    analyse(f);
  if (why_not)
    *why_not = f->why_not;
  return f->ok;
}

gboolean ps_coll_fast_quiet(const PsCollFast *f, ps_time_t since)
{
  g_return_val_if_fail(f->ok, FALSE);
  for (guint i = 0; i < f->links->len; i++)
    if (!ps_network_link_quiet(f->g->net, g_array_index(f->links, int, i), since))
      return FALSE;
  return TRUE;
}

void ps_coll_sweep(const PsCollAlgo *algo, const PsCollPlan *plan, int n, const int *n_steps,
                   int max_steps, const PsCollPeers *pr, int elem_bytes, ps_time_t *t,
                   ps_time_t *acc, PsCollBookFn book, void *ctx)
{
  memset(acc, 0, sizeof(ps_time_t) * (size_t)n);
  for (int s = 0; s < max_steps; s++) {
    for (int m = 0; m < n; m++) {
      if (s >= n_steps[m])
        continue;
      PsCollStep st;
      algo->step(plan, m, s, &st);
      for (int k = 0; k < st.n_send; k++) {
        const PsCollSend *snd = &st.send[k];
        int h;
        const int *r = ps_coll_peers_route(pr, m, snd->peer, &h);
        ps_time_t a = book(ctx, r, h, snd->len * elem_bytes, t[m]);
        if (a > acc[snd->peer])
          acc[snd->peer] = a;
      }
    }
    for (int m = 0; m < n; m++) {
      if (s < n_steps[m] && acc[m] > t[m])
        t[m] = acc[m];
      acc[m] = 0;
    }
  }
}

static ps_time_t book_on_network(void *net, const int *route, int hops, int64_t bytes,
                                 ps_time_t at)
{
  return ps_network_book_message(net, route, hops, bytes, at);
}

void ps_coll_fast_run(PsCollFast *f, ps_time_t *t)
{
  g_return_if_fail(f->ok && f->version == ps_network_routes_version(f->g->net));
  ps_coll_sweep(f->algo, f->plan, f->g->n, f->n_steps, f->max_steps, &f->pr, f->p.elem_bytes,
                t, f->acc, book_on_network, f->g->net);
}
