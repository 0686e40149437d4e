/* config.h: typed topology and experiment configs, loaded from JSON with
 * name lookup in topologies/ and models/ and --set overrides.
 *
 * Invariant: a PsTopology or PsExperiment returned by a loader has passed
 * every check io can judge (positive sizes, consistent dims, known keys,
 * input matching the model...) and has every default filled in; code
 * downstream may rely on it without rechecking.  The strategy section is
 * kept as JSON: the run layer's loader (run/experiment.h) has the strategy
 * read and check it. */
#ifndef PS_CONFIG_H
#define PS_CONFIG_H

#include "../common/common.h"
#include "../model/layers.h"

#include <json-c/json.h>

#define PS_MAX_DIMS 3

/* Most DVFS power states a chip may list (TPU7x has 8). */
#define PS_MAX_P_STATES 16

typedef struct {
  char *name;
  char *file;        /* where it was loaded from, or "<inline>" */
  char *generation;  /* "v2", "v3", "v4", ... */
  char *description;
  /* chip */
  int cores_per_chip;        /* TensorCores per chip */
  gboolean megacore;         /* the chip's cores act as one device (v4) */
  int mxus_per_core;
  int mxu_size;              /* systolic array side, 128 */
  double peak_flops;         /* per chip, bf16, multiply-add = 2 FLOPs */
  int64_t hbm_bytes;         /* per chip */
  double hbm_bandwidth_Bps;  /* per chip */
  double mxu_efficiency;     /* fraction of peak a padded matmul reaches */
  double op_overhead_s;      /* fixed cost per kernel launched on a core */
  double clock_factor;       /* the core clock a run gets, as a fraction of the one
                                mxu_efficiency, vpu_flops and op_overhead_s were
                                measured at (1: the same); on a chip with DVFS power
                                states, p_state's clock over reference_p_state's */
  /* DVFS power states (TPU7x): each state's core clock, the state a run sets
   * (XLA's --xla_tpu_dvfs_p_state; the file gives the default) and the one
   * the chip's figures were measured at; n_p_states 0 on a chip without */
  int n_p_states;
  double p_state_clocks_ghz[PS_MAX_P_STATES];
  int p_state, reference_p_state;
  double vpu_flops;          /* vector-unit FLOP/s per chip (element-wise work) */
  double on_chip_bandwidth_Bps; /* between the cores of one chip */
  /* host */
  int chips_per_host;
  int cpu_threads;
  double pcie_bandwidth_Bps; /* per host, shared by its chips, each way */
  double cpu_flops;          /* host FLOP rate for outside compilation */
  double loop_overhead_s;    /* host round trip per steps_per_run loop */
  int host_tray[PS_MAX_DIMS]; /* host.tray: the box of chips a host owns, one
                                 extent per torus dimension (tiling the torus,
                                 chips_per_host in all); all 0 when absent:
                                 host h owns chips [h, h + 1) * chips_per_host
                                 (hw/topology.h) */
  /* torus */
  int ndims;
  int dims[PS_MAX_DIMS];
  gboolean wrap[PS_MAX_DIMS];
  gboolean twisted;
  /* ici */
  double ici_bandwidth_Bps;  /* per link, one direction */
  double ici_latency_s;      /* per hop */
  int ici_links_per_neighbor;
  /* generation facts that inform and check, not time (0, "" or NULL: absent) */
  char *name_counts;         /* what N of a NAME-N slice counts: "chips" or "cores" */
  int max_slice_chips;       /* the largest slice of the generation */
  double int8_peak_flops;    /* per chip, where the MXU has an int8 path */
  double fp8_peak_flops;     /* per chip, where the MXU has an fp8 path */
  double dcn_bandwidth_Bps;  /* each host's data-center network, one direction */
  /* multislice: `slices` copies of the slice above (torus, hosts and all),
   * numbered slice-major, joined by the data-center network (hw/topology.h's
   * PS_ZONE_DCN).  slices = 1 (the default): no DCN. */
  int slices;
  struct {
    double nic_bandwidth_Bps;  /* per host NIC, each way (default host.dcn_bandwidth_Bps) */
    double nic_latency_s;      /* host NIC and stack, each way */
    int hosts_per_leaf;        /* hosts behind one leaf switch */
    double oversubscription;   /* >= 1: leaf uplink = hosts_per_leaf x NIC / this */
    double hop_latency_s;      /* per switch hop (host -> leaf, leaf -> spine, ...) */
  } dcn;
  json_object *sources;      /* owned: the "sources" object, dotted key -> citation */
} PsTopology;

