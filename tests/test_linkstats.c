/* test_linkstats.c: the link statistics CSV (hw/link-stats.h).
 *
 * Every test writes into its own temporary directory and reads the file
 * back.  Checks:
 * - ring: after a ring all-reduce of S bytes over the 4 chips of "ring:4",
 *   each + link carried exactly 2(N-1) S/N bytes in 2(N-1) (S/N)/c chunks
 *   (the ring algorithm's closed form), each - link and PCIe link nothing;
 *   busy time is bytes / B, utilization busy / elapsed and in [0, 1]; the
 *   rows are every link that exists, their chunks sum to the network's
 *   chunk-hops and their bytes to 2(N-1) S;
 * - errors: a path in a missing directory, and a path that cannot be
 *   renamed onto (a directory), fail with PS_INPUT_ERROR_FILE naming the
 *   path and leave no file behind (no temporary either); an existing file
 *   is replaced whole;
 * - the CLI (when $PODSIM names the built binary, as `make test` sets it):
 *   `podsim run --links-csv FILE` writes it, a bad path exits 2 naming it
 *   and leaves nothing. */
#include "collectives/collective.h"
#include "hw/link-stats.h"

#include "support/cli.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>
#include <sys/wait.h>

#define N_COLUMNS 19
enum { C_LINK, C_KIND, C_CHIP, C_TO_CHIP, C_X, C_Y, C_Z, C_DIM, C_DIR, C_HOST, C_FROM_CORE,
       C_TO_CORE, C_LANES, C_BANDWIDTH, C_BYTES, C_CHUNKS, C_BUSY, C_UTIL, C_NAME };

static const char *const HEADER =
    "link,kind,chip,to_chip,x,y,z,dim,dir,host,from_core,to_core,lanes,bandwidth_Bps,bytes,"
    "chunks,busy_s,utilization,name";

typedef ScratchFile Fixture;

static void fixture_setup(Fixture *fx, gconstpointer data)
{
  scratch_file_init(fx, "podsim-links", "links.csv");
}

static void fixture_teardown(Fixture *fx, gconstpointer data)
{
  scratch_file_clear(fx);
}

/* The rows of the CSV at path, each split into N_COLUMNS fields (the name,
 * last, keeps its commas), after checking the header.  (transfer full) */
static GPtrArray *read_rows(const char *path)
{
  g_autofree char *text = NULL;
  GError *error = NULL;
  g_assert_true(g_file_get_contents(path, &text, NULL, &error));
  g_assert_no_error(error);
  g_assert_true(g_str_has_suffix(text, "\n"));
  g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
  g_assert_cmpstr(lines[0], ==, HEADER);
  GPtrArray *rows = g_ptr_array_new_with_free_func((GDestroyNotify)g_strfreev);
  for (int i = 1; lines[i] && *lines[i]; i++) {
    char **f = g_strsplit(lines[i], ",", N_COLUMNS);
    g_assert_cmpuint(g_strv_length(f), ==, N_COLUMNS);
    g_assert_true(f[C_NAME][0] == '"' && g_str_has_suffix(f[C_NAME], "\""));
    g_ptr_array_add(rows, f);
  }
  return rows;
}

static int64_t int_field(char **f, int c)
{
  char *end;
  int64_t v = g_ascii_strtoll(f[c], &end, 10);
  g_assert_true(*f[c] && !*end);
  return v;
}

static double num_field(char **f, int c)
{
  char *end;
  double v = g_ascii_strtod(f[c], &end);
  g_assert_true(*f[c] && !*end);
  return v;
}

static void on_done(void *ctx, int member, ps_time_t t)
{
  (*(int *)ctx)++;
}

