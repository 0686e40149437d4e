/* bench_step.c: simulator speed and memory on one data-parallel training
 * step at pod scale, end to end (compile, pod, network, collectives, run).
 *
 * BERT-large (models/bert-large.json), timing only, bf16, on every device
 * of a full v4 pod (tpu-v4-8192: 4096 megacore devices) with gradients
 * all-reduced in buckets of the default 30 MiB that overlap backward (the
 * collectives asynchronous, collective.on_core [], as the bench has always
 * run them; the default holds them on the TensorCore, a step of about the
 * same events), one step (steps 1: with a single loop every step is
 * measured).  Then the
 * BERT-large step on tpu-v4-4096 at global batch 6144 with overlap off and
 * on, to show what overlap hides.  Last, the same model data-parallel on 16
 * slices of tpu-v5e-256 (4096 chips) joined by the data-center network,
 * 16 sequences per chip, gradients all-reduced by the hierarchical
 * collective (ICI within each slice, DCN across), in a child process of its
 * own so that its peak resident memory is its own.  Reports wall seconds,
 * events, events per second and the process's peak resident memory.
 * The v4-8192 BERT-large step is 14,459,904 events (26.402 ms simulated,
 * BERT's dropout included):
 * 3.13 s of wall time and 71 MiB on a quiet machine with the code before;
 * beside another simulation (load 3.4-4 on two cores), best of five,
 * 3.18 s of CPU before and 2.18 s now (35 MiB alone, 71 MiB after the
 * pipeline run), 0.19 s of it (best of three) before the first event; with
 * collective.fast_path=true, 0.84 M events and 2.8-3.1 s of CPU there.
 * Since auto also weighs butterfly: 0.30 s before the first event, 2.51 s
 * of CPU (3.36 s with the code before, load 2).  Since a message of one
 * chunk books its link in a short path, multiring's table offsets are
 * found at plan time and the collective's members are aligned to their
 * cache lines: 1.87 s of wall time (median 1.90, best of five alternating
 * at load 1.3) against 2.03 s (2.04) with the code before, 24.0 G
 * instructions against 27.8 G (callgrind), 33 MiB.  Since the network
 * remembers the routes collectives ask for (auto weighs five algorithms
 * for each of the step's 5 distinct collectives, all on the same 4096
 * members) and a push into any rung stays inline: 0.14 s before the first
 * event (median of five alternating 0.144 s against 0.206 s; 0.85 G
 * instructions against 1.32 G), 23.35 G instructions in all against
 * 24.0 G, 1.79-1.82 s of wall time (median 1.91-1.92) against 1.82 s
 * (1.93) at load 0.5-0.8, 37 MiB.
 * Then GPT-3 175B (models/gpt3-175b.json) under the shard strategy at
 * tensor 8 x fsdp 64 on tpu-v4-1024 (512 devices), full rematerialization,
 * 2 sequences per device (global batch 128: at 4 a device's saved layer
 * inputs and recompute peak exceed its 32 GiB), in a child process
 * (15.3 M events, 3.1 s and 94 MiB on a quiet machine).
 * Then the same model on the largest v4 slice, tpu-v4-8192 (16x16x16
 * chips, 4,096 megacore devices), at tensor 16 x fsdp 256 (global batch
 * 512, 2 sequences per device), with collective.fast_path=true: the layout
 * jax's mesh_utils.create_device_mesh makes without
 * allow_split_physical_axes, which gives each mesh axis whole physical axes
 * (tensor the innermost, x, all 16 of it; fsdp y and z), so that no two
 * groups' collectives cross the same links.  Each tensor all-reduce is then
 * a ring of its own x line and each fsdp collective a multiring over its
 * own yz plane: the fast path books a request's 256 (or 16) translated
 * groups from one sweep, and times together the reduce-scatter and gather
 * that a group's backward runs at once, so the step (3206.442 ms, the
 * event path's in every printed digit) is 9.9 M events, 7.3-10.8 s of wall
 * time, under 600 MiB (the event path: 243 M events, 41 s of CPU, 436 MiB;
 * 84 s and 590 MiB when first measured; the fast path before its sweeps were
 * shared: 75.9 M events, 50 s, 1.27 GiB).  With PODSIM_BENCH_FULL=1 in the environment also that step
 * on the event path, and tensor 8 x fsdp 512 on the same slice (global
 * batch 1024), which splits x between the axes (tensor the inner 8 of x,
 * fsdp its outer 2 with y and z, as create_device_mesh does only with
 * allow_split_physical_axes): a 7.490 s step, 0.86 G events today; 1.91 G
 * events, 184 s of wall time and 650 MiB on a quiet machine when first
 * measured (the code before: 2.19 G events, 220 s, 5.0 GiB).
 * There each fsdp group's x phase sends half way round x, 8 hops over links
 * that three other tensor ranks' groups cross the same way at the same
 * time (and each tensor ring's closing edge runs 7 hops back along its
 * line): chunks that share a link between groups need an event at every
 * hop (96% of the events of the same layout on a 16x4x4 torus,
 * docs/shard.md), and no sweep of one group stands for them.
 * Targets: the BERT v4-8192 step in at most 2 s of wall time and 1 GiB;
 * the 16-slice v5e step in at most 5 s and 1 GiB; the GPT-3 step on
 * v4-8192 in at most 10 s and 2 GiB.
 * Usage: bench_step [KEY=VALUE...] (from the source tree): each KEY=VALUE
 * is one more override of every run, e.g. collective.fast_path=true.  With
 * PODSIM_BENCH_ONLY=TEXT in the environment only the runs whose label
 * contains TEXT run, e.g. PODSIM_BENCH_ONLY="v4-8192 overlap"; with
 * PODSIM_BENCH_SETUP=1 each run is first made up to its first event alone
 * (experiment, plans, pod, network, collectives' choices), and that time
 * printed.
 * Invariant: every run starts from a fresh experiment, engine and pod. */