/* Chips and hosts of all slices together; ps_topology_slice_chips: of one
 * slice (the torus's product). */
int ps_topology_chips(const PsTopology *t);
int ps_topology_slice_chips(const PsTopology *t);
int ps_topology_hosts(const PsTopology *t);
/* Devices a strategy can place a replica or stage on: chips x cores, or
 * chips when megacore. */
int ps_topology_devices(const PsTopology *t);
int ps_topology_devices_per_chip(const PsTopology *t);
/* ", DVFS p-state 3 (1.9 GHz)" on a chip with power states, the state a run
 * is at and its clock; "" on another.  (transfer full) */
char *ps_topology_clock_text(const PsTopology *t);
/* Peak FLOP/s and HBM of one device (a core, or a megacore chip). */
double ps_topology_device_peak_flops(const PsTopology *t);
double ps_topology_device_hbm_bandwidth(const PsTopology *t);
int64_t ps_topology_device_hbm_bytes(const PsTopology *t);

typedef enum { PS_SOURCE_FASHION_MNIST, PS_SOURCE_SYNTHETIC, PS_SOURCE_TEXT } PsSourceKind;
/* SGD with momentum; Adam; LARS (You, Gitman and Ginsburg, "Large Batch
 * Training of Convolutional Networks", arXiv:1708.03888, 2017) and LAMB
 * (You et al., "Large Batch Optimization for Deep Learning: Training BERT
 * in 76 minutes", ICLR 2020): a trust ratio per layer. */
typedef enum { PS_OPT_SGD, PS_OPT_ADAM, PS_OPT_LARS, PS_OPT_LAMB } PsOptimizerKind;

/* The "strategy" section.  io keeps the object and its kind; the strategy
 * it names (strategy/strategy.h) reads the rest, found in a registry by
 * the run layer's loader (run/experiment.h), which hangs it here.  io never
 * looks inside a strategy. */
struct PsStrategy;
typedef struct {
  char *kind;          /* "kind"; NULL in the file: the registry's default,
                          filled in by the loader */
  json_object *json;   /* the object after overrides (owned), NULL when absent */
  const struct PsStrategy *impl; /* the entry, set by the loader (not owned) */
  void *config;        /* the strategy's parsed keys (owned: free_config) */
  void (*free_config)(void *config);
} PsStrategySection;

typedef struct {
  PsSourceKind source;
  char *data_dir;                 /* fashion-mnist idx .gz files */
  double host_cost_per_example_s; /* decode + augment, one CPU thread */
  int workers;                    /* CPU threads of the input pipeline */
  int prefetch;                   /* batches buffered on the host */
  int infeed_capacity;            /* batches in each core's infeed queue */
  int outfeed_capacity;           /* step outputs a core may queue for its host */
  int64_t synthetic_examples;     /* size of the synthetic training set */
  gboolean shuffle;
  /* text (io/config-text.c): a file or a directory of text files, tokens
   * per example (the model's), tokens between training windows (the
   * sequence), the held-out end of the text; the loader counts the
   * training windows */
  char *text_file;
  int64_t sequence, stride;
  double test_fraction;
  int64_t text_train_windows;
} PsInputConfig;

/* Learning rate over the run: constant, or cosine decay from learning_rate
 * to 0 over the run's steps (Loshchilov and Hutter, "SGDR: Stochastic
 * Gradient Descent with Warm Restarts", ICLR 2017, without restarts). */
