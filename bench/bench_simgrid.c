/* bench_simgrid.c: podsim's ring all-reduce beside SimGrid's, same ring.
 *
 * Both simulate the same thing: N hosts on a unidirectional ring of links
 * (bandwidth B one way, latency alpha), all-reducing S bytes in 2(N-1)
 * steps; at each step every host sends S/N bytes to the next and waits for
 * S/N from the previous.  podsim runs its "ring" collective on the ring:N
 * shorthand topology (chunks of 1 MiB); SimGrid (its C API) runs N actors
 * that put_async to the next host's mailbox, get from their own, and wait,
 * over a platform file written here, with the CM02 network model and every
 * correction factor set to 1 (latency-factor, bandwidth-factor, weight-S 0,
 * no cross-traffic), so that a message of m bytes over one link costs
 * alpha + m/B, the alpha-beta model's own cost.  Each SimGrid run is in a
 * child process (SimGrid's engine initializes once per process).
 *
 * Prints, per N: both predicted times and their ratio, both wall times and
 * their ratio (SimGrid wall / podsim wall), and the closed form
 * 2(N-1)(alpha + S/(N B)).  Targets (issue 3): predictions within 2%,
 * podsim at least 10x faster.
 * Invariant: the two simulators see the same N, S, B and alpha. */
#include "collectives/collective.h"

#include <simgrid/actor.h>
#include <simgrid/comm.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <simgrid/mailbox.h>

#include <glib/gstdio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* v3 ICI figures, as topologies/tpu-v3.json gives them ([GC-v3]). */
#define BW_BPS 83e9
#define LATENCY_S 1e-6
#define BYTES (100 * 1000 * 1000)

static double now_s(void)
{
  return (double)g_get_monotonic_time() / 1e6;
}

/* ---- podsim --------------------------------------------------------- */

static void run_podsim(int n, double *sim_s, double *wall_s, uint64_t *events)
{
  char spec[32];
  g_snprintf(spec, sizeof spec, "ring:%d", n);
  GError *error = NULL;
  PsTopology *t = ps_network_shorthand(spec, NULL, &error);
  g_assert_no_error(error);
  double w0 = now_s();
  PsEngine *engine = ps_engine_new();
  PsNetwork *net = ps_network_new(engine, t, PS_NETWORK_DEFAULT_CHUNK);
  int *devs = g_new(int, n);
  for (int i = 0; i < n; i++)
    devs[i] = i;
  PsCollSpec s = {PS_COLL_ALL_REDUCE, "ring", devs, n, BYTES, 1, 0};
  PsCollective *c = ps_collective_new(net, &s, &error);
  g_assert_no_error(error);
  ps_time_t last = ps_collective_run_round(c);
  *wall_s = now_s() - w0;
  *sim_s = ps_time_to_s(last);
  *events = ps_engine_events_run(engine);
  ps_collective_free(c);
  ps_network_free(net);
  ps_engine_free(engine);
  g_free(devs);
  ps_topology_free(t);
}

/* ---- SimGrid -------------------------------------------------------- */

static int sg_n;

static void ring_actor(int argc, char **argv)
{
  int i = atoi(argv[1]);
  char in_name[32], out_name[32];
  g_snprintf(in_name, sizeof in_name, "m%d", i);
  g_snprintf(out_name, sizeof out_name, "m%d", (i + 1) % sg_n);
  sg_mailbox_t in = sg_mailbox_by_name(in_name), out = sg_mailbox_by_name(out_name);
  long seg = BYTES / sg_n;
  static char token;
  for (int s = 0; s < 2 * (sg_n - 1); s++) {
    sg_comm_t c = sg_mailbox_put_async(out, &token, seg);
    sg_mailbox_get(in);
    sg_comm_wait(c);
  }
}

static char *write_platform(int n)
{
  g_autofree char *dir = g_dir_make_tmp("podsim-simgrid-XXXXXX", NULL);
  char *path = g_build_filename(dir, "ring.xml", NULL);
  FILE *f = fopen(path, "w");
  g_assert(f != NULL);
  fprintf(f, "<?xml version='1.0'?>\n"
             "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
             "<platform version=\"4.1\">\n<zone id=\"ring\" routing=\"Full\">\n");
  for (int i = 0; i < n; i++)
    fprintf(f, "  <host id=\"h%d\" speed=\"1Gf\"/>\n", i);
  for (int i = 0; i < n; i++)
    fprintf(f, "  <link id=\"l%d\" bandwidth=\"%.0fBps\" latency=\"%.9fs\"/>\n", i, BW_BPS,
            LATENCY_S);
  for (int i = 0; i < n; i++)
    fprintf(f,
            "  <route src=\"h%d\" dst=\"h%d\" symmetrical=\"NO\"><link_ctn id=\"l%d\"/>"
            "</route>\n",
            i, (i + 1) % n, i);
  fprintf(f, "</zone>\n</platform>\n");
  fclose(f);
  return path;
}

