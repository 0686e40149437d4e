/* layer-private.h: a layer kind as one const table of operations, what
 * layers.c (reading models), net.c (numerics) and the layer-*.c files (one
 * family of kinds each) share.
 *
 * A kind's entry holds its name and JSON keys, parse (hyper-parameters),
 * shape (output shape, parameters, FLOPs, HBM traffic and the activations
 * kept for backward: its memory), the numeric plan, weight initialisation,
 * workspace, forward and backward, and how the cost model lowers it
 * (PsLayerLowerInfo, layers.h).  Adding a kind is a value of PsLayerKind, an
 * entry with its functions in a layer-*.c file, and its line in
 * ps_layer_table (layer-table.c).
 *
 * The numeric half works on a net's internals (NetLayer, Slot, PsNet),
 * which are declared here for net.c and the kinds alone.
 * Invariant: every operation of an entry is a function of its arguments;
 * a NULL operation means "nothing to do" (no weights to initialise, no
 * workspace) except `forward`, whose NULL means the kind has no numeric
 * kernel. */
#ifndef PS_LAYER_PRIVATE_H
#define PS_LAYER_PRIVATE_H

#include "common/json.h"
#include "model/kernels.h"
#include "model/layers.h"
#include "model/net.h"

#include <math.h>
#include <string.h>

/* ---- reading a model ---------------------------------------------------- */

/* Limits that keep a typo ("count": 1e9) from exhausting memory. */
#define PS_LAYER_MAX_DIM (INT64_C(1) << 30)

/* A layer's input while the model is built. */
typedef struct {
  int rank;
  const int64_t *shape;
  int64_t elems;        /* product of the shape */
  gboolean tokens;      /* integer token ids */
  const char *str;      /* the shape as "(H, W, C)" */
  const char *file;     /* for errors: the model file and the layer's path */
  const char *path;
} PsLayerIn;

/* "FILE: PATH: reason" in the PS_INPUT_ERROR domain. */
void ps_layer_error(GError **error, int code, const char *file, const char *path,
                    const char *fmt, ...) G_GNUC_PRINTF(5, 6);
/* "(H, W, C)".  (transfer full) */
char *ps_layer_shape_str(const int64_t *shape, int rank);
/* Reads a size hyper-parameter: an integer in [1, PS_LAYER_MAX_DIM]. */
gboolean ps_layer_get_dim(json_object *obj, const char *file, const char *path, const char *key,
                          gboolean required, int64_t *out, GError **error);
/* Fails when a weight or tensor count (computed in doubles) is too large
 * for the int64 arithmetic that follows. */
gboolean ps_layer_check_size(double n, const char *what, const PsLayerIn *in, GError **error);
void ps_layer_add_matmul(PsLayer *L, int64_t rows, int64_t k, int64_t n, int64_t count);
/* FLOPs of the layer's matmuls for one example; of those with a weight
 * operand only (not attention's products of two activations). */
double ps_layer_matmul_flops(const PsLayer *L);
double ps_layer_weight_matmul_flops(const PsLayer *L);

/* Attention layer L's score elements per head over a sequence of s that
 * model FLOPs count: s^2 (PaLM's whole square), narrowed to what a
 * sliding window lets a query see (layer-attention.c). */
double ps_attention_model_scores(const PsLayer *L, int64_t s);
/* Output size of a window sweep along one axis. */
int64_t ps_layer_sweep_out(int64_t in, int64_t window, int64_t stride, gboolean same);
/* out = in, fwd and bwd FLOPs per element, read x and write y forward,
 * read dy and the saved tensor and write dx backward. */
void ps_layer_elementwise(PsLayer *L, const PsLayerIn *in, double fwd, double bwd);
/* A dropout rate: a number in [0, 1), else an error naming the file, the
 * key and the range. */
gboolean ps_layer_get_rate(json_object *obj, const char *file, const char *path, const char *key,
                           gboolean required, double *out, GError **error);
/* "padding": "valid" or "same" into L->same_padding, `same` when absent. */
gboolean ps_layer_get_padding(PsLayer *L, json_object *obj, const char *file, const char *path,
                              gboolean same, GError **error);

/* The keys of a kind without hyper-parameters ("type", "name"), and its
 * parse: no bias. */