static void test_ring(Fixture *fx, gconstpointer data)
{
  enum { N = 4 };
  const int64_t S = INT64_C(4) << 20, chunk = INT64_C(64) << 10;
  GError *error = NULL;
  PsTopology *topo = ps_network_shorthand("ring:4", NULL, &error);
  g_assert_no_error(error);
  PsEngine *engine = ps_engine_new();
  PsNetwork *net = ps_network_new(engine, topo, chunk);
  int devs[N] = {0, 1, 2, 3};
  PsCollSpec spec = {.op = PS_COLL_ALL_REDUCE, .algo = "ring", .devices = devs, .n_members = N,
                     .count = S, .elem_bytes = 1};
  PsCollective *c = ps_collective_new(net, &spec, &error);
  g_assert_no_error(error);
  int done = 0;
  for (int m = 0; m < N; m++)
    ps_collective_arrive(c, m, NULL, on_done, &done);
  ps_engine_run(engine, PS_TIME_NEVER);
  g_assert_cmpint(done, ==, N);
  ps_time_t elapsed = ps_engine_now(engine);
  g_assert_cmpint(elapsed, >, 0);

  g_assert_true(ps_link_stats_write(net, elapsed, fx->path, &error));
  g_assert_no_error(error);
  g_autofree char *listing = scratch_list(fx->dir);
  g_assert_cmpstr(listing, ==, "links.csv");

  GPtrArray *rows = read_rows(fx->path);
  int exist = 0;
  for (int l = 0; l < ps_network_n_links(net); l++) {
    PsLinkInfo li;
    exist += ps_network_link_info(net, l, &li);
  }
  g_assert_cmpint(rows->len, ==, exist);

  const int64_t per_link = 2 * (N - 1) * (S / N);
  const int64_t chunks_per_link = 2 * (N - 1) * (S / N / chunk);
  const double B = 83e9;
  int64_t sum_bytes = 0, sum_chunks = 0;
  int plus = 0, last_link = -1;
  for (guint i = 0; i < rows->len; i++) {
    char **f = g_ptr_array_index(rows, i);
    int link = (int)int_field(f, C_LINK);
    g_assert_cmpint(link, >, last_link); /* in link id order, each once */
    last_link = link;
    PsLinkInfo li;
    g_assert_true(ps_network_link_info(net, link, &li));
    int64_t bytes = int_field(f, C_BYTES), chunks = int_field(f, C_CHUNKS);
    double busy = num_field(f, C_BUSY), util = num_field(f, C_UTIL);
    sum_bytes += bytes;
    sum_chunks += chunks;
    g_assert_cmpfloat(util, >=, 0.0);
    g_assert_cmpfloat(util, <=, 1.0);
    g_assert_cmpint(int_field(f, C_LANES), ==, li.lanes);
    g_assert_cmpfloat_with_epsilon(util, busy / (li.lanes * ps_time_to_s(elapsed)), 1e-9);
    if (strcmp(f[C_KIND], "ici") == 0) {
      int chip = (int)int_field(f, C_CHIP), dir = (int)int_field(f, C_DIR);
      g_assert_cmpint(int_field(f, C_DIM), ==, 0);
      g_assert_cmpint(int_field(f, C_X), ==, chip);
      g_assert_cmpint(int_field(f, C_TO_CHIP), ==, (chip + dir + N) % N);
      if (dir > 0) {
        plus++;
        g_assert_cmpint(bytes, ==, per_link);
        g_assert_cmpint(chunks, ==, chunks_per_link);
        g_assert_cmpfloat(fabs(busy - (double)per_link / B), <, 1e-9);
        g_assert_cmpfloat(util, >, 0.0);
      } else {
        g_assert_cmpint(dir, ==, -1);
        g_assert_cmpint(bytes, ==, 0);
      }
    } else {
      g_assert_true(strcmp(f[C_KIND], "pcie-down") == 0 || strcmp(f[C_KIND], "pcie-up") == 0 ||
                    strcmp(f[C_KIND], "on-chip") == 0);
      g_assert_cmpint(bytes, ==, 0);
      g_assert_cmpint(chunks, ==, 0);
    }
  }
  g_assert_cmpint(plus, ==, N);
  g_assert_cmpint(sum_bytes, ==, N * per_link);
  g_assert_cmpint(sum_chunks, ==, (int64_t)ps_network_chunk_hops(net));
  g_ptr_array_free(rows, TRUE);

  ps_collective_free(c);
  ps_network_free(net);
  ps_engine_free(engine);
  ps_topology_free(topo);
}

/* A network that carried nothing, for the error cases. */
static PsNetwork *idle_network(PsEngine **engine, PsTopology **topo)
{
  GError *error = NULL;
  *topo = ps_network_shorthand("torus:2x2", NULL, &error);
  g_assert_no_error(error);
  *engine = ps_engine_new();
  return ps_network_new(*engine, *topo, INT64_C(1) << 20);
}

