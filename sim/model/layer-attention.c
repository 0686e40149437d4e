/* layer-attention.c: multi-head self-attention, (S, D) -> (S, D), as an
 * entry of the layer table (layer-private.h): Q, K, V projections, scores
 * Q K^T per head, softmax (causal: position i attends to j <= i only),
 * context P V, output projection.  Keys beyond "heads": "kv_heads" (grouped
 * key/value heads, default heads), "dim" (the projection width, default
 * d_model, head_dim = dim / heads), "rope" (rotary position embedding on
 * Q and K, default false), "causal", "window" (a sliding window: position
 * i attends to the j with |i - j| < window only, as MaxText's
 * sliding_window_size; default none), "bias" (default true), "dropout"
 * (the rate of dropout on the probabilities, after the softmax and
 * before the product with V, training only; default 0), "flash",
 * "flash_block", "flash_blocks" (each flash kernel's blocks) and
 * "flash_fused_backward" (docs/models.md, flash attention), and the
 * latent keys "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim" and
 * "v_head_dim" (DeepSeek's multi-head latent attention, latent_shape:
 * flash only, timing only, no tensor or context axis over it).  A
 * head-split shard of one (heads / T, kv_heads / T, dim / T) is an
 * attention layer.
 * Invariant: its projections are one weight block, [W_qkv (D x (dim + 2
 * kv_heads head_dim)), W_o (dim x D)] (and one bias block when it has
 * biases); with the defaults its costs are those of plain multi-head
 * attention; a latent one's are its own (latent_shape). */
#include "model/layer-private.h"

static const char *const keys_attention[] = {"type",   "name", "heads", "kv_heads", "dim",
                                             "bias", "causal", "window", "rope", "dropout",
                                             "flash", "flash_block", "flash_blocks",
                                             "flash_fused_backward", "kv_lora_rank",
                                             "q_lora_rank", "qk_rope_head_dim", "v_head_dim",
                                             NULL};

/* "flash_blocks"' keys, MaxText's sa_block_* names without the prefix:
 * each kernel's query and key/value blocks (PsFlashKernel's order). */
static const char *const keys_flash_blocks[] = {"q", "kv", "q_dkv", "kv_dkv", "q_dq", "kv_dq",
                                                NULL};

/* The flash kernel's default block: MaxText's splash attention blocks of
 * 512 query and key positions, forward and in both backward kernels
 * (min(512, length) for every BlockSizes field in attentions.py,
 * AI-Hypercomputer/maxtext MaxText/layers/attentions.py at commit
 * 000e93554a028c208eeacc75b7c1813a79ae6219; sa_block_* 512 in later
 * base.yml). */
#define PS_FLASH_BLOCK 512

/* Backward's products of a score-sized block per forward one with flash
 * attention: splash attention's separate dq and dkv kernels (its default
 * BlockSizes.use_fused_bwd_kernel = False) each compute the scores q k^T
 * again; dkv then dV = P^T dO, dP = dO v^T and dK = dS^T q, dq dP = dO v^T
 * and dQ = dS k: 7 products against forward's 2 (q k^T, P v;
 * jax-ml/jax jax/experimental/pallas/ops/tpu/splash_attention/
 * splash_attention_kernel.py, _flash_attention_dq_kernel and
 * _flash_attention_dkv_kernel, at commit
 * 047c691c8f31fe00f68c335cf818d1a96b8c7c17). */
#define PS_FLASH_BWD_PRODUCTS 3.5

/* Of those 7, the dkv kernel's: q k^T, dP, dV and dK. */
#define PS_FLASH_DKV_PRODUCTS 4.0

/* The same with "flash_fused_backward" (BlockSizes.use_fused_bwd_kernel =
 * True, MaxText's sa_use_fused_bwd_kernel): one kernel computes the scores
 * again once, dP = dO v^T, dV = P^T dO, dQ = dS k and dK = dS^T q: 5
 * products against forward's 2, and the softmax's vector work once. */
#define PS_FLASH_FUSED_BWD_PRODUCTS 2.5

/* "flash_blocks": each kernel's blocks (splash attention's BlockSizes:
 * block_q and block_kv, block_q_dkv and block_kv_dkv, block_q_dq and
 * block_kv_dq), each defaulting to the square flash_block.  With the
 * fused backward kernel the dq blocks go unused, and are refused. */
