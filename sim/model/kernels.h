/* kernels.h: real numeric kernels for training, float32 in memory.
 *
 * Layouts are row-major: activations (batch, features) or NHWC images,
 * dense weights (in, out), conv weights (kh, kw, cin, cout).  Backward
 * kernels *overwrite* dx and *accumulate* into dw and db (so gradients of a
 * batch can be summed over micro-batches); callers zero them per step.
 * With PS_PRECISION_BF16 every matrix product rounds both inputs to
 * bfloat16 (round to nearest even) and accumulates in float32.
 * Invariant: single-threaded and deterministic, the same bits on every
 * machine: the GEMM is the library's own, with one summation order
 * (gemm.c), whatever BLAS library or CPU is there. */
#ifndef PS_KERNELS_H
#define PS_KERNELS_H

#include "../common/common.h"

#include <stddef.h>

/* Nothing to set up any more (the kernels use no BLAS library); kept for
 * the callers that call it once per process before any kernel. */
void ps_kernels_init(void);

/* bfloat16: round to nearest even, NaN kept quiet. */
float ps_bf16_round(float x);
void ps_bf16_round_array(const float *in, float *out, size_t n);

/* C = A (m x k) B (k x n), plus C if accumulate; with transposes as
 * flagged.  The single GEMM entry point, honouring precision. */
void ps_gemm(PsPrecision prec, gboolean trans_a, gboolean trans_b, int m, int n, int k,
             const float *a, const float *b, gboolean accumulate, float *c);

/* Dense over rows: y (rows x out) = x (rows x in) w (in x out) + b. */
void ps_dense_forward(PsPrecision prec, const float *x, const float *w, const float *b,
                      float *y, int rows, int in, int out);
/* dx may be NULL (first layer); b/db may be NULL (no bias). */
void ps_dense_backward(PsPrecision prec, const float *x, const float *w, const float *dy,
                       float *dx, float *dw, float *db, int rows, int in, int out);

void ps_relu_forward(const float *x, float *y, size_t n);
void ps_relu_backward(const float *x, const float *dy, float *dx, size_t n);
/* GELU, tanh approximation. */
void ps_gelu_forward(const float *x, float *y, size_t n);
void ps_gelu_backward(const float *x, const float *dy, float *dx, size_t n);
void ps_tanh_forward(const float *x, float *y, size_t n);
void ps_tanh_backward(const float *y, const float *dy, float *dx, size_t n);

/* Softmax + cross-entropy: writes probs (batch x classes), returns the
 * *sum* of per-example losses (double accumulation); `correct` (may be NULL)
 * receives the count of argmax == label. */
double ps_softmax_xent_forward(const float *logits, const int32_t *labels, float *probs,
                               int batch, int classes, int *correct);
/* dlogits = scale * (probs - onehot(labels)); scale is 1/batch for a mean
 * loss, further scaled by the strategy (e.g. 1/replicas). */
void ps_softmax_xent_backward(const float *probs, const int32_t *labels, float *dlogits,
                              int batch, int classes, float scale);

typedef struct {
  int batch, h, w, cin;    /* input NHWC */
  int kernel, stride;      /* square kernel */
  gboolean same_padding;   /* TensorFlow "same": out = ceil(in / stride), total pad
                              max((out-1)*stride + kernel - in, 0), the smaller half
                              top/left; else "valid" */
  int cout;
  int out_h, out_w;        /* filled by ps_conv2d_shape() */
  int pad_top, pad_left;
} PsConvShape;

void ps_conv2d_shape(PsConvShape *s);
/* Floats of workspace the conv kernels need (im2col buffer). */
size_t ps_conv2d_workspace(const PsConvShape *s);
/* im2col + GEMM. b may be NULL. */
void ps_conv2d_forward(PsPrecision prec, const PsConvShape *s, const float *x, const float *w,
                       const float *b, float *y, float *workspace);
void ps_conv2d_backward(PsPrecision prec, const PsConvShape *s, const float *x, const float *w,
                        const float *dy, float *dx, float *dw, float *db, float *workspace);

typedef struct {
  int batch, h, w, c;
  int size, stride;        /* valid pooling windows */
  int out_h, out_w;        /* filled by ps_pool_shape() */
} PsPoolShape;

void ps_pool_shape(PsPoolShape *s);
/* argmax (may be NULL for avg) records the winning input index per output. */
void ps_maxpool_forward(const PsPoolShape *s, const float *x, float *y, int32_t *argmax);
void ps_maxpool_backward(const PsPoolShape *s, const int32_t *argmax, const float *dy,
                         float *dx);