static void test_errors(Fixture *fx, gconstpointer data)
{
  PsEngine *engine;
  PsTopology *topo;
  PsNetwork *net = idle_network(&engine, &topo);
  GError *error = NULL;

  /* a directory that does not exist */
  g_autofree char *missing = g_build_filename(fx->dir, "no-such-dir", "links.csv", NULL);
  g_assert_false(ps_link_stats_write(net, 0, missing, &error));
  g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE);
  g_assert_nonnull(strstr(error->message, missing));
  g_clear_error(&error);
  g_autofree char *empty = scratch_list(fx->dir);
  g_assert_cmpstr(empty, ==, "");

  /* written whole, then the rename fails: the path is a directory */
  g_autofree char *sub = g_build_filename(fx->dir, "taken", NULL);
  g_assert_cmpint(g_mkdir(sub, 0755), ==, 0);
  g_assert_false(ps_link_stats_write(net, 0, sub, &error));
  g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_FILE);
  g_assert_nonnull(strstr(error->message, sub));
  g_clear_error(&error);
  g_autofree char *only = scratch_list(fx->dir);
  g_assert_cmpstr(only, ==, "taken");
  g_assert_true(g_file_test(sub, G_FILE_TEST_IS_DIR));

  /* an existing file is replaced whole; elapsed 0 gives utilization 0 */
  g_assert_true(g_file_set_contents(fx->path, "old contents\n", -1, NULL));
  g_assert_true(ps_link_stats_write(net, 0, fx->path, &error));
  g_assert_no_error(error);
  GPtrArray *rows = read_rows(fx->path);
  g_assert_cmpuint(rows->len, >, 0);
  for (guint i = 0; i < rows->len; i++)
    g_assert_cmpfloat(num_field(g_ptr_array_index(rows, i), C_UTIL), ==, 0.0);
  g_ptr_array_free(rows, TRUE);
  g_autofree char *two = scratch_list(fx->dir);
  g_assert_cmpstr(two, ==, "links.csv,taken");

  ps_network_free(net);
  ps_engine_free(engine);
  ps_topology_free(topo);
}

/* Runs `podsim run ARGS...` in $PODSIM_DATA_DIR; the exit status. */
static int run_cli(const char *const *args, char **err)
{
  GPtrArray *argv = g_ptr_array_new();
  g_ptr_array_add(argv, (gpointer)g_getenv("PODSIM"));
  g_ptr_array_add(argv, (gpointer) "run");
  for (int i = 0; args[i]; i++)
    g_ptr_array_add(argv, (gpointer)args[i]);
  g_ptr_array_add(argv, NULL);
  const char *cwd = g_getenv("PODSIM_DATA_DIR");
  int status = 0;
  GError *error = NULL;
  gboolean ok = g_spawn_sync(cwd && *cwd ? cwd : ".", (char **)argv->pdata, NULL,
                             G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL, NULL, err, &status,
                             &error);
  g_ptr_array_free(argv, TRUE);
  g_assert_no_error(error);
  g_assert_true(ok);
  g_assert_true(WIFEXITED(status));
  return WEXITSTATUS(status);
}

static void test_cli(Fixture *fx, gconstpointer data)
{
  const char *p = g_getenv("PODSIM");
  if (!p || !*p || !g_file_test(p, G_FILE_TEST_IS_EXECUTABLE)) {
    g_test_skip("PODSIM is not set to the built CLI (make test sets it)");
    return;
  }
  g_autofree char *err = NULL;
  const char *ok_args[] = {"resnet50-v3-8", "--steps", "2", "--no-trace", "--quiet",
                           "--links-csv", fx->path, NULL};
  int st = run_cli(ok_args, &err);
  if (st != 0)
    g_error("podsim run exited %d: %s", st, err);
  GPtrArray *rows = read_rows(fx->path);
  int64_t ici = 0;
  for (guint i = 0; i < rows->len; i++) {
    char **f = g_ptr_array_index(rows, i);
    double util = num_field(f, C_UTIL);
    g_assert_cmpfloat(util, >=, 0.0);
    g_assert_cmpfloat(util, <=, 1.0);
    if (strcmp(f[C_KIND], "ici") == 0)
      ici += int_field(f, C_BYTES);
  }
  g_assert_cmpint(ici, >, 0); /* the gradients' all-reduce crossed ICI */
  g_ptr_array_free(rows, TRUE);

  g_clear_pointer(&err, g_free);
  g_autofree char *bad = g_build_filename(fx->dir, "no-such-dir", "links.csv", NULL);
  const char *bad_args[] = {"resnet50-v3-8", "--steps", "2", "--no-trace", "--quiet",
                            "--links-csv", bad, NULL};
  g_assert_cmpint(run_cli(bad_args, &err), ==, 2);
  g_assert_nonnull(strstr(err, bad));
  g_assert_false(g_file_test(bad, G_FILE_TEST_EXISTS));
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
#define ADD(path, fn) g_test_add(path, Fixture, NULL, fixture_setup, fn, fixture_teardown)
  ADD("/hw/link-stats/ring-allreduce", test_ring);
  ADD("/hw/link-stats/errors", test_errors);
  ADD("/hw/link-stats/cli", test_cli);
#undef ADD
  return g_test_run();
}