static gboolean flash_blocks_parse(PsLayer *L, json_object *obj, const char *file,
                                   const char *path, gboolean flash, int64_t block, GError **error)
{
  json_object *fb = NULL;
  for (int k = 0; k < PS_FLASH_KERNELS; k++)
    L->flash_q[k] = L->flash_kv[k] = flash ? block : 0;
  if (!json_object_object_get_ex(obj, "flash_blocks", &fb))
    return TRUE;
  g_autofree char *p = ps_json_path_join(path, "flash_blocks");
  if (!flash) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: %s: block sizes are for flash attention; set \"flash\": true too, or "
                "leave flash_blocks out",
                file, p);
    return FALSE;
  }
  if (!ps_json_expect_object(fb, file, p, error) ||
      !ps_json_check_keys(fb, file, p, keys_flash_blocks, error))
    return FALSE;
  for (int k = 0; k < PS_FLASH_KERNELS; k++)
    if (!ps_layer_get_dim(fb, file, p, keys_flash_blocks[2 * k], FALSE, &L->flash_q[k], error) ||
        !ps_layer_get_dim(fb, file, p, keys_flash_blocks[2 * k + 1], FALSE, &L->flash_kv[k],
                          error))
      return FALSE;
  if (L->flash_fused_bwd && (json_object_object_get_ex(fb, "q_dq", NULL) ||
                             json_object_object_get_ex(fb, "kv_dq", NULL))) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: %s: the fused backward kernel (flash_fused_backward) computes dq with the "
                "dkv blocks; leave q_dq and kv_dq out",
                file, p);
    return FALSE;
  }
  return TRUE;
}

/* The latent keys ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
 * "v_head_dim", MaxText's names): DeepSeek's multi-head latent attention,
 * costed as flash attention (splash, as MaxText runs it on TPU), every
 * head its own keys and values (kv_heads = heads), no biases; timing
 * only.  The others need kv_lora_rank. */
static gboolean latent_parse(PsLayer *L, json_object *obj, const char *file, const char *path,
                             gboolean flash, GError **error)
{
  static const char *const needs_kv[] = {"q_lora_rank", "qk_rope_head_dim", "v_head_dim"};
  L->kv_rank = L->q_rank = L->rope_dim = L->v_dim = 0;
  if (!ps_layer_get_dim(obj, file, path, "kv_lora_rank", FALSE, &L->kv_rank, error) ||
      !ps_layer_get_dim(obj, file, path, "q_lora_rank", FALSE, &L->q_rank, error) ||
      !ps_layer_get_dim(obj, file, path, "qk_rope_head_dim", FALSE, &L->rope_dim, error) ||
      !ps_layer_get_dim(obj, file, path, "v_head_dim", FALSE, &L->v_dim, error))
    return FALSE;
  const char *why = NULL, *key = NULL;
  for (size_t i = 0; i < G_N_ELEMENTS(needs_kv) && L->kv_rank == 0; i++)
    if (json_object_object_get_ex(obj, needs_kv[i], NULL)) {
      key = needs_kv[i];
      why = "belongs to latent attention; set kv_lora_rank too, or leave it out";
    }
  if (!why && L->kv_rank > 0) {
    key = "kv_lora_rank";
    if (!flash)
      why = "latent attention is costed as flash attention (splash, as MaxText runs it); "
            "set \"flash\": true";
    else if (L->bias)
      why = "latent attention has no biases; set \"bias\": false";
    else if (L->kv_heads > 0 && L->kv_heads != L->heads)
      why = "latent attention gives every head its own keys and values; leave kv_heads out "
            "or set it to heads";
  }
  if (why) {
    g_autofree char *p = ps_json_path_join(path, key);
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE, "%s: %s: %s", file, p, why);
    return FALSE;
  }
  return TRUE;
}

/* causal and window are masks: the same counted cost (but flash
 * attention's skipped blocks), and the numerics honour them */
