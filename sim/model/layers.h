/* layers.h: model descriptions as flat lists of layers with shapes and
 * costs, loaded from models/NAME.json.
 *
 * Conventions, used everywhere in podsim:
 * - shapes are per example, without the batch dimension: (H, W, C) for
 *   images, (S, D) for sequences, (D) for vectors;
 * - a multiply-add counts as 2 FLOPs;
 * - costs are per example; multiply by the batch.
 * Invariant: layers[i].in_shape equals the out_shape of the layer feeding
 * it (the previous layer, or the block input for a residual shortcut). */
#ifndef PS_LAYERS_H
#define PS_LAYERS_H

#include "../common/common.h"

#include <json-c/json.h>

typedef enum {
  PS_LAYER_DENSE,        /* y = x W + b over the last dimension */
  PS_LAYER_RELU,
  PS_LAYER_GELU,
  PS_LAYER_TANH,
  PS_LAYER_SOFTMAX_XENT, /* softmax + cross-entropy loss against labels */
  PS_LAYER_CONV2D,       /* NHWC, square kernel, stride, "same"/"valid" */
  PS_LAYER_MAXPOOL,
  PS_LAYER_AVGPOOL,
  PS_LAYER_GLOBAL_AVGPOOL, /* (H, W, C) -> (C), or (S, D) -> (D) over tokens */
  PS_LAYER_BATCHNORM,
  PS_LAYER_LAYERNORM,
  PS_LAYER_EMBEDDING,    /* token ids (S) -> (S, D), plus positions */
  PS_LAYER_ATTENTION,    /* multi-head self-attention, (S, D) -> (S, D) */
  PS_LAYER_FLATTEN,
  PS_LAYER_ADD,          /* residual join: body output + shortcut output */
  PS_LAYER_PATCH_EMBEDDING, /* (H, W, C) image -> (S, D) tokens, one per PxP patch */
  PS_LAYER_RMSNORM,      /* RMS normalization over the last dimension, a gain */
  PS_LAYER_SWIGLU,       /* (.., D) -> (.., F): silu(x W_g) o (x W_u) */
  PS_LAYER_DROPOUT,      /* training: each element kept with 1 - rate, scaled */
  PS_LAYER_MOE,          /* (S, D) -> (S, D): a router and top-k of E gated experts */
  PS_LAYER_N_KINDS
} PsLayerKind;

/* How the cost model (hw/cost.c) lowers a kind to kernels, XLA's way:
 * - PRODUCER: kernels of its own (a matmul or convolution, a pool, an
 *   embedding, a normalization of rows, the loss), taking its element-wise
 *   consumers into its output;
 * - UNARY: element-wise on one input, fused into its producer's kernel;
 * - VIEW: a reshape, no kernel and no traffic;
 * - JOIN: the residual add of two inputs, fused where its body's producer
 *   allows;
 * - NORM_STATS: training batch normalization, a statistics reduction with
 *   the normalization deferred into its consumer. */
typedef enum {
  PS_LOWER_PRODUCER,
  PS_LOWER_UNARY,
  PS_LOWER_VIEW,
  PS_LOWER_JOIN,
  PS_LOWER_NORM_STATS,
} PsLayerLowering;

/* How a kind splits along a tensor-parallel mesh axis (Megatron-LM,
 * Shoeybi et al. 2019; GSPMD), read by strategies that shard a layer's
 * work across devices.  The activation between layers is either whole on
 * every device of the axis, split along its last dimension, or a partial
 * sum that an all-reduce completes.
 * - REPLICATED: not split; every device of the axis computes it whole
 *   (convolutions, pools, batch norm: the zero value, for kinds that never
 *   say);
 * - ELEMENTWISE: works on any layout and keeps it (activations, the
 *   residual add of two inputs in the same layout, reshapes);
 * - NORM: needs whole rows (a layer or RMS norm): its input is completed
 *   first, then it runs whole (or split along the sequence);
 * - MATMUL: a dense layer: on a whole input it is column-parallel (its
 *   output split), on a split input row-parallel (its output partial);
 * - HEADS: attention, split by heads: whole input, partial output;
 * - VOCAB: a token embedding split by vocabulary: partial output;
 * - LOSS: softmax cross-entropy over logits split by vocabulary, its max
 *   and sum reduced across the axis. */
typedef enum {
  PS_TP_REPLICATED,
  PS_TP_ELEMENTWISE,
  PS_TP_NORM,
  PS_TP_MATMUL,
  PS_TP_HEADS,
  PS_TP_VOCAB,
  PS_TP_LOSS,
} PsTensorRole;

