/* run.h: one simulated training run, end to end: compile the strategy,
 * build the pod on an engine, attach numerics, statistics and the trace,
 * run, and summarise.
 *
 * Invariant: the summary's breakdown sums to step_time_s: every moment of
 * a step is in exactly one category, as seen by one device, the one the
 * steps' last collective most often waited for (device 0 without
 * collectives), whose own step time step_time_s is. */
#ifndef PS_RUN_H
#define PS_RUN_H

#include "exec/pod.h"
#include "io/config.h"
#include "io/dataset.h"

#include <stdio.h>

typedef struct {
  const char *trace_path; /* NULL: no trace */
  gboolean trace_links;   /* also a track per interconnect link direction */
  FILE *log;              /* progress lines (loss), NULL for none */
  gboolean keep_params;   /* numerics: copy device 0's final weights out */
  /* Fashion-MNIST train and test sets the caller opened from the
   * experiment's input.data_dir, for a caller that runs many experiments
   * (transfer none; read only, so runs on several threads may share them).
   * NULL: the run reads the files itself. */
  const PsDataset *fashion_train, *fashion_test;
  /* With a trace_path: when the trace would take more than this many bytes
   * on disk (ps_run_trace_estimate, over PS_TRACE_GZIP_RATIO for a ".gz"
   * path), none is written and the summary says so
   * (trace_skipped).  0: no limit. */
  int64_t trace_max_bytes;
  /* Stop with an input error after this many events (0: no limit). */
  uint64_t max_events;
  /* At the end of a run that succeeds, what every link direction carried
   * (hw/link-stats.h), utilization over the whole simulated time; NULL:
   * none.  Like the trace, left on disk only if the run succeeded. */
  const char *links_csv;
} PsRunOptions;

typedef struct {
  int64_t steps;
  int64_t measured_steps;   /* steps after the warm-up loop */
  double step_time_s;       /* mean over measured steps */
  double breakdown[PS_TIME_N_CATEGORIES]; /* seconds per step */
  double host_loop_s;       /* of `host`: the steps_per_run round trip, per step */
  double end_wait_s;        /* per step, in a single loop: the reporting device's wait
                               for the devices that end the steps after it, part of
                               `pipeline_bubble` in a pipeline, of `other` else */
  double copy_up_bytes, copy_down_bytes; /* per step, the reporting device's copies to
                               and from host memory (host offloading), 0 without */
  const char *collective_algorithm; /* the gradients' collective ("ring", ...), or NULL */
  int reporting_device;     /* whose view the breakdown is (see stats.c) */
  int devices, replicas, stages, micro_batches, buckets;
  gboolean pipelined;       /* the plan has a stage axis (a pipeline, even of one stage) */
  double examples_per_s;
  double mxu_utilization;   /* useful matmul FLOPs / (time x peak), device 0 */
  /* tokens: a token-input model's sequence (0 for any other model), and
   * examples_per_s x sequence */
  int64_t sequence;
  double tokens_per_s;
  /* utilization of the chips the plan occupies (chips: its devices over
   * the devices per chip, rounded up) against their bf16 peak, over the
   * step: MFU of the model's FLOPs (PaLM's count, model/layers.h: the
   * forward's and backward's matmuls, model_flops_per_step of them), HFU
   * of the matmul FLOPs the devices executed (re-materialization and
   * work a layout repeats on several devices included, MXU padding not) */
  int chips;
  double model_flops_per_step;
  double mfu, hfu;
  /* the same with causal attention's score and context FLOPs halved, as
   * MaxText counts them (model/layers.h), its MFU and its TFLOP/s/device:
   * those FLOPs over the step and the plan's devices; a model without
   * causal attention has model_flops_per_step here too */
  double model_flops_causal_per_step, mfu_causal, tflops_per_device;
  /* per mesh axis (PsPlanColl.axis), seconds per step, the mean over
   * devices: exposed, the waits in COLL_DONE for the axis's collectives
   * (summed over axes, a device's collective category); busy, the time at
   * least one of them was in flight.  colls: the plan's collectives along
   * the axis (every group's); colls_per_device: those a device takes part
   * in, the mean over devices. */
  int axis_colls[PS_N_AXES];
  double axis_colls_per_device[PS_N_AXES];
  double axis_exposed_s[PS_N_AXES], axis_busy_s[PS_N_AXES];
  /* compute of one step of the reporting device's program split by what
   * its kernels wait for (hw/cost.h): MXU-bound kernels, HBM- or
   * VPU-bound kernels, launch overheads; seconds per step */
  double compute_mxu_s, compute_memory_s, compute_overhead_s;
  double compute_serial_s; /* of compute_mxu_s: vector work in series with
                              the products (flash attention's softmax) */
  int64_t hbm_peak_bytes;   /* device 0 */
  gboolean has_numerics;
  double loss_first, loss_last;
  double replica_divergence; /* largest |weight - device 0's weight| at the end */
  float *params;            /* keep_params: device 0's final weights (owned) */
  size_t n_params;
  gboolean has_accuracy;
  double test_accuracy;     /* per label: per token for a language model */
  double test_loss;         /* its mean over the test labels */
  gboolean per_token;       /* labels are tokens: a language model's */
  double test_perplexity;   /* exp(test_loss), when per_token */
  double sim_time_s;        /* simulated time of the whole run */
  uint64_t events;
  double wall_s;
  double events_per_s;
  uint64_t trace_events;
  gboolean trace_skipped;   /* over trace_max_bytes: no trace was written */
  int64_t trace_estimate_bytes; /* the estimate on disk, when a trace was asked for */
  /* outside compilation: a JSON array, one object per call site, with the
   * calls made and (numerics on, histogram) replica 0's last histogram;
   * NULL without host calls.  Owned: ps_summary_clear() frees it. */
  char *host_calls_json;
} PsSummary;

void ps_summary_clear(PsSummary *s);

/* The plan the experiment compiles to.  (transfer full) */
PsPlan *ps_run_compile(const PsExperiment *exp, GError **error);

/* The executor's configuration for the experiment: its topology, input,
 * steps, collective settings and faults (pointers into exp, which must
 * outlive the pod). */
PsPodConfig ps_run_pod_config(const PsExperiment *exp);

/* Roughly how many bytes the run's trace takes (within a factor of about
 * two): its op, wait and step slices per device and step, collective and
 * host slices, and with links every chunk on every hop. */
int64_t ps_run_trace_estimate(const PsExperiment *exp, const PsPlan *plan, gboolean links);

/* Runs the experiment.  Fails on input problems found late (data files,
 * trace path) with PS_INPUT_ERROR; the trace is only left on disk if the
 * run succeeded. */
gboolean ps_run(const PsExperiment *exp, const PsRunOptions *opt, PsSummary *out,
                GError **error);

/* What ps_run checks before it simulates anything, for a caller that runs
 * several experiments and would refuse them all up front: the plan
 * compiles, the step count fits the simulator's clock at a step's lower
 * bound (its longest compute), and the outputs of opt (NULL: none) can be
 * written (not a directory, in an existing writable directory).
 * PS_INPUT_ERROR naming the file and the field otherwise. */
gboolean ps_run_check(const PsExperiment *exp, const PsRunOptions *opt, GError **error);

/* The summary object (docs/design.md and the README: what a run reports), as JSON text. */
char *ps_summary_to_json(const PsExperiment *exp, const PsSummary *s);
/* The same as a short human-readable table. */
void ps_summary_print(const PsExperiment *exp, const PsSummary *s, FILE *f);

#endif