static gboolean attention_parse(PsLayer *L, json_object *obj, const char *file,
                                const char *path, GError **error)
{
  gboolean flash = FALSE;
  int64_t block = 0;
  if (!ps_json_check_keys(obj, file, path, keys_attention, error) ||
      !ps_layer_get_dim(obj, file, path, "heads", TRUE, &L->heads, error) ||
      !ps_layer_get_dim(obj, file, path, "kv_heads", FALSE, &L->kv_heads, error) ||
      !ps_layer_get_dim(obj, file, path, "dim", FALSE, &L->dim, error) ||
      !ps_json_get_bool(obj, file, path, "bias", FALSE, &L->bias, error) ||
      !ps_json_get_bool(obj, file, path, "causal", FALSE, &L->causal, error) ||
      !ps_layer_get_dim(obj, file, path, "window", FALSE, &L->window, error) ||
      !ps_json_get_bool(obj, file, path, "rope", FALSE, &L->rope, error) ||
      !ps_layer_get_rate(obj, file, path, "dropout", FALSE, &L->rate, error) ||
      !ps_json_get_bool(obj, file, path, "flash", FALSE, &flash, error) ||
      !ps_layer_get_dim(obj, file, path, "flash_block", FALSE, &block, error) ||
      !ps_json_get_bool(obj, file, path, "flash_fused_backward", FALSE, &L->flash_fused_bwd,
                        error))
    return FALSE;
  if (L->flash_fused_bwd && !flash) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: %s.flash_fused_backward: a backward kernel of flash attention; set "
                "\"flash\": true too, or leave flash_fused_backward out",
                file, path);
    return FALSE;
  }
  if (block > 0 && !flash) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: %s.flash_block: a block size is for flash attention; set \"flash\": true "
                "too, or leave flash_block out",
                file, path);
    return FALSE;
  }
  if (flash && L->rate > 0) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: %s.flash: flash attention has no dropout on its probabilities (they never "
                "leave the kernel); set \"dropout\": 0 or \"flash\": false",
                file, path);
    return FALSE;
  }
  L->flash_block = flash ? (block > 0 ? block : PS_FLASH_BLOCK) : 0;
  return flash_blocks_parse(L, obj, file, path, flash, L->flash_block, error) &&
         latent_parse(L, obj, file, path, flash, error);
}

/* Score elements flash attention computes per head over a sequence of s
 * in blocks of bq query rows by bk key columns: every block some row of
 * which sees some column of it (causal: not wholly above the diagonal;
 * window w: not wholly w or more away from every row), as splash
 * attention skips the others. */
static double flash_scores(int64_t s, int64_t bq, int64_t bk, gboolean causal, int64_t w)
{
  if (!causal && w <= 0)
    return (double)s * (double)s;
  bq = MIN(bq, s);
  bk = MIN(bk, s);
  double n = 0;
  for (int64_t i0 = 0; i0 < s; i0 += bq) {
    int64_t rows = MIN(bq, s - i0), last = i0 + rows - 1, lo = 0, hi = s; /* columns [lo, hi) */
    if (w > 0) {
      lo = MAX(0, i0 - w + 1) / bk * bk;                  /* first block it reaches */
      hi = MIN(s, (last + w - 1) / bk * bk + bk);         /* past the last one */
    }
    if (causal)
      hi = MIN(hi, MIN(s, last / bk * bk + bk));          /* past the last row's block */
    n += (double)rows * (double)(hi - lo); /* rows x visible columns */
  }
  return n;
}

/* The score elements per head kernel k of a flash layer computes over a
 * sequence of s. */
static double flash_kernel_scores(const PsLayer *L, PsFlashKernel k, int64_t s)
{
  return flash_scores(s, L->flash_q[k], L->flash_kv[k], L->causal, L->window);
}

/* The score elements per head that model FLOPs count: those the mask lets
 * a query see at most, PaLM's whole square (causal not halved) narrowed
 * to the window: s min(s, 2w - 1), or s min(s, w) when causal. */
double ps_attention_model_scores(const PsLayer *L, int64_t s)
{
  g_return_val_if_fail(L != NULL, 0);
  if (L->window <= 0)
    return (double)s * (double)s;
  return (double)s * (double)MIN(s, L->causal ? L->window : 2 * L->window - 1);
}

/* Heads against the widths: heads divide dim, kv_heads divide heads, an
 * even head_dim for rope; the message says what would fit. */
