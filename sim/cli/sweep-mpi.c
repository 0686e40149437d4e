/* sweep-mpi.c: the sweep over several processes (see sweep.c), built
 * with PS_WITH_MPI (make MPI=1) and started by an MPI launcher; without
 * PS_WITH_MPI this file is empty.  Rank 0 reads and writes --out and hands
 * out the points one at a time as ranks free up; the other ranks run
 * theirs on their own thread pools and send each outcome back as JSON text
 * whose numbers keep the digits they were printed with.
 *
 * Invariant: rank 0 writes the rows one process would have written (in
 * another order), and every rank returns rank 0's exit status. */
#include "cli/sweep-private.h"

#ifdef PS_WITH_MPI

#include "model/kernels.h"

#include <mpi.h>
#include <string.h>

/* Messages: rank 0 sends others a Work ({WORK_POINT, index} or {WORK_STOP,
 * exit status}); they send back each point's outcome as one JSON text. */
enum { TAG_WORK = 1, TAG_OUTCOME = 2 };
enum { WORK_POINT = 0, WORK_STOP = 1 };
#define GO_RUN (-1) /* broadcast for "run"; anything else is the exit status */
/* how long a rank waits for its own threads before it looks at MPI again */
#define POLL_USEC 1000

/* TRUE when an MPI launcher (mpirun, srun, mpiexec.hydra) started us;
 * run alone, podsim sweep does not start MPI at all. */
static gboolean mpi_launched(void)
{
  return g_getenv("OMPI_COMM_WORLD_SIZE") || g_getenv("PMIX_RANK") || g_getenv("PMI_RANK");
}

/* Rank 0: the others may run points; gathers their thread counts. */
void ps_sweep_mpi_start(Ranks *r, int jobs)
{
  int go = GO_RUN;
  MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
  r->started = TRUE;
  r->threads = g_new0(int, r->size);
  MPI_Gather(&jobs, 1, MPI_INT, r->threads, 1, MPI_INT, 0, MPI_COMM_WORLD);
}

/* Rank 0: no rank will get another point; they exit with status. */
void ps_sweep_mpi_stop(const Ranks *r, int status)
{
  int msg[2] = {WORK_STOP, status};
  for (int k = 1; k < r->size; k++)
    MPI_Send(msg, 2, MPI_INT, k, TAG_WORK, MPI_COMM_WORLD);
}

/* An outcome as it travels: doubles keep the text they were parsed from,
 * so rank 0 writes the row the rank that ran it would have.  (transfer full) */
static char *outcome_encode(const Outcome *o)
{
  json_object *m = json_object_new_object();
  json_object_object_add(m, "index", json_object_new_int64(o->index));
  json_object_object_add(m, "wall_s", json_object_new_double(o->wall_s));
  json_object_object_add(m, "error", o->error ? json_object_new_string(o->error) : NULL);
  json_object_object_add(m, "flat", o->flat ? json_object_get(o->flat) : NULL);
  char *text = g_strdup(json_object_to_json_string_ext(m, JSON_C_TO_STRING_PLAIN |
                                                              JSON_C_TO_STRING_NOSLASHESCAPE));
  json_object_put(m);
  return text;
}

/* (transfer full); NULL if text is not an outcome */
static Outcome *outcome_decode(const char *text, const Sweep *sw)
{
  json_object *m = NULL, *index = NULL, *wall = NULL, *err = NULL, *flat = NULL;
  if (!ps_sweep_parse_json_value(text, &m) || !m || !json_object_is_type(m, json_type_object) ||
      !json_object_object_get_ex(m, "index", &index) ||
      !json_object_is_type(index, json_type_int) || json_object_get_int64(index) < 0 ||
      json_object_get_int64(index) >= sw->n_points) {
    if (m)
      json_object_put(m);
    return NULL;
  }
  Outcome *o = g_new0(Outcome, 1);
  o->index = (guint)json_object_get_int64(index);
  if (json_object_object_get_ex(m, "wall_s", &wall))
    o->wall_s = json_object_get_double(wall);
  if (json_object_object_get_ex(m, "error", &err) && err)
    o->error = g_strdup(json_object_get_string(err));
  if (json_object_object_get_ex(m, "flat", &flat) && flat &&
      json_object_is_type(flat, json_type_object))
    o->flat = json_object_get(flat);
  if (!o->error && !o->flat)
    o->error = g_strdup("internal error: a rank sent a point without its summary");
  json_object_put(m);
  return o;
}