/* A kind's part of the layer table that the cost model reads. */
typedef struct {
  PsLayerLowering lowering;
  PsTensorRole tensor;          /* how a tensor axis splits it */
  gboolean fuses_into_producer; /* strategies group it with its producer's op */
  const char *kernel;           /* the forward kernel's name in listings */
  /* the contraction of its matmul is a window (kernel^2 x input channels),
   * each input channel padded to the MXU unless the input is thin */
  gboolean window_contraction;
  /* reads its weights by rows, as a gather: the rows are in its per-example
   * traffic, and only its backward touches the whole table (writing the
   * dense gradient) */
  gboolean gathers;
  /* its input is token ids, which have no gradient: backward computes only
   * the weight gradient of its products, no input gradient */
  gboolean takes_ids;
} PsLayerLowerInfo;

/* One matrix product of a layer's forward pass, for one example:
 * (rows x k) times (k x n), `count` times.  The cost model pads rows to the
 * MXU's batch tile (times the batch) and k, n to the MXU size (k alone for a
 * product of two activations).  `done` is
 * the fraction of it the kernels execute and `bwd` the products of its
 * size backward executes per forward one (0 in both: 1 and 2, a matmul
 * and its input- and weight-gradient products); flash attention's causal
 * heads skip the blocks above the diagonal and recompute the scores in
 * backward.  The model's FLOPs (MFU) count the whole product, once. */
typedef struct {
  int64_t rows;
  int64_t k;
  int64_t n;
  int64_t count;
  double done;
  double bwd;
  gboolean activations; /* both operands activations (attention's scores and
                           context), not a weight: recomputed under "minimal" */
  /* A grouped product (a dropless mixture of experts' grouped matmul,
   * megablox or tokamax gmm): its rows over the batch are `groups` groups
   * of one kernel that walks them in tiles of group_tile[p] rows, for
   * PsMatmulPass p; a group that starts inside a tile visits that tile
   * again (0 groups: a plain product). */
  int64_t groups;
  int64_t group_tile[3];
} PsMatmul;

/* The three kernels of a product: forward, the input gradient (dlhs) and
 * the weight gradient (drhs, megablox's tgmm). */
typedef enum { PS_MM_FWD, PS_MM_DGRAD, PS_MM_WGRAD } PsMatmulPass;

/* Bytes of one dropout-mask element kept for backward: XLA's PRED, one
 * byte (assumption: the comparison's result is what stays live, not the
 * random draws). */
#define PS_MASK_BYTES 1

/* Flash attention's kernels, each with blocks of its own (splash
 * attention's BlockSizes): forward, backward's dk/dv kernel (the fused
 * backward kernel when there is one) and its dq kernel. */
typedef enum { PS_FLASH_FWD, PS_FLASH_DKV, PS_FLASH_DQ, PS_FLASH_KERNELS } PsFlashKernel;

#define PS_MAX_RANK 3
#define PS_MAX_MATMULS 7

/* Which tensor between layers a kind's backward reads, besides what it
 * keeps of its own (act_elems as its shape function sets it): its input
 * (a matmul's operand, a normalization's input, gelu's and relu's
 * argument), its output (tanh's), or neither.  Layers that need the same
 * tensor share one buffer (layers.c counts it once). */
typedef enum {
  PS_SAVES_NONE,
  PS_SAVES_INPUT,
  PS_SAVES_OUTPUT,
} PsLayerSaves;