void ps_avgpool_forward(const PsPoolShape *s, const float *x, float *y);
void ps_avgpool_backward(const PsPoolShape *s, const float *dy, float *dx);

/* Layer normalization over the last dimension (Ba, Kiros and Hinton,
 * "Layer Normalization", 2016, arXiv:1607.06450, eqs. 3-4, with the gain
 * and bias of section 3.1): per row of `dim` values, y = gamma (x - mu) /
 * sqrt(var + eps) + beta with the biased variance.  `stats` (2 per row:
 * mean, then 1/sqrt(var + eps)) is written by forward and read by
 * backward. */
#define PS_LAYERNORM_EPS 1e-5f
void ps_layernorm_forward(const float *x, const float *gamma, const float *beta, float *y,
                          float *stats, int rows, int dim);
void ps_layernorm_backward(const float *x, const float *gamma, const float *stats,
                           const float *dy, float *dx, float *dgamma, float *dbeta, int rows,
                           int dim);

/* Dropout (Srivastava et al., "Dropout: A Simple Way to Prevent Neural
 * Networks from Overfitting", JMLR 2014) with inverted scaling: each
 * element is kept with probability 1 - rate and then multiplied by
 * 1 / (1 - rate), or zeroed.  The mask is counter-based, in
 * kernels-dropout.c: element `elem` of example `e` draws 24 bits from a
 * hash of (seed, step, layer, first + e, elem), so the mask of a given
 * example is the same on whatever device, slot or pass computes it
 * (forward, its recomputation, backward) and needs no state. */
typedef struct {
  uint64_t seed;           /* the run's numerics.seed */
  int64_t step;            /* the training step */
  int64_t layer;           /* the model's layer index */
  int64_t first;           /* global index of the batch's first example */
} PsDropoutKey;

/* Whether element `elem` of the key's example `e` (counted from first) is
 * kept at `rate` in [0, 1). */
gboolean ps_dropout_keeps(const PsDropoutKey *key, int64_t e, uint64_t elem, float rate);
/* y = mask o x / (1 - rate) over `batch` examples of `per` elements each
 * (y may be x).  Backward is the same map on dy: the mask is linear. */
void ps_dropout_apply(const PsDropoutKey *key, float rate, const float *x, float *y, int batch,
                      size_t per);
/* The same over one row of `n` elements of example e starting at element
 * `off` of its mask: what attention applies to one row of probabilities. */
void ps_dropout_row(const PsDropoutKey *key, float rate, int64_t e, uint64_t off,
                    const float *x, float *y, size_t n);

/* Multi-head self-attention on (seq, dim) per example (Vaswani et al.,
 * "Attention Is All You Need", NeurIPS 2017, section 3.2), in
 * kernels-attention.c: [Q K V] = x W_qkv + b_qkv, per head
 * softmax(Q_h K_h^T / sqrt(dh)) V_h, the heads' contexts side by side,
 * then y = context W_o + b_o.  Q and the context are `inner` wide (dim
 * when 0), heads of dh = inner / heads; K and V have kv_heads heads (heads
 * when 0; grouped-query attention, Ainslie et al., "GQA: Training
 * Generalized Multi-Query Transformer Models from Multi-Head Checkpoints",
 * EMNLP 2023), query head h reading key/value head h / (heads / kv_heads).
 * Weights are w = [W_qkv (dim x (inner + 2 kv_heads dh)), W_o (inner x
 * dim)], biases b = [b_qkv (inner + 2 kv_heads dh), b_o (dim)] or NULL;
 * head h owns columns [h dh, (h+1) dh) of Q and of the context, K head g
 * columns [inner + g dh, ...), V head g the kv_heads dh after K.  With
 * `causal`, position i attends to j <= i only; with `window` W > 0, to
 * the j with |i - j| < W only (both: the W positions up to i); with `rope`, Q and K are
 * turned by rotary position embedding (Su et al. 2021, arXiv:2104.09864,
 * eq. 34: pairs (2p, 2p+1) of a head by angle i 10000^(-2p/dh) at
 * position i; dh even) before the scores.  With `dropout` > 0 and a key,
 * the probabilities are dropped out before the product with V (the
 * mask's element of example e, head h, row i, column j is (h S + i) S +
 * j); without a key (evaluation) they are not.
 *
 * With `flash_block` B > 0 the same function is computed as flash
 * attention (Dao et al., "FlashAttention: Fast and Memory-Efficient Exact
 * Attention with IO-Awareness", NeurIPS 2022, algorithms 1 and 2): per
 * head, each block of B query rows runs over the key blocks it can see
 * (a causal head skips the blocks above the diagonal) with a running
 * maximum and sum (the online softmax), and only the row's log-sum-exp is
 * kept for backward, which computes each visible block's probabilities
 * again from it; no S x S matrix is ever held.  The results equal the
 * plain kernels' up to rounding. */