#include "run/run.h"
#include "run/experiment.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static double peak_rss_mib(void)
{
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;
}

/* overrides from the command line, appended to every run's */
typedef struct {
  int argc;
  char **argv;
} Extra;

static int bench(const Extra *extra, const char *label, const char *file,
                 const char *const *base)
{
  const char *only = g_getenv("PODSIM_BENCH_ONLY");
  if (only && !strstr(label, only))
    return 0;
  GError *error = NULL;
  GPtrArray *ovs = g_ptr_array_new();
  for (const char *const *o = base; *o; o++)
    g_ptr_array_add(ovs, (gpointer)*o);
  for (int i = 1; i < extra->argc; i++)
    g_ptr_array_add(ovs, extra->argv[i]);
  g_ptr_array_add(ovs, NULL);
  const char *const *ov = (const char *const *)ovs->pdata;
  PsExperiment *e = ps_experiment_load(file, ov, &error);
  g_ptr_array_free(ovs, TRUE);
  if (!e) {
    fprintf(stderr, "bench_step: %s (run from the source tree)\n", error->message);
    g_error_free(error);
    return 1;
  }
  PsSummary s;
  if (g_getenv("PODSIM_BENCH_SETUP")) {
    /* up to the first event: the run stops there, with an error */
    gint64 t0 = g_get_monotonic_time();
    if (ps_run(e, &(PsRunOptions){.max_events = 1}, &s, &error))
      ps_summary_clear(&s);
    g_clear_error(&error);
    printf("%-38s setup (to the first event) %.2f s wall\n", label,
           (double)(g_get_monotonic_time() - t0) / 1e6);
  }
  gint64 t0 = g_get_monotonic_time();
  if (!ps_run(e, &(PsRunOptions){0}, &s, &error)) {
    fprintf(stderr, "bench_step: %s\n", error->message);
    g_error_free(error);
    ps_experiment_free(e);
    return 1;
  }
  double wall = (double)(g_get_monotonic_time() - t0) / 1e6;
  printf("%-38s %5d devices  step %8.3f ms  exposed collective %8.3f ms  compute %8.3f ms  "
         "%2d buckets  %9" G_GUINT64_FORMAT " events  %6.2f s wall  %.3g events/s  peak RSS "
         "%.0f MiB\n", label, s.devices, s.step_time_s * 1e3,
         s.breakdown[PS_TIME_COLLECTIVE] * 1e3, s.breakdown[PS_TIME_COMPUTE] * 1e3, s.buckets,
         s.events, wall, s.events / wall, peak_rss_mib());
  ps_summary_clear(&s);
  ps_experiment_free(e);
  return 0;
}