typedef struct {
  PsLayerKind kind;
  char *name;                  /* unique, e.g. "stage2.block1.conv_a" */
  int in_rank, out_rank;
  int64_t in_shape[PS_MAX_RANK];
  int64_t out_shape[PS_MAX_RANK];
  /* hyper-parameters (those that apply to the kind) */
  int64_t units, filters, kernel, stride, pool, heads, vocab, dim;
                               /* PATCH_EMBEDDING: kernel = stride = P, dim = D */
  gboolean same_padding, bias;
  gboolean positions;          /* EMBEDDING, PATCH_EMBEDDING: learned positions */
  gboolean lookup_matmul;      /* EMBEDDING: looked up as a one-hot matmul on the
                                  MXU ("lookup": "matmul"), not gathered by rows */
  gboolean causal;             /* ATTENTION: position i attends to j <= i only */
  int64_t window;              /* ATTENTION: 0, or a sliding window: position i
                                  attends to the j with |i - j| < window only */
  int64_t kv_heads;            /* ATTENTION: key/value heads (= heads unless grouped);
                                  its dim is the projection width (d_model unless given) */
  gboolean rope;               /* ATTENTION: rotary position embedding on Q and K */
  int64_t kv_rank, q_rank;     /* ATTENTION, latent (DeepSeek's multi-head latent
                                  attention): keys and values projected up from a
                                  kv_rank-wide latent (0: not latent), queries from a
                                  q_rank-wide one (0: straight from the input) */
  int64_t rope_dim, v_dim;     /* ATTENTION, latent: the decoupled rotary part of each
                                  query and key head (shared by the heads' keys) and
                                  the value head's width; the query and key heads are
                                  dim / heads + rope_dim wide */
  gboolean gelu_gate;          /* SWIGLU: the gate's activation is gelu (GeGLU,
                                  "activation": "gelu"), not silu */
  int64_t flash_block;         /* ATTENTION: 0, or flash attention over blocks of
                                  this many positions (at most the sequence) */
  gboolean flash_fused_bwd;    /* ATTENTION, flash: one backward kernel for dq, dk
                                  and dv (5 block products, not 7) */
  int64_t flash_q[PS_FLASH_KERNELS], flash_kv[PS_FLASH_KERNELS];
                               /* ATTENTION, flash: each kernel's query and key/value
                                  blocks (PsFlashKernel; "flash_blocks", default
                                  flash_block square), whose mask skipping the
                                  costs follow */
  double core_vec_fwd, core_vec_bwd;
                               /* ATTENTION, flash: the softmax's vector FLOPs per
                                  example, forward and backward, which run between
                                  the block products that feed and read them, in
                                  series with the MXU (part of fwd_flops, bwd_flops) */
  double core_bytes;           /* ATTENTION: elements per example its products of
                                  activations read and write (Q, K, V in, the
                                  context out, and the scores unless flash) */
  double rate;                 /* DROPOUT: the fraction dropped; ATTENTION: that of
                                  its probabilities (0: none) */
  int64_t experts, top_k;      /* MOE: experts, and those each position is routed to */
  int64_t shared_experts;      /* MOE: experts every position passes through too */
  double capacity_factor;      /* MOE: 0 dropless; else each expert takes at most
                                  `capacity` positions of a sequence (MaxText's
                                  dropping path, its capacity_factor) */
  int64_t capacity;            /* MOE: that capacity (0 when dropless) */
  int64_t group_tiles[6];      /* MOE, dropless: the grouped matmul's row tiles,
                                  gate and up then down, each PsMatmulPass
                                  ("group_tiles") */
  /* Work per example in fusions of its own between the layer's kernels,
   * which XLA cannot fuse into them (a dropless mixture of experts' sort,
   * gating and combination around its Pallas grouped matmuls): part of
   * fwd_flops and fwd_bytes (elements), costed as kernels apart forward
   * and backward; 0 for every other layer. */
  double apart_fwd_flops, apart_bwd_flops;
  double apart_fwd_bytes, apart_bwd_bytes;
  int shortcut_of;             /* ADD: index of the first layer of the
                                  block whose input feeds the shortcut */
  int unit;                    /* the iteration of an outermost "repeat" it was
                                  expanded in, numbered from 1 over the model; 0
                                  outside any repeat (full rematerialization keeps
                                  the input of each such unit, as a scan of
                                  rematerialized layers does) */
  /* costs per example */
  int64_t params;              /* trainable parameters */
  double fwd_flops, bwd_flops; /* all FLOPs, matmul and element-wise */
  double fwd_bytes, bwd_bytes; /* HBM traffic unfused, in elements */
  int64_t act_elems;           /* elements kept for the backward pass at the
                                  activation precision: the layer's own
                                  (attention's q, k, v, context and
                                  probabilities, an argmax) plus the tensors
                                  between layers it is the first to need */
  int64_t stat_elems;          /* float32 statistics kept (a norm's mean and
                                  reciprocal deviation per row or channel) */
  int64_t mask_elems;          /* dropout mask elements, one byte each (XLA's
                                  PRED): written forward, kept, read backward */
  PsLayerSaves saves;          /* the tensor between layers backward reads */
  int n_mm;
  PsMatmul mm[PS_MAX_MATMULS]; /* forward matmuls; backward does each twice */
  /* data flow (added with layers.c): the layer whose output is this
   * layer's input, -1 for the model input; for ADD, input_from is the last
   * body layer and shortcut_from the last shortcut layer (or, for an
   * identity shortcut, the block input's producer, -1 the model input). */
  int input_from;
  int shortcut_from;
} PsLayer;

