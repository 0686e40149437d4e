/* bench_collectives.c: simulator speed on pod-scale collectives.
 *
 * All-reduces 100 MB (10^8 bytes, timing only) in chunks of 1 MiB over every
 * device of a v3 pod (tpu-v3-2048: 32x32 chips, 2048 TensorCores) and a v4
 * pod (tpu-v4-8192: 16x16x16 chips, 4096 megacore devices), with the
 * algorithm "auto" picks, then with the plain ring on the v3 pod and, on
 * the v4 pod, the dimension-by-dimension torus and multiring (every link
 * at once, what auto picks there; see multiring.c), and
 * reports the simulated time beside its prediction, events, events per
 * second and wall seconds (network and collective set-up included).
 * Issue 3's target: the full v4 pod all-reduce in under 5 s of wall time.
 * On a pod of 4096 chips it also prints the bus bandwidth (nccl-tests'
 * 2(n-1)/n S / t) times the chips beside the 1.1 PB/s all-reduce bandwidth
 * Google publishes per v4 pod ([GC-v4], topologies/tpu-v4.json): multiring
 * comes to 0.99 PB/s at 100 MB and 1.09 PB/s at 1 GiB (`podsim collective
 * --topology tpu-v4-8192 --bytes 1G`), torus to a third of it.
 * Usage: bench_collectives [TOPOLOGY ALGO]...
 * Invariant: every run starts from a fresh engine and network. */
#include "collectives/collective.h"

#include <stdio.h>
#include <stdlib.h>

#define BYTES (100 * 1000 * 1000)
#define CHUNK (INT64_C(1) << 20)

static int bench(const char *topo_name, const char *algo)
{
  GError *error = NULL;
  PsTopology *t = ps_topology_load(topo_name, NULL, &error);
  if (!t) {
    fprintf(stderr, "bench_collectives: %s (run from the source tree)\n", error->message);
    g_error_free(error);
    return 1;
  }
  double w0 = (double)g_get_monotonic_time() / 1e6;
  PsEngine *engine = ps_engine_new();
  PsNetwork *net = ps_network_new(engine, t, CHUNK);
  int n = ps_network_devices(net);
  int *devs = g_new(int, n);
  for (int i = 0; i < n; i++)
    devs[i] = i;
  PsCollSpec spec = {PS_COLL_ALL_REDUCE, algo, devs, n, BYTES, 1, 0};
  PsCollective *c = ps_collective_new(net, &spec, &error);
  g_assert_no_error(error);
  double w1 = (double)g_get_monotonic_time() / 1e6;
  ps_time_t last = ps_collective_run_round(c);
  double w2 = (double)g_get_monotonic_time() / 1e6;
  uint64_t ev = ps_engine_events_run(engine);
  double wall = w2 - w0;
  printf("%-12s %5d %-6s %-6s %12.3f %12.3f %11" G_GUINT64_FORMAT " %11.3g %8.3f %8.3f\n",
         topo_name, n, algo, ps_collective_algo(c), ps_time_to_s(last) * 1e3,
         ps_collective_predict_s(c) * 1e3, ev, (double)ev / (w2 - w1), wall, w1 - w0);
  int chips = ps_topology_chips(t);
  if (chips == 4096) {
    double busbw = (double)BYTES / ps_time_to_s(last) * 2.0 * (n - 1) / n;
    printf("  %s: bus bandwidth x %d chips = %.3f PB/s (Google: 1.1 PB/s per v4 pod)\n",
           ps_collective_algo(c), chips, busbw * chips / 1e15);
  }
  ps_collective_free(c);
  ps_network_free(net);
  ps_engine_free(engine);
  g_free(devs);
  ps_topology_free(t);
  return 0;
}

int main(int argc, char **argv)
{
  printf("all-reduce of %d bytes, chunks of %" G_GINT64_FORMAT " bytes, every device\n", BYTES,
         CHUNK);
  printf("%-12s %5s %-6s %-6s %12s %12s %11s %11s %8s %8s\n", "topology", "devs", "algo",
         "ran", "sim(ms)", "formula(ms)", "events", "events/s", "wall(s)", "setup(s)");
  int bad = 0;
  if (argc > 2) {
    for (int i = 1; i + 1 < argc; i += 2)
      bad |= bench(argv[i], argv[i + 1]);
    return bad;
  }
  bad |= bench("tpu-v3-2048", "auto");
  bad |= bench("tpu-v4-8192", "auto");
  bad |= bench("tpu-v3-2048", "ring");
  bad |= bench("tpu-v4-8192", "torus");
  bad |= bench("tpu-v4-8192", "multiring");
  return bad;
}