static gboolean attention_check(const PsLayer *L, const PsLayerIn *in, int64_t inner,
                                int64_t kv, GError **error)
{
  int64_t h = L->heads;
  const char *what = L->dim > 0 ? "dim" : "d_model";
  if (inner % h != 0) {
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, in->file, in->path,
                   "%s %" G_GINT64_FORMAT " is not divisible by heads %" G_GINT64_FORMAT
                   "; a multiple of heads such as %" G_GINT64_FORMAT " would fit",
                   what, inner, h, MAX(h, inner - inner % h));
    return FALSE;
  }
  if (kv > h || h % kv != 0) {
    int64_t fit = MIN(kv, h);
    while (h % fit != 0)
      fit--;
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, in->file, in->path,
                   "kv_heads %" G_GINT64_FORMAT " does not divide heads %" G_GINT64_FORMAT
                   " (each key/value head serves a whole group of query heads); a divisor "
                   "such as %" G_GINT64_FORMAT " would fit",
                   kv, h, fit);
    return FALSE;
  }
  if (L->rope && (inner / h) % 2 != 0) {
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, in->file, in->path,
                   "rope needs an even head_dim, got %s %" G_GINT64_FORMAT " / heads %"
                   G_GINT64_FORMAT " = %" G_GINT64_FORMAT "; a dim of %" G_GINT64_FORMAT
                   " would fit",
                   what, inner, h, inner / h, 2 * h * ((inner / h + 1) / 2));
    return FALSE;
  }
  return TRUE;
}

/* Flash attention's costs (the matmuls already added): the score and
 * context products over the visible blocks only, 7 of their size backward
 * for 2 forward; the softmax's vector work over the visible scores,
 * again in each of backward's two kernels; no score in HBM: each query
 * block reads the key and value blocks it sees (per query head), backward
 * twice that; kept for backward are Q, K, V, the context and a float32
 * log-sum-exp per row and head, never the probabilities. */
/* What both kinds of attention cost alike, per example: the elements of
 * x (sd), Q and the context (si) and K or V (skv); the bias and rope
 * FLOPs; the projections' FLOPs. */
typedef struct {
  double sd, si, skv, nb, rot, proj;
} AttnTerms;

/* The scores a flash layer's kernels compute a head, over a sequence of
 * s (each kernel's own blocks skipping what the mask hides): forward,
 * dk/dv (or the fused backward), dq; and backward's score-sized products,
 * executed (2 PS_FLASH_*BWD_PRODUCTS of them over the forward's scores
 * when the blocks are the same), which the score and context products
 * (matmuls 1 and 2) take half each. */
typedef struct {
  double seen, dkv, dq, bprod;
} FlashWork;

static FlashWork flash_products(PsLayer *L, int64_t s)
{
  FlashWork f = {.seen = flash_kernel_scores(L, PS_FLASH_FWD, s),
                 .dkv = flash_kernel_scores(L, PS_FLASH_DKV, s),
                 .dq = L->flash_fused_bwd ? 0 : flash_kernel_scores(L, PS_FLASH_DQ, s)};
  f.bprod = L->flash_fused_bwd
                ? 2 * PS_FLASH_FUSED_BWD_PRODUCTS * f.dkv
                : PS_FLASH_DKV_PRODUCTS * f.dkv + (2 * PS_FLASH_BWD_PRODUCTS - PS_FLASH_DKV_PRODUCTS) * f.dq;
  for (int m = 1; m <= 2; m++) {
    L->mm[m].done = f.seen / ((double)s * (double)s);
    L->mm[m].bwd = f.bprod / (2 * f.seen);
  }
  return f;
}

/* The score and context products' FLOPs and the softmax's, forward and
 * backward (each backward kernel runs the softmax again over its scores),
 * with query and key heads dqk wide and value heads dv. */
static void flash_core_flops(PsLayer *L, const FlashWork *f, int64_t dqk, int64_t dv,
                             double *fwd, double *bwd)
{
  const double h = (double)L->heads, w = (double)(dqk + dv);
  L->core_vec_fwd = (1 + PS_SOFTMAX_FWD) * h * f->seen;
  L->core_vec_bwd = ((1 + PS_SOFTMAX_FWD) * (f->dkv + f->dq) + PS_SOFTMAX_BWD * f->dkv) * h;
  *fwd = 2.0 * h * f->seen * w + L->core_vec_fwd;
  *bwd = h * w * f->bprod + L->core_vec_bwd;
}