typedef enum { PS_LR_CONSTANT, PS_LR_COSINE } PsLrSchedule;

typedef struct {
  PsOptimizerKind kind;
  PsLrSchedule schedule;
  double learning_rate;
  double momentum;
  double beta1, beta2, epsilon;
  double weight_decay;      /* LARS, LAMB: decoupled into the trust ratio */
  double trust_coefficient; /* LARS's eta */
  /* Gradient clipping by global norm (tf.clip_by_global_norm): the
   * gradient is scaled by min(1, clip_norm / ||g||) before the update; 0
   * clips nothing.  clip_before_reduce: each replica clips its own
   * gradient before the cross-replica reduction (as the TF1 BERT
   * pre-training code), else the reduced gradient is clipped. */
  double clip_norm;
  gboolean clip_before_reduce;
} PsOptimizerConfig;

/* How replicas' gradients cross the interconnect. */
typedef struct {
  char *algorithm;        /* "auto", "ring", "bidir", "torus", "multiring", "hierarchical" */
  int64_t chunk_bytes;    /* messages are cut into chunks of this size */
  /* Asynchronous collectives of one kind (all-reduce, reduce-scatter...) a
   * device runs at once; a start beyond it waits, in program order, for the
   * device's earlier one of that kind to finish, while the core goes on.
   * 1 (the default) is what XLA's latency-hiding scheduler allows by
   * default (SchedulerConfig::all_reduce_overlap_limit = 1 and its
   * siblings, in xla/service/latency_hiding_scheduler.h); 0: no limit,
   * every bucket's collective starts when its COLL_START runs and shares
   * the links with those still running. */
  int64_t max_in_flight;
  /* Rounds whose links nothing else uses are timed without network events
   * (collectives/collective.h: ps_collective_set_fast_path), exactly when
   * uncontended; a round that overlaps another keeps its links whole and
   * the other queues behind, where the events interleave their chunks.
   * Off by default: the overlapping gradient buckets of a data-parallel
   * step are the common case, and there it moves predictions. */
  gboolean fast_path;
  /* Collective kinds the TensorCore runs itself (bit 1 << PsCollOp): a
   * device's COLL_START of such a kind holds its core until the collective
   * is done, so nothing overlaps it.  XLA runs a collective on the
   * TensorCore unless it is offloaded to the SparseCores
   * (xla_tpu_enable_sparse_core_collective_offload_*), and only an
   * offloaded one runs asynchronously with the TensorCore's computation
   * (docs/model.md, collective.on_core; docs/fidelity.md, "The collectives
   * on the TensorCore").  By kind, not by axis: a kind named holds the core
   * on every axis.  Default: all three (XLA without its offload flags);
   * 0: every collective is asynchronous (offloaded), the core goes on. */
  unsigned on_core;
} PsCollectiveConfig;

/* collective.on_core's kinds as a JSON array of their names ("all-reduce",
 * "reduce-scatter", "all-gather", in PsCollOp order), and as text, the names
 * joined by ", " (g_free it). */
json_object *ps_config_on_core_to_json(unsigned on_core);
char *ps_config_on_core_text(unsigned on_core);

/* numerics.quantization: the weight products' operands as the step
 * feeds the MXU.  PS_QUANT_FP8 is MaxText's "fp8_full" (its Qwix rule
 * over the decoder layers' dot_generals): weights and activations in fp8
 * (e4m3) forward, the gradients (e5m2) backward, each product at the
 * chip's fp8 rate; PS_QUANT_INT8 MaxText's "int8" (AQT's int8 training:
 * weights, activations and gradients in int8) at the chip's int8 rate;
 * the token embedding, a language model's head and attention's products
 * of two activations stay in the step's precision. */
typedef enum { PS_QUANT_NONE, PS_QUANT_FP8, PS_QUANT_INT8 } PsQuantization;

/* The chip's peak for quantization q (PsTopology's fp8 or int8 peak; 0
 * when it has none or q is none). */
double ps_config_quant_peak(const PsTopology *t, PsQuantization q);