/* The outcome whose arrival Iprobe reported in st.  (transfer full) */
static Outcome *mpi_recv_outcome(const Sweep *sw, MPI_Status *st)
{
  int len = 0;
  MPI_Get_count(st, MPI_CHAR, &len);
  char *text = g_malloc((gsize)len + 1);
  MPI_Recv(text, len, MPI_CHAR, st->MPI_SOURCE, TAG_OUTCOME, MPI_COMM_WORLD,
           MPI_STATUS_IGNORE);
  text[len] = '\0';
  Outcome *o = outcome_decode(text, sw);
  g_free(text);
  if (!o) {
    fprintf(stderr, "podsim: sweep: internal error: rank %d sent a message that is not a "
                    "point's outcome\n", st->MPI_SOURCE);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return o;
}

/* Rank 0: hands rank k the next point of todo, unless none is left or it
 * already has one more in hand than it has threads (rank 0's own go to its
 * pool); whether it did. */
static gboolean mpi_give(GThreadPool *pool, const GArray *todo, guint *next, int *in_flight,
                         const Ranks *r, int k)
{
  if (*next >= todo->len || in_flight[k] > MAX(r->threads[k], 1))
    return FALSE;
  guint index = g_array_index(todo, guint, (*next)++);
  if (k == 0) {
    g_thread_pool_push(pool, GUINT_TO_POINTER(index + 1), NULL);
  } else {
    int msg[2] = {WORK_POINT, (int)index};
    MPI_Send(msg, 2, MPI_INT, k, TAG_WORK, MPI_COMM_WORLD);
  }
  in_flight[k]++;
  return TRUE;
}

/* Rank 0, once the CSV header is written: hands out the points of todo
 * from next on to the ranks (itself too), a new one to a rank as each of
 * its points comes back, and writes each row as it arrives.  FALSE if a
 * row could not be written. */
gboolean ps_sweep_mpi_lead(Sweep *sw, Output *out, const GArray *todo, guint next,
                           const Ranks *r, Progress *prog, GError **error)
{
  GThreadPool *pool = g_thread_pool_new(ps_sweep_pool_run, sw, MAX(r->threads[0], 1), TRUE, error);
  if (!pool)
    return FALSE;
  int *in_flight = g_new0(int, r->size);
  guint *ran = g_new0(guint, r->size);
  ran[0] = next; /* the points before the CSV header ran here */
  guint left = todo->len - next; /* points not yet back */
  /* one point to each rank in turn, so that a short sweep reaches them all */
  for (gboolean gave = TRUE; gave;) {
    gave = FALSE;
    for (int k = 0; k < r->size; k++)
      gave |= mpi_give(pool, todo, &next, in_flight, r, k);
  }
  gboolean ok = TRUE;
  while (ok && left > 0) {
    Outcome *o = NULL;
    int from = 0;
    while (!o) {
      int flag = 0;
      MPI_Status st;
      MPI_Iprobe(MPI_ANY_SOURCE, TAG_OUTCOME, MPI_COMM_WORLD, &flag, &st);
      if (flag) {
        o = mpi_recv_outcome(sw, &st);
        from = st.MPI_SOURCE;
      } else {
        o = g_async_queue_timeout_pop(sw->done, POLL_USEC);
      }
    }
    in_flight[from]--;
    ran[from]++;
    left--;
    while (mpi_give(pool, todo, &next, in_flight, r, from))
      ;
    ps_sweep_progress_point(prog, sw, o);
    ok = ps_sweep_output_row(out, sw, o, error);
    ps_sweep_outcome_free(o);
  }
  g_thread_pool_free(pool, !ok, TRUE);
  if (ok) {
    GString *per = g_string_new(NULL);
    for (int k = 0; k < r->size; k++)
      g_string_append_printf(per, " %u", ran[k]);
    fprintf(stderr, "%ssweep: points run by rank 0..%d:%s\n", prog->tty ? "\r\033[K" : "",
            r->size - 1, per->str);
    g_string_free(per, TRUE);
  }
  g_free(ran);
  g_free(in_flight);
  return ok;
}

/* A rank other than 0: waits for rank 0's go, reads the same command line,
 * then runs the points it is sent on --jobs threads and sends back each
 * outcome, until rank 0 says stop; rank 0's exit status. */
static int mpi_serve(int argc, char **argv, const Ranks *r)
{
  int go = 0;
  MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (go != GO_RUN)
    return go;
  /* rank 0 read this same command line without a complaint */
  Options o = {0};
  if (ps_sweep_options_parse(&o, argc, argv) != 0)
    MPI_Abort(MPI_COMM_WORLD, PS_CLI_EXIT_INPUT);
  Sweep sw;
  ps_sweep_init(&sw, &o);
  GError *error = NULL;
  if (!ps_sweep_add_varies(&sw, o.vary_args, &error)) {
    fprintf(stderr, "podsim: sweep: rank %d: %s\n", r->rank, error->message);
    MPI_Abort(MPI_COMM_WORLD, PS_CLI_EXIT_INPUT);
  }
  MPI_Gather(&o.jobs, 1, MPI_INT, NULL, 0, MPI_INT, 0, MPI_COMM_WORLD);
  ps_kernels_init(); /* once here, before any thread runs a point */
  GThreadPool *pool = g_thread_pool_new(ps_sweep_pool_run, &sw, MAX(o.jobs, 1), TRUE, &error);
  if (!pool) {
    fprintf(stderr, "podsim: sweep: rank %d: %s\n", r->rank, error->message);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int status = -1, in_flight = 0;
  while (status < 0 || in_flight > 0) {
    int flag = 0;
    MPI_Iprobe(0, TAG_WORK, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    if (flag) {
      int msg[2];
      MPI_Recv(msg, 2, MPI_INT, 0, TAG_WORK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (msg[0] == WORK_POINT) {
        g_thread_pool_push(pool, GUINT_TO_POINTER((guint)msg[1] + 1), NULL);
        in_flight++;
      } else {
        status = msg[1];
      }
      continue;
    }
    if (!in_flight) {
      g_usleep(POLL_USEC);
      continue;
    }
    Outcome *o_done = g_async_queue_timeout_pop(sw.done, POLL_USEC);
    if (!o_done)
      continue;
    g_autofree char *text = outcome_encode(o_done);
    ps_sweep_outcome_free(o_done);
    MPI_Send(text, (int)strlen(text), MPI_CHAR, 0, TAG_OUTCOME, MPI_COMM_WORLD);
    in_flight--;
  }
  g_thread_pool_free(pool, FALSE, TRUE);
  ps_sweep_clear(&sw);
  ps_sweep_options_clear(&o);
  return status;
}

void ps_sweep_mpi_abort(void)
{
  MPI_Abort(MPI_COMM_WORLD, 1);
}

int ps_sweep_mpi_main(int argc, char **argv)
{
  Ranks ranks = {.rank = 0, .size = 1};
  if (mpi_launched()) {
    int provided = 0;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &ranks.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks.size);
    ranks.mpi = TRUE;
  }
  int status = ranks.rank == 0 ? ps_sweep_lead(argc, argv, &ranks) : mpi_serve(argc, argv, &ranks);
  if (ranks.mpi) {
    if (ranks.rank == 0 && ranks.size > 1 && !ranks.started) /* bad input, dry run: all stop */
      MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
  }
  g_free(ranks.threads);
  return status;
}

#endif