static void flash_shape(PsLayer *L, const AttnTerms *t, int64_t s, int64_t dh)
{
  const int64_t h = L->heads, b = MIN(L->flash_q[PS_FLASH_FWD], s);
  const FlashWork f = flash_products(L, s);
  const double seen = f.seen;
  double core_fwd, core_bwd;
  flash_core_flops(L, &f, dh, dh, &core_fwd, &core_bwd);
  L->fwd_flops = t->proj + core_fwd + t->nb + t->rot;
  L->bwd_flops = 2 * t->proj + core_bwd + t->nb + t->rot;
  /* x read, Q K V written, Q read once, the visible key and value blocks
   * read once per query head and block row (kv_reads), context written
   * and read, output written */
  double kv_reads = 2.0 * (double)h * (seen / (double)b) * (double)dh;
  L->fwd_bytes = 2.0 * t->sd + 4.0 * t->si + 2.0 * t->skv + kv_reads + (double)L->params;
  L->core_bytes = t->si + kv_reads + t->si; /* Q in, K and V blocks in, context out */
  L->bwd_bytes = 2 * L->fwd_bytes;
  L->act_elems = (int64_t)(2 * t->si + 2 * t->skv);
  L->stat_elems = h * s;
  L->mask_elems = 0;
}

/* Either kind's output (S, D) and its resolved widths. */
static void attention_out(PsLayer *L, int64_t s, int64_t d, int64_t inner, int64_t kv)
{
  L->out_rank = 2;
  L->out_shape[0] = s;
  L->out_shape[1] = d;
  L->dim = inner;
  L->kv_heads = kv;
}

/* Latent attention (kv_rank > 0), as MaxText's MLA lays DeepSeek's out
 * for training (Dai et al. 2024, DeepSeek-V2, arXiv:2405.04434, section
 * 2.1): the keys' and values' latent (kv_rank wide) and one rotary key
 * (rope_dim, shared by the heads) projected down from x; the latent
 * RMS-normalized and projected up to each head's key (dim / heads wide) and
 * value (v_dim); the queries projected down to their latent (q_rank,
 * normalized) and up to each head's dim / heads + rope_dim, or straight
 * from x without one; each head's query and key the up-projected part and
 * the rotary one; flash attention over them; the heads' values out through
 * the output projection.  Products: 0 the queries (from their latent or
 * x), 1 and 2 the scores and context (flash_products), 3 the output
 * projection, 4 the keys' and values' up, 5 the down projection of the
 * latent and the rotary key, 6 the queries' down (with q_rank). */
static gboolean latent_shape(PsLayer *L, const PsLayerIn *in, GError **error)
{
  const int64_t s = in->shape[0], d = in->shape[1], h = L->heads;
  int64_t inner = L->dim > 0 ? L->dim : d;
  if (!attention_check(L, in, inner, h, error))
    return FALSE;
  const int64_t dn = inner / h, dr = L->rope_dim, dv = L->v_dim > 0 ? L->v_dim : dn;
  const int64_t dqk = dn + dr, ql = L->q_rank, kl = L->kv_rank;
  const int64_t qw = h * dqk, kvw = h * (dn + dv), ow = h * dv;
  const int64_t qin = ql > 0 ? ql : d;
  if (!ps_layer_check_size((double)qin * (double)qw + (double)kl * (double)kvw +
                               (double)d * (double)(kl + dr + ql) + (double)ow * (double)d,
                           "weights", in, error))
    return FALSE;
  attention_out(L, s, d, inner, h);
  L->v_dim = dv;
  /* weights, with the latents' RMSNorm gains */
  L->params = qin * qw + (ql > 0 ? d * ql + ql : 0) + d * (kl + dr) + kl + kl * kvw + ow * d;
  ps_layer_add_matmul(L, s, qin, qw, 1); /* the queries */
  ps_layer_add_matmul(L, s, dqk, s, h);  /* scores Q K^T per head */
  ps_layer_add_matmul(L, s, s, dv, h);   /* context P V per head */
  ps_layer_add_matmul(L, s, ow, d, 1);   /* output projection */
  ps_layer_add_matmul(L, s, kl, kvw, 1); /* keys' and values' up */
  ps_layer_add_matmul(L, s, d, kl + dr, 1); /* their latent and the rotary key, down */
  if (ql > 0)
    ps_layer_add_matmul(L, s, d, ql, 1); /* the queries' latent, down */
  L->mm[1].activations = L->mm[2].activations = TRUE;
  L->saves = PS_SAVES_INPUT;
  const FlashWork f = flash_products(L, s);
  const double proj = ps_layer_weight_matmul_flops(L);
  /* the latents' norms, and rope: 3 FLOPs per rotated element of the
   * queries' rotary parts and the shared key each way */
  const double lat = (double)s * (double)(ql + kl);
  const double rot = L->rope ? 3.0 * (double)s * (double)(h * dr + dr) : 0;
  double core_fwd, core_bwd;
  flash_core_flops(L, &f, dqk, dv, &core_fwd, &core_bwd);
  L->fwd_flops = proj + core_fwd + PS_RMSNORM_FWD * lat + rot;
  L->bwd_flops = 2 * proj + core_bwd + PS_RMSNORM_BWD * lat + rot;
  /* x read by both down projections, the latents (and the rotary key)
   * written and read, Q written and read, K and V written (their visible
   * blocks read once per query head and block row, kv_reads), the context
   * written and read, the output written */
  const double b = (double)MIN(L->flash_q[PS_FLASH_FWD], s);
  const double sd = (double)(s * d), latents = (double)s * (double)(ql + kl + dr);
  const double q = (double)(s * qw), kv = (double)s * (double)(h * (dqk + dv));
  const double ctx = (double)(s * ow);
  const double kv_reads = (double)h * (f.seen / b) * (double)(dqk + dv);
  L->fwd_bytes = 3.0 * sd + 2.0 * latents + 2.0 * q + kv + 2.0 * ctx + kv_reads + (double)L->params;
  L->core_bytes = q + kv_reads + ctx;
  L->bwd_bytes = 2 * L->fwd_bytes;
  /* kept for backward: the latents, Q, K, V and the context */
  L->act_elems = (int64_t)(latents + q + kv + ctx);
  L->stat_elems = h * s;
  L->mask_elems = 0;
  return TRUE;
}