typedef struct {
  int batch, seq, dim, heads;
  gboolean causal;
  int kv_heads;            /* 0: heads */
  int inner;               /* 0: dim */
  gboolean rope;
  float dropout;           /* rate on the probabilities, 0: none */
  const PsDropoutKey *key; /* NULL: no dropout this pass */
  int flash_block;         /* 0: the scores kept whole; > 0: flash attention
                              over square blocks of this many positions
                              (the last one shorter), no dropout */
  int window;              /* 0: none; > 0: a sliding window of this many
                              positions each way (flash skips the blocks
                              wholly outside it) */
} PsAttnShape;

/* Heads dividing inner, kv_heads dividing heads, dh even with rope, a
 * flash block of at least one position and then no dropout. */
gboolean ps_attention_valid(const PsAttnShape *s);
/* Floats of w and of b. */
size_t ps_attention_weights(const PsAttnShape *s);
size_t ps_attention_biases(const PsAttnShape *s);
/* Floats that forward keeps for backward (Q, K, V, context, and the
 * probabilities or, with flash_block, each row's log-sum-exp), and of
 * workspace. */
size_t ps_attention_saved(const PsAttnShape *s);
size_t ps_attention_workspace(const PsAttnShape *s);
void ps_attention_forward(PsPrecision prec, const PsAttnShape *s, const float *x,
                          const float *w, const float *b, float *y, float *saved,
                          float *workspace);
/* dx may be NULL; b/db may be NULL (no biases). */
void ps_attention_backward(PsPrecision prec, const PsAttnShape *s, const float *x,
                           const float *w, const float *saved, const float *dy, float *dx,
                           float *dw, float *db, float *workspace);

/* RMS normalization over the last dimension (Zhang and Sennrich, "Root
 * Mean Square Layer Normalization", NeurIPS 2019, eq. 4, with eps inside
 * the root as Llama 2 does): per row of `dim` values, y = gain x /
 * sqrt(mean(x^2) + eps).  `stats` (1 per row: 1/sqrt(mean(x^2) + eps)) is
 * written by forward and read by backward.  In kernels-decoder.c. */
#define PS_RMSNORM_EPS 1e-5f
void ps_rmsnorm_forward(const float *x, const float *gain, float *y, float *stats, int rows,
                        int dim);
/* dx may be NULL. */
void ps_rmsnorm_backward(const float *x, const float *gain, const float *stats,
                         const float *dy, float *dx, float *dgain, int rows, int dim);

/* Gated feed-forward input (Shazeer, "GLU Variants Improve Transformer",
 * 2020, arXiv:2002.05202, eqs. 5 and 6 without the down projection): y
 * (rows x units) = act(x W_g + b_g) o (x W_u + b_u), act silu(a) = a
 * sigmoid(a) (SwiGLU) or the tanh-form gelu of ps_gelu_forward (GeGLU);
 * w = [W_g (in x units), W_u (in x units)], b = [b_g, b_u] or NULL.
 * `saved` (2 rows units: the gate's and the up projection's outputs) is
 * written by forward and read by backward; backward's workspace is
 * ps_swiglu_workspace floats.  In kernels-decoder.c. */
typedef enum { PS_GLU_SILU, PS_GLU_GELU } PsGluGate;
size_t ps_swiglu_workspace(int rows, int in, int units);
void ps_swiglu_forward(PsPrecision prec, PsGluGate gate, const float *x, const float *w,
                       const float *b, float *y, float *saved, int rows, int in, int units);
/* dx may be NULL; b/db may be NULL (no biases). */
void ps_swiglu_backward(PsPrecision prec, PsGluGate gate, const float *x, const float *w,
                        const float *saved, const float *dy, float *dx, float *dw, float *db,
                        float *workspace, int rows, int in, int units);

/* Token embedding: row r of y (rows x dim) = table[ids[r]], plus pos[r %
 * seq] when pos is not NULL; ids are token ids held exactly in floats
 * (below 2^24), each in [0, vocab).  Backward adds dy's rows into the
 * rows of dtable they were read from (and into dpos).  In
 * kernels-decoder.c. */
void ps_embedding_forward(const float *ids, const float *table, const float *pos, float *y,
                          int rows, int seq, int vocab, int dim);