/* In a child: returns through the pipe "sim_s wall_s". */
static gboolean run_simgrid(int n, double *sim_s, double *wall_s)
{
  int fd[2];
  if (pipe(fd) != 0)
    return FALSE;
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    char *path = write_platform(n);
    char *argv[] = {"bench_simgrid",
                    "--cfg=network/model:CM02",
                    "--cfg=network/latency-factor:1",
                    "--cfg=network/bandwidth-factor:1",
                    "--cfg=network/weight-S:0",
                    "--cfg=network/crosstraffic:0",
                    "--log=root.thres:critical",
                    NULL};
    int argc = 7;
    simgrid_init(&argc, argv);
    simgrid_load_platform(path);
    sg_n = n;
    for (int i = 0; i < n; i++) {
      char host[32], idx[32];
      g_snprintf(host, sizeof host, "h%d", i);
      g_snprintf(idx, sizeof idx, "%d", i);
      char *aargv[] = {"ring", idx, NULL};
      sg_actor_create(host, sg_host_by_name(host), ring_actor, 2, aargv);
    }
    double w0 = now_s();
    simgrid_run();
    double w = now_s() - w0;
    char buf[64];
    int len = g_snprintf(buf, sizeof buf, "%.12g %.6g\n", simgrid_get_clock(), w);
    if (write(fd[1], buf, (size_t)len) != len)
      _exit(1);
    g_remove(path);
    g_autofree char *dir = g_path_get_dirname(path);
    g_rmdir(dir);
    _exit(0);
  }
  close(fd[1]);
  char buf[64] = {0};
  ssize_t got = read(fd[0], buf, sizeof buf - 1);
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return got > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
         sscanf(buf, "%lf %lf", sim_s, wall_s) == 2;
}

int main(int argc, char **argv)
{
  int sizes[] = {64, 256, 512};
  int n_sizes = G_N_ELEMENTS(sizes);
  if (argc > 1) {
    n_sizes = argc - 1;
    for (int i = 0; i < n_sizes && i < (int)G_N_ELEMENTS(sizes); i++)
      sizes[i] = atoi(argv[i + 1]);
    n_sizes = MIN(n_sizes, (int)G_N_ELEMENTS(sizes));
  }
  printf("ring all-reduce of %d bytes, B = %.0f GB/s, alpha = %.1f us: podsim vs SimGrid %s "
         "(CM02, factors 1)\n",
         BYTES, BW_BPS / 1e9, LATENCY_S * 1e6, "3.32");
  printf("%6s %14s %14s %14s %10s %10s %10s %10s %10s\n", "N", "formula(us)", "podsim(us)",
         "simgrid(us)", "pred.ratio", "pod.wall", "sg.wall", "speedup", "events");
  int failures = 0;
  for (int i = 0; i < n_sizes; i++) {
    int n = sizes[i];
    double ps_sim, ps_wall, sg_sim = 0, sg_wall = 0;
    uint64_t events;
    run_podsim(n, &ps_sim, &ps_wall, &events);
    gboolean ok = run_simgrid(n, &sg_sim, &sg_wall);
    double formula = 2.0 * (n - 1) * (LATENCY_S + (double)BYTES / n / BW_BPS);
    if (!ok) {
      printf("%6d %14.3f %14.3f %14s\n", n, formula * 1e6, ps_sim * 1e6, "failed");
      failures++;
      continue;
    }
    double ratio = ps_sim / sg_sim, speed = sg_wall / ps_wall;
    printf("%6d %14.3f %14.3f %14.3f %10.5f %9.4fs %9.4fs %9.1fx %10" G_GUINT64_FORMAT "\n", n,
           formula * 1e6, ps_sim * 1e6, sg_sim * 1e6, ratio, ps_wall, sg_wall, speed, events);
    if (ratio < 0.98 || ratio > 1.02 || speed < 10)
      printf("       ^ misses a target (predictions within 2%%, podsim >= 10x faster)\n");
  }
  return failures ? 1 : 0;
}