static gboolean attention_shape(PsLayer *L, const PsLayerIn *in, GError **error)
{
  if (in->rank != 2) {
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, in->file, in->path,
                   "attention needs a rank-2 (S, D) input, got %s", in->str);
    return FALSE;
  }
  if (L->kv_rank > 0)
    return latent_shape(L, in, error);
  int64_t s = in->shape[0], d = in->shape[1], h = L->heads;
  int64_t inner = L->dim > 0 ? L->dim : d, kv = L->kv_heads > 0 ? L->kv_heads : h;
  if (!attention_check(L, in, inner, kv, error))
    return FALSE;
  int64_t dh = inner / h, kvw = kv * dh, proj = inner + 2 * kvw;
  if (!ps_layer_check_size((double)(d + inner) * (double)proj, "weights", in, error) ||
      (L->flash_block == 0 &&
       !ps_layer_check_size((double)h * (double)s * (double)s, "score tensor", in, error)))
    return FALSE;
  attention_out(L, s, d, inner, kv);
  L->params = d * proj + inner * d + (L->bias ? proj + d : 0);
  ps_layer_add_matmul(L, s, d, proj, 1);   /* Q, K, V projections */
  ps_layer_add_matmul(L, s, dh, s, h);     /* scores Q K^T per head */
  ps_layer_add_matmul(L, s, s, dh, h);     /* context P V per head */
  ps_layer_add_matmul(L, s, inner, d, 1);  /* output projection */
  L->mm[1].activations = L->mm[2].activations = TRUE;
  L->saves = PS_SAVES_INPUT;
  double mm = ps_layer_matmul_flops(L);
  double sd = (double)(s * d), si = (double)(s * inner), skv = (double)(s * kvw);
  /* rope: 3 FLOPs per rotated element of Q and K each way */
  const AttnTerms t = {.sd = sd, .si = si, .skv = skv,
                       .nb = L->bias ? (double)(s * (proj + d)) : 0,
                       .rot = L->rope ? 3.0 * (si + skv) : 0,
                       .proj = 2.0 * sd * (double)proj + 2.0 * si * (double)d};
  if (L->flash_block > 0) {
    flash_shape(L, &t, s, dh);
    return TRUE;
  }
  double scores = (double)(h * s * s), nb = t.nb, rot = t.rot;
  /* dropout of the probabilities: its work per score and its mask */
  double drop = L->rate > 0 ? 1.0 : 0.0;
  L->fwd_flops = mm + (1 + PS_SOFTMAX_FWD + drop * PS_DROPOUT_FWD) * scores + nb + rot;
  L->bwd_flops = 2 * mm + (1 + PS_SOFTMAX_BWD + drop * PS_DROPOUT_BWD) * scores + nb + rot;
  L->mask_elems = L->rate > 0 ? h * s * s : 0;
  /* x read, Q K V written, Q and K read, V read, context written and
   * read, output written: 2 S D + 4 S dim + 4 S kv_heads head_dim (10 S D
   * without groups); scores written, read and written by the softmax,
   * read by the context product: 4 h S^2 */
  L->fwd_bytes = 2.0 * sd + 4.0 * si + 4.0 * skv + 4.0 * scores + (double)L->params;
  /* Q and K in, the scores through the softmax, V in, the context out */
  L->core_bytes = si + skv + 4.0 * scores + skv + si;
  L->bwd_bytes = 2 * L->fwd_bytes;
  /* backward reads x (saved as the input), q, k, v, the context and the
   * softmax probabilities (with dropout also its mask, mask_elems: the
   * dropped-out probabilities are made again from the two by the kernels
   * that read them); the scores before the softmax are dead once the
   * probabilities are written */
  L->act_elems = 2 * s * inner + 2 * s * kvw + h * s * s;
  return TRUE;
}