typedef struct {
  char *name;
  char *file;
  char *description;
  int in_rank;
  int64_t in_shape[PS_MAX_RANK];
  gboolean token_input;        /* input is integer token ids */
  int64_t classes;
  int64_t labels_per_example;  /* rows of logits the loss scores: 1 for a
                                  vector, S for per-token (S, V) logits */
  int n_layers;
  PsLayer *layers;
  /* totals per example */
  int64_t params;
  double fwd_flops, bwd_flops;
  int64_t act_elems;
  gboolean numerics_supported; /* every layer has a real kernel, and at most
                                  2^28 parameters */
} PsModel;

/* Builds a model from JSON; errors are "FILE: PATH: reason".  Schema:
 *   {"name", "description", "input": {"shape": [...], "classes": N,
 *    "tokens": bool}, "layers": [LAYER, ...]}
 * where LAYER is {"type": KIND, ...params} or a group
 *   {"type": "residual", "body": [...], "shortcut": [...]} or
 *   {"type": "repeat", "count": N, "body": [...]}.
 * (transfer full) */
PsModel *ps_model_from_json(json_object *obj, const char *file, const char *path,
                            GError **error);
PsModel *ps_model_load_file(const char *file, GError **error);
void ps_model_free(PsModel *model);

const char *ps_layer_kind_name(PsLayerKind kind);
/* (transfer none) */
const PsLayerLowerInfo *ps_layer_kind_lower(PsLayerKind kind);
int64_t ps_shape_elems(const int64_t *shape, int rank);

/* Bytes layer L keeps for backward over `batch` examples: act_elems at
 * act_bytes each, its statistics in float32 and its dropout mask at one
 * byte an element. */
int64_t ps_layer_kept_bytes(const PsLayer *L, int64_t batch, int act_bytes);
/* The dropout mask's share of that (0 without dropout). */
int64_t ps_layer_mask_bytes(const PsLayer *L, int64_t batch);
/* Layers [first, last)'s mask bytes per example; 0: the model has no
 * dropout. */
int64_t ps_model_mask_bytes(const PsModel *model, int first, int last);

/* Elements per example that layers [first, last) need for backward but
 * that act_elems counts before `first` (or nowhere: a tensor no kernel
 * writes, recomputed from a tensor made before `first`): what a pipeline
 * stage starting at `first` holds of its received input.  0 for first 0. */
int64_t ps_model_boundary_elems(const PsModel *model, int first, int last);

/* Bytes a device needs for training with `batch` examples: weights,
 * gradients and `optimizer_slots` copies (4 bytes each), plus activations
 * kept for backward at `act_bytes` per element (all layers, or the layer
 * range [first, last) for a pipeline stage). */
int64_t ps_model_memory_bytes(const PsModel *model, int first, int last, int64_t batch,
                              int optimizer_slots, int act_bytes);

/* Model FLOPs of one training example (forward and backward), as PaLM
 * defines them for MFU: 3x the forward's matmul FLOPs (weights' products
 * and attention's score and context products; no embedding lookup, no
 * element-wise work, no re-materialization). */
double ps_model_flops_per_example(const PsModel *model);
/* The same with a causal attention layer's score and context FLOPs
 * halved (a sliding window's too, over the keys PaLM's count gives it), as
 * MaxText counts the model FLOPs of its "TFLOP/s/device" and MFU
 * (maxtext_utils.py, calculate_tflops_training_per_device:
 * causal_attention_flops = noncausal_attention_flops / 2). */
double ps_model_flops_causal_halved_per_example(const PsModel *model);

/* The role of a mixture of experts' product m, in the order layer-moe.c
 * adds them: the router's; the experts' gate and up, their down (and the
 * shared experts' the same again); with a capacity, the dispatch of the
 * positions into the experts' slots and the combination of their outputs
 * (both products of activations). */
typedef enum {
  PS_MOE_ROUTER,
  PS_MOE_GATE_UP,
  PS_MOE_DOWN,
  PS_MOE_DISPATCH,
  PS_MOE_COMBINE,
} PsMoeProduct;
PsMoeProduct ps_moe_product(const PsLayer *L, int m);

/* Parameters of a layer that a layer-wise optimizer (LARS, LAMB) adapts
 * with a trust ratio: its weights but the bias, none of a normalization's
 * gains and shifts (as net.c's ps_net_opt_segments). */
int64_t ps_layer_adapted_params(const PsLayer *L);

/* Prints a table of layers with shapes, params and FLOPs. */
void ps_model_describe(const PsModel *model, GString *out);

#endif