typedef struct {
  gboolean enabled;
  PsPrecision precision;
  uint64_t seed;
  gboolean evaluate;   /* test accuracy at the end (real data only) */
  int matmul_passes;   /* bf16 MXU passes of a float32 matmul: "default" 1,
                          "high" 3, "highest" 6 (XLA PrecisionConfig) */
  PsPrecision weight_precision; /* of the stored weights, their gradients and the
                          optimizer's slots (MaxText's weight_dtype): HBM, the
                          update's traffic, weight all-gathers; with numerics on
                          they are rounded to it after every update */
  PsQuantization quantization; /* of the weight products' operands (timing only) */
} PsNumericsConfig;

/* The step's precision as headers print it: "bf16", "f32", with " (fp8
 * weight products)" when numerics.quantization is fp8.  (static) */
const char *ps_config_precision_text(const PsNumericsConfig *n);

/* How element-wise work is fused into kernels (top-level "fusion"). */
typedef enum {
  PS_FUSION_XLA,   /* as XLA emits kernels: see hw/cost.h */
  PS_FUSION_NONE,  /* every layer its own kernels */
  PS_FUSION_IDEAL  /* element-wise work free (the bound of perfect fusion) */
} PsFusion;

/* Outside compilation: an op that runs on the host in the middle of a step.
 * The output of layer `after` goes to the host over PCIe, the host works on
 * it, the result comes back, and the core waits for it. */
typedef enum { PS_HOST_CALL_HISTOGRAM, PS_HOST_CALL_ROUNDTRIP } PsHostCallKind;

typedef struct {
  int after;                /* layer index */
  PsHostCallKind kind;      /* histogram: bins come back; roundtrip: the tensor */
  int bins;
  double flops_per_element; /* host work per element of the tensor */
} PsHostCall;

/* What-if faults (the experiment's "faults" section).  A straggler is a
 * device whose compute ops take `slowdown` times as long and that spends
 * `delay_s` more at the start of every step; a slow host does its CPU
 * work (input pipeline, outside compilation) `slowdown` times slower; a
 * link fault multiplies an ICI link direction's bandwidth by
 * bandwidth_factor, 0 failing it (traffic goes the other way round its
 * ring).  In a multislice topology a straggler may be a whole slice
 * (every device of it), and a link fault may name a data-center network
 * link direction (a host's NIC or a leaf switch's uplink, up or down or
 * both) whose bandwidth it multiplies; a DCN link may not fail (the
 * network has no other way round).  Loaded by config.c, checked against
 * the slice's geometry by hw/topology.h's ps_geometry_check_link_faults,
 * applied by the executor. */
typedef struct {
  int device;               /* -1 for a slice straggler */
  int slice;                /* every device of this slice; -1 for a device straggler */
  double slowdown;          /* > 0; 1 when absent */
  double delay_s;           /* >= 0; 0 when absent */
} PsStraggler;

typedef struct {
  int host;
  double slowdown;          /* > 0 */
} PsSlowHost;

typedef struct {
  int chip;                 /* the chip the link direction leaves */
  int dim;                  /* torus dimension, 0 = x */
  int dir;                  /* +1 or -1: towards that neighbour */
  gboolean both_ways;       /* also the neighbour's link back to chip */
  double bandwidth_factor;  /* in [0, 1]; 0 = failed */
} PsLinkFault;

typedef enum {
  PS_DCN_FAULT_NIC,         /* host `index`'s NIC */
  PS_DCN_FAULT_LEAF         /* leaf switch `index`'s link to the spine */
} PsDcnFaultKind;

typedef struct {
  int entry;                /* its index in the file's faults.links */
  PsDcnFaultKind kind;
  int index;                /* the host or the leaf */
  int dir;                  /* +1 up (towards the spine), -1 down */
  gboolean both_ways;       /* both directions ("dir": "both"; dir is then +1) */
  double bandwidth_factor;  /* in (0, 1]: a DCN link may not fail */
} PsDcnLinkFault;