static gboolean attention_plan(const NetPlan *p, NetLayer *nl, GError **error)
{
  const PsLayer *l = p->l;
  int64_t d = p->shape[1];
  nl->attn = (PsAttnShape){.batch = 1, .seq = (int)p->shape[0], .dim = (int)d,
                           .heads = (int)l->heads, .causal = l->causal,
                           .window = (int)MIN(l->window, G_MAXINT32),
                           .kv_heads = (int)l->kv_heads, .inner = (int)l->dim,
                           .rope = l->rope, .dropout = (float)l->rate,
                           .flash_block = (int)MIN(l->flash_block, G_MAXINT32)};
  if (l->heads <= 0 || l->heads > G_MAXINT32 || l->dim > G_MAXINT32 ||
      l->kv_heads > G_MAXINT32 || !ps_attention_valid(&nl->attn)) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": attention needs heads > 0 dividing its width, kv_heads "
                "dividing heads and, with rope, an even head_dim (and flash no dropout)",
                p->where, p->lname);
    return FALSE;
  }
  nl->w_len = ps_attention_weights(&nl->attn);
  nl->b_len = l->bias ? ps_attention_biases(&nl->attn) : 0;
  nl->cache_elems = ps_attention_saved(&nl->attn);
  return TRUE;
}

/* The projections Glorot-uniform, D in and the projection width out (D
 * by default). */
static void attention_init(PsNet *net, int i, GRand *rng)
{
  const NetLayer *nl = &net->layers[i];
  int inner = nl->attn.inner > 0 ? nl->attn.inner : nl->attn.dim;
  ps_net_fill_uniform(rng, net->params + nl->w_off, nl->w_len,
                      sqrt(6.0 / ((double)nl->attn.dim + inner)));
}

static size_t attention_workspace(const NetLayer *nl, int max_batch)
{
  PsAttnShape a = nl->attn;
  a.batch = max_batch;
  return ps_attention_workspace(&a);
}

/* The step's shape: its batch, and dropout's key when training. */
static PsAttnShape attention_step(const NetStep *st, PsDropoutKey *key)
{
  PsAttnShape a = st->nl->attn;
  a.batch = st->batch;
  a.key = a.dropout > 0.0f && ps_net_dropout_key(st->net, st->s, st->nl->index, key) ? key
                                                                                      : NULL;
  return a;
}

static void attention_forward(const NetStep *st)
{
  PsDropoutKey key;
  PsAttnShape a = attention_step(st, &key);
  ps_attention_forward(st->net->prec, &a, st->x, st->w, st->b, st->sl->out, st->sl->cache,
                       st->net->workspace);
}

static gboolean attention_backward(const NetStep *st)
{
  PsDropoutKey key;
  PsAttnShape a = attention_step(st, &key);
  ps_attention_backward(st->net->prec, &a, st->x, st->w, st->sl->cache, st->dy, st->dx, st->dw,
                        st->db, st->net->workspace);
  return TRUE;
}

/* Latent attention is timing only. */
static gboolean attention_numeric(const PsLayer *L)
{
  return L->kv_rank == 0;
}

const PsLayerOps ps_layer_attention = {
  .kind = PS_LAYER_ATTENTION,
  .name = "attention",
  .keys = keys_attention,
  .parse = attention_parse,
  .shape = attention_shape,
  .numeric = attention_numeric,
  .ranks = 1u << 2,
  .plan = attention_plan,
  .init = attention_init,
  .workspace = attention_workspace,
  .forward = attention_forward,
  .backward = attention_backward,
  .lower = {.lowering = PS_LOWER_PRODUCER, .tensor = PS_TP_HEADS, .kernel = "matmul"},
};