extern const char *const ps_layer_keys_plain[];
gboolean ps_layer_parse_plain(PsLayer *L, json_object *obj, const char *file, const char *path,
                              GError **error);

/* FLOPs per element of the element-wise ops (see layers.c's comment). */
#define PS_NORM_FWD 8.0
#define PS_NORM_BWD 12.0
#define PS_SOFTMAX_FWD 5.0
#define PS_SOFTMAX_BWD 4.0

/* rmsnorm (layer-norm.c), per element: 4 FLOPs forward (square, sum,
 * scale, gain), 8 backward; latent attention normalizes its latents so. */
#define PS_RMSNORM_FWD 4.0
#define PS_RMSNORM_BWD 8.0

/* Dropout, per element: forward a random draw (taken as one op), the
 * compare with the rate, the select and the scale; backward the select
 * and the scale of the gradient through the kept mask. */
#define PS_DROPOUT_FWD 4.0
#define PS_DROPOUT_BWD 2.0

/* ---- a net's internals -------------------------------------------------- */

typedef struct {
  PsLayerKind kind;
  int input_from, shortcut_from; /* producers, -1 for the net input */
  int out_rank;
  int64_t out_shape[PS_MAX_RANK];
  size_t in_elems, out_elems;   /* per example */
  /* DENSE: y (rows x units) = x (rows x in_dim) W, rows = batch * groups;
   * LAYERNORM: groups rows of in_dim per example */
  int in_dim, units, groups;
  PsConvShape conv;             /* batch filled in per call */
  PsPoolShape pool;             /* also GLOBAL_AVGPOOL's h, w, c */
  PsAttnShape attn;
  PsPatchShape patch;
  gboolean positions;           /* PATCH_EMBEDDING: pos table after W */
  gboolean argmax;              /* MAXPOOL: keeps the argmax of each output */
  size_t w_off, w_len, b_off, b_len;
  size_t cache_elems;           /* per example, kept from forward for backward */
  gboolean aliased;             /* FLATTEN of a layer: out and dout are its input's */
  gboolean owns_out, owns_dout; /* a FLATTEN's out is its input's, even the net input */
  /* backward's write into the gradient of input_from / shortcut_from is
   * the first of the pass into that buffer (overwrite) or not (add) */
  gboolean in_first, sc_first;
  int bn_group;                 /* BATCHNORM: > 1, its moments are a group's,
                                   reduced between the phases by the caller */
  float rate;                   /* DROPOUT: the fraction dropped */
  PsGluGate glu;                /* SWIGLU: the gate's activation */
  int index;                    /* the layer's index in the model (dropout's key) */
} NetLayer;

typedef struct {
  float *out;                   /* max_batch * out_elems, or its input's */
  float *dout;                  /* gradient of out; NULL for softmax_xent */
  float *cache;                 /* layernorm statistics, attention's Q K V, ... */
  int32_t *argmax;              /* MAXPOOL */
} SlotLayer;

typedef struct {
  SlotLayer *layers;
  float *input;
  int32_t *labels;
  int batch;                    /* examples of the current input */
  gboolean training;            /* dropout on: the key below holds */
  int64_t step, first;          /* dropout's key: the step, the batch's first
                                   example in the global batch */
  double loss_sum;
  int correct;
} Slot;

struct PsNet {
  int n_layers;
  NetLayer *layers;
  int max_batch;
  PsPrecision prec;
  size_t in_elems;              /* per example */
  int classes;                  /* logits per row of the loss */
  int labels_per;               /* rows (labels) per example: 1, or S per token */
  size_t n_params;
  float *params, *grads;
  float *workspace;             /* im2col, attention, patches: the largest */
  float *scratch;               /* a gradient to be added into another */
  int n_slots;
  Slot *slots;
  Slot *cur;
  gboolean bn_local;            /* evaluating: every batch norm its own batch's */
  uint64_t seed;                /* weights' and dropout masks' */
};

/* What plan sees of layer i: its input (the output of the layer feeding
 * it, already planned, or the model input) and names for errors. */
typedef struct {
  const PsModel *model;
  int i;
  const PsLayer *l;
  const NetLayer *planned;      /* layers [0, i) */
  int rank;
  const int64_t *shape;
  int64_t elems;
  int sc_rank;                  /* a join's shortcut input */
  const int64_t *sc_shape;
  const char *where, *lname, *kname;
} NetPlan;