/* bench() in a child process: its peak RSS is not the parent's runs' */
static int bench_apart(const Extra *extra, const char *label, const char *file,
                       const char *const *ov)
{
  const char *only = g_getenv("PODSIM_BENCH_ONLY");
  if (only && !strstr(label, only))
    return 0;
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    perror("bench_step: fork");
    return 1;
  }
  if (pid == 0) {
    int rc = bench(extra, label, file, ov);
    fflush(stdout);
    _exit(rc);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) {
    perror("bench_step: waitpid");
    return 1;
  }
  return !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}

int main(int argc, char **argv)
{
  int rc = 0;
  const Extra extra = {argc, argv};
  /* first, so the peak RSS printed is the pipeline's own */
  rc |= bench(&extra, "transformer-big 1f1b 32x16x64 v4-1024",
              "experiments/scaling-transformer-big.json", (const char *const[]){
      "topology=tpu-v4-1024", "strategy.kind=pipeline", "strategy.stages=32",
      "strategy.replicas=16", "strategy.micro_batches=64", "strategy.schedule=1f1b",
      "global_batch=8192", "steps=1", "steps_per_run=1", NULL});
  const char *bert = "experiments/scaling-bert-large.json";
  /* asynchronous collectives (collective.on_core []), which overlap can hide */
  rc |= bench(&extra, "bert-large v4-8192 overlap", bert, (const char *const[]){
      "topology=tpu-v4-8192", "strategy.replicas=4096", "global_batch=8192", "steps=1",
      "steps_per_run=1", "collective.on_core=[]", NULL});
  rc |= bench(&extra, "bert-large v4-4096 b6144 no buckets", bert, (const char *const[]){
      "topology=tpu-v4-4096", "strategy.replicas=2048", "global_batch=6144", "steps=2",
      "steps_per_run=1", "strategy.overlap=false", "strategy.bucket_bytes=1e12",
      "collective.on_core=[]", NULL});
  rc |= bench(&extra, "bert-large v4-4096 b6144 overlap", bert, (const char *const[]){
      "topology=tpu-v4-4096", "strategy.replicas=2048", "global_batch=6144", "steps=2",
      "steps_per_run=1", "collective.on_core=[]", NULL});
  rc |= bench_apart(&extra, "bert-large 16 x v5e-256 multislice", bert, (const char *const[]){
      "topology=tpu-v5e-256", "topology.slices=16", "strategy.replicas=4096",
      "global_batch=65536", "steps=1", "steps_per_run=1", NULL});
  const char *shard = "experiments/shard-bert-large.json";
  rc |= bench_apart(&extra, "gpt3-175b t8 x fsdp64 v4-1024", shard, (const char *const[]){
      "model=gpt3-175b", "topology=tpu-v4-1024", "strategy.mesh.tensor=8",
      "strategy.mesh.fsdp=64", "strategy.mesh.data=1", "strategy.rematerialize=full",
      "global_batch=128", "steps=1", "steps_per_run=1", NULL});
#define GPT3_T16 "model=gpt3-175b", "topology=tpu-v4-8192", "strategy.mesh.tensor=16", \
      "strategy.mesh.fsdp=256", "strategy.mesh.data=1", "strategy.rematerialize=full", \
      "global_batch=512", "steps=1", "steps_per_run=1"
  rc |= bench_apart(&extra, "gpt3-175b t16 x fsdp256 v4-8192 fast", shard,
                    (const char *const[]){GPT3_T16, "collective.fast_path=true", NULL});
  if (g_strcmp0(g_getenv("PODSIM_BENCH_FULL"), "1") == 0) {
    rc |= bench_apart(&extra, "gpt3-175b t16 x fsdp256 v4-8192 events", shard,
                      (const char *const[]){GPT3_T16, NULL});
    rc |= bench_apart(&extra, "gpt3-175b t8 x fsdp512 v4-8192", shard, (const char *const[]){
        "model=gpt3-175b", "topology=tpu-v4-8192", "strategy.mesh.tensor=8",
        "strategy.mesh.fsdp=512", "strategy.mesh.data=1", "strategy.rematerialize=full",
        "global_batch=1024", "steps=1", "steps_per_run=1", NULL});
  }
  return rc;
}