void ps_embedding_backward(const float *ids, const float *dy, float *dtable, float *dpos,
                           int rows, int seq, int vocab, int dim);

/* Patch embedding (Dosovitskiy et al., ICLR 2021, arXiv:2010.11929, eq.
 * 1): an (h, w, c) image cut into non-overlapping patch x patch squares,
 * row-major over patches, each flattened as (py, px, c) and projected:
 * y (seq x dim) = patches w (patch^2 c x dim) + b (+ pos (seq x dim) when
 * pos is not NULL), seq = (h / patch) (w / patch); h and w are multiples
 * of patch. */
typedef struct {
  int batch, h, w, c, patch, dim;
} PsPatchShape;

int ps_patch_seq(const PsPatchShape *s);
size_t ps_patch_workspace(const PsPatchShape *s);
void ps_patch_forward(PsPrecision prec, const PsPatchShape *s, const float *x, const float *w,
                      const float *pos, const float *b, float *y, float *workspace);
/* dx may be NULL; dpos is NULL exactly when there are no positions. */
void ps_patch_backward(PsPrecision prec, const PsPatchShape *s, const float *x, const float *w,
                       const float *dy, float *dx, float *dw, float *dpos, float *db,
                       float *workspace);

/* Optimizers over a flat parameter vector.  State buffers are zeroed by
 * the caller at creation.  Adam's step t counts from 1. */
void ps_sgd_momentum_update(float *w, const float *g, float *velocity, size_t n, float lr,
                            float momentum);
void ps_adam_update(float *w, const float *g, float *m, float *v, size_t n, float lr,
                    float beta1, float beta2, float epsilon, int64_t t);

/* kernels-optim.c.  Sum of squares of x, accumulated in double. */
double ps_sum_squares(const float *x, size_t n);
/* One layer's LARS step (its velocity); `adapt` FALSE: plain momentum,
 * no weight decay (a bias or a normalization's parameters). */
void ps_lars_update(float *w, const float *g, float *velocity, size_t n, float lr,
                    float momentum, float eta, float weight_decay, gboolean adapt);
/* LARS's step of a piece of a layer whose whole weights and gradients
 * have the norms wn and gn (a layer split among devices: each sums its
 * piece's squares, the sums are all-reduced). */
void ps_lars_apply(float *w, const float *g, float *velocity, size_t n, float lr,
                   float momentum, float eta, float weight_decay, double wn, double gn);
/* One layer's LAMB step, t from 1; `adapt` FALSE: Adam without decay. */
void ps_lamb_update(float *w, const float *g, float *m, float *v, size_t n, float lr,
                    float beta1, float beta2, float epsilon, float weight_decay,
                    gboolean adapt, int64_t t);

/* LAMB in its two passes, for a layer split among devices: the step's
 * constants (weight decay 0 where not adapted, the bias corrections of
 * step t); pass one over a piece updates its moments and returns the sum
 * of squares of its update u; pass two, given the whole layer's norms of
 * w and u, updates the piece's weights (the ratio 1 where not adapted or
 * a norm is zero).  ps_lamb_update is the two over one whole layer. */
typedef struct {
  float beta1, beta2, epsilon, wd, c1, c2;
} PsLambStep;
PsLambStep ps_lamb_step(float beta1, float beta2, float epsilon, float weight_decay,
                        gboolean adapt, int64_t t);
double ps_lamb_moments(const PsLambStep *s, const float *w, const float *g, float *m, float *v,
                       size_t n);
void ps_lamb_apply(const PsLambStep *s, float *w, const float *m, const float *v, size_t n,
                   float lr, gboolean adapt, double wn, double un);

/* Training batch normalization of rows x C (channels last), in two
 * phases around an optional all-reduce of 2C floats over `group` replicas
 * with equal rows: moments (2C: mean and mean square, this device's share
 * of the group's), then normalize into y keeping stats (2C: mean, rstd).
 * Backward: grad_moments adds dgamma and dbeta and writes the share of the
 * means of dy and dy xhat (2C), then input_grad writes dx. */
#define PS_BATCHNORM_EPS 1e-5f
void ps_batchnorm_moments(const float *x, int rows, int C, int group, float *moments);
void ps_batchnorm_normalize(const float *x, const float *gamma, const float *beta,
                            const float *moments, float *y, float *stats, int rows, int C);
void ps_batchnorm_grad_moments(const float *x, const float *stats, const float *dy, int rows,
                               int C, int group, float *dgamma, float *dbeta, float *moments);
void ps_batchnorm_input_grad(const float *x, const float *gamma, const float *stats,
                             const float *moments, const float *dy, float *dx, int rows, int C);

#endif