/* One layer's step on the current slot. */
typedef struct {
  PsNet *net;
  Slot *s;
  const NetLayer *nl;
  SlotLayer *sl;
  const float *x;               /* the input */
  int batch;
  size_t n;                     /* batch * out_elems */
  const float *w, *b;           /* weights; bias or NULL */
  /* backward */
  float *dx;                    /* where the input's gradient goes, NULL for the net input */
  const float *dy;
  float *dw, *db;               /* db NULL without a bias */
  float loss_scale;
} NetStep;

/* The output of producer p (the net input for -1) in slot s. */
static inline float *ps_net_slot_output(Slot *s, int producer)
{
  return producer < 0 ? s->input : s->layers[producer].out;
}

static inline void ps_net_add_to(float *dst, const float *src, size_t n)
{
  for (size_t i = 0; i < n; i++)
    dst[i] += src[i];
}

/* Dropout's key for layer i in slot s; FALSE (no dropout) unless the
 * slot is training. */
gboolean ps_net_dropout_key(const PsNet *net, const Slot *s, int i, PsDropoutKey *key);

/* Uniform weights in [-limit, limit] from rng. */
void ps_net_fill_uniform(GRand *rng, float *w, size_t n, double limit);
/* Layer i's weights He-uniform when a ReLU follows, else Glorot-uniform. */
void ps_net_init_fan(PsNet *net, int i, GRand *rng, double fan_in, double fan_out);

/* A dense layer's plan: in_dim, units, groups (rows per example), its
 * output shape and its weights; swiglu starts from it. */
gboolean ps_layer_dense_plan(const NetPlan *p, NetLayer *nl, GError **error);

/* ---- the table ---------------------------------------------------------- */

typedef struct {
  PsLayerKind kind;
  const char *name;
  /* keys a model file may give (NULL: the kind is made by a group, never
   * written); parse reads them into L, whose defaults are set (stride 1,
   * bias TRUE) */
  const char *const *keys;
  gboolean (*parse)(PsLayer *L, json_object *obj, const char *file, const char *path,
                    GError **error);
  /* output shape, parameters, FLOPs, traffic, kept activations */
  gboolean (*shape)(PsLayer *L, const PsLayerIn *in, GError **error);
  gboolean takes_tokens;        /* its input may be token ids */
  gboolean loss;                /* the model's last layer, output without a gradient */
  gboolean join;                /* reads shortcut_from as well as input_from */
  gboolean view;                /* numerics: the output is the input's buffer */
  /* numerics: input ranks it needs (bit r for rank r; 0: any), checked
   * before plan with a message naming (S, D) or (H, W, C) */
  unsigned ranks;
  /* NULL: numerics need nothing of this layer beyond the kind */
  gboolean (*numeric)(const PsLayer *L);
  gboolean (*plan)(const NetPlan *p, NetLayer *nl, GError **error);
  void (*init)(PsNet *net, int i, GRand *rng);
  size_t (*workspace)(const NetLayer *nl, int max_batch);
  void (*forward)(const NetStep *st);
  /* TRUE when it wrote the input's gradient into st->dx (the pass's
   * target, which the caller then finishes); a join writes its own */
  gboolean (*backward)(const NetStep *st);
  PsLayerLowerInfo lower;
} PsLayerOps;

/* The entry of a kind.  (transfer none) */
const PsLayerOps *ps_layer_ops(PsLayerKind kind);
/* Every kind, in the order error messages list them; NULL-terminated. */
extern const PsLayerOps *const ps_layer_table[];

extern const PsLayerOps ps_layer_dense, ps_layer_conv2d;
extern const PsLayerOps ps_layer_embedding, ps_layer_patch_embedding;
extern const PsLayerOps ps_layer_attention;
extern const PsLayerOps ps_layer_maxpool, ps_layer_avgpool, ps_layer_global_avgpool;
extern const PsLayerOps ps_layer_batchnorm, ps_layer_layernorm, ps_layer_rmsnorm;
extern const PsLayerOps ps_layer_swiglu, ps_layer_moe;
extern const PsLayerOps ps_layer_relu, ps_layer_gelu, ps_layer_tanh, ps_layer_flatten;
extern const PsLayerOps ps_layer_add, ps_layer_softmax_xent, ps_layer_dropout;

#endif