typedef struct {
  int n_stragglers;
  PsStraggler *stragglers;  /* owned; devices distinct */
  int n_slow_hosts;
  PsSlowHost *slow_hosts;   /* owned; hosts distinct */
  int n_links;
  PsLinkFault *links;       /* owned; link directions distinct */
  int *link_entries;        /* owned: links[i] is faults.links[link_entries[i]]; NULL: i */
  int n_dcn_links;
  PsDcnLinkFault *dcn_links; /* owned; link directions distinct */
} PsFaultsConfig;

typedef struct {
  char *name;
  char *file;
  PsTopology *topology;   /* owned */
  PsModel *model;         /* owned */
  int64_t global_batch;
  int64_t steps;          /* absent in the file: ceil(epochs x training set / global_batch) */
  double epochs;
  int64_t steps_per_run;
  int64_t log_every;      /* print the loss every N steps */
  PsStrategySection strategy;
  PsInputConfig input;
  PsOptimizerConfig optimizer;
  PsNumericsConfig numerics;
  PsCollectiveConfig collective;
  gboolean fuse_elementwise; /* XLA-style fusion of element-wise ops */
  PsFusion fusion;           /* "fusion"; fuse_elementwise=false means none */
  int attention_kernel;      /* "attention_kernel": 0 as the model says, 1 flash,
                                2 unfused (already applied to the model) */
  int n_host_calls;
  PsHostCall *host_calls;    /* owned; sorted by layer */
  PsFaultsConfig faults;     /* none: every count 0 */
  /* The dropout masks are recomputed in backward rather than kept: set by
   * the loader (run/experiment.h) when the step fits only that way. */
  gboolean masks_recomputed;
  json_object *resolved;  /* the fully resolved tree, for `describe` (owned) */
} PsExperiment;

/* The data directories, each once, in the order names are looked up in
 * them: $PODSIM_DATA_DIR; share/podsim of the tree libpodsim.so, then the
 * program, is installed in (LIBDIR/../share/podsim, BINDIR/../share/podsim)
 * or else the source tree they were built in (the binary's directory or its
 * parent, when it holds experiments/); the working directory, as ".".
 * Found at run time, wherever the binary was built.  A $PODSIM_DATA_DIR
 * that is not a directory is the only one, so every lookup fails naming it
 * rather than finding the name elsewhere; empty, it counts as unset.
 * (transfer full, NULL-terminated, g_strfreev) */
char **ps_data_dirs(void);

/* FALSE, with a PS_INPUT_ERROR naming the variable and its value, when
 * $PODSIM_DATA_DIR is set to something that is not a directory. */
gboolean ps_data_dirs_check(GError **error);

/* Search path for names: the directory of the referring file, then
 * ps_data_dirs() (each with its topologies/ models/ experiments/
 * subfolder).  A name containing '/' or ending in ".json" is a path. */
char *ps_config_find(const char *kind /* "topologies" | "models" | "experiments" */,
                     const char *name, GError **error);

/* (transfer full) */
PsTopology *ps_topology_load(const char *name_or_path, const char *const *overrides,
                             GError **error);
PsTopology *ps_topology_from_json(json_object *obj, const char *file, const char *path,
                                  GError **error);
void ps_topology_free(PsTopology *t);
/* The topology as a loadable JSON object with every default filled in and
 * its sources.  (transfer full) */
json_object *ps_topology_to_json(const PsTopology *t);

/* Parses an experiment, resolves topology and model by name, applies
 * overrides ("a.b=v", NULL-terminated, may be NULL) to the resolved tree,
 * then checks what io can judge.  Callers load through ps_experiment_load
 * (run/experiment.h), which adds the checks of the layers above.
 * (transfer full) */
PsExperiment *ps_experiment_parse(const char *name_or_path, const char *const *overrides,
                                  GError **error);
void ps_experiment_free(PsExperiment *e);

/* Lists the names (without .json) found in the search path.  (transfer
 * full, NULL-terminated, g_strfreev) */
char **ps_config_list(const char *kind);

#endif
