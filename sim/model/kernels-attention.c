/* kernels-attention.c: the self-attention kernels (kernels.h): multi-head
 * attention with grouped key/value heads, an inner projection width of its
 * own and, optionally, rotary position embedding on queries and keys.
 *
 * Invariant: with kv_heads = heads, inner = dim, no rope and no dropout
 * (a rate of 0, or no key), every operation and its order are those of
 * plain multi-head attention (the weights, the saved tensors and the
 * results are bit for bit the same);
 * like every kernel, a pure single-threaded function of its inputs. */
#include "kernels.h"

#include <math.h>
#include <string.h>

/* Su et al., "RoFormer: Enhanced Transformer with Rotary Position
 * Embedding", 2021, arXiv:2104.09864, eq. 15: pair p of a head is turned
 * by position * base^(-2p / head_dim), base 10000. */
#define PS_ROPE_BASE 10000.0

typedef struct {
  int S, D, H, KV, I, dh, kvw, P, blocks, group;
} AttnDims;

static AttnDims attn_dims(const PsAttnShape *s)
{
  AttnDims d = {.S = s->seq, .D = s->dim, .H = s->heads};
  d.KV = s->kv_heads > 0 ? s->kv_heads : s->heads;
  d.I = s->inner > 0 ? s->inner : s->dim;
  d.dh = d.I / d.H;
  d.kvw = d.KV * d.dh;
  d.P = d.I + 2 * d.kvw;      /* the Q K V projection's width */
  d.blocks = d.H + 2 * d.KV;  /* head blocks of Q, K and V */
  d.group = d.H / d.KV;       /* query heads per key/value head */
  return d;
}

gboolean ps_attention_valid(const PsAttnShape *s)
{
  if (s == NULL || s->heads <= 0 || s->seq <= 0 || s->dim <= 0 || s->kv_heads < 0 ||
      s->inner < 0)
    return FALSE;
  AttnDims d = attn_dims(s);
  return d.I % d.H == 0 && d.H % d.KV == 0 && (!s->rope || d.dh % 2 == 0);
}

size_t ps_attention_weights(const PsAttnShape *s)
{
  g_return_val_if_fail(ps_attention_valid(s), 0);
  AttnDims d = attn_dims(s);
  return (size_t)d.D * d.P + (size_t)d.I * d.D;
}

size_t ps_attention_biases(const PsAttnShape *s)
{
  g_return_val_if_fail(ps_attention_valid(s), 0);
  AttnDims d = attn_dims(s);
  return (size_t)d.P + (size_t)d.D;
}

/* Saved: Q, K, V of every example in head blocks (example, block: seq x
 * dh; the H query heads, then the KV key heads, then the KV value heads),
 * then the context rows (batch seq x inner), then the probabilities
 * (example, head: seq x seq). */
size_t ps_attention_saved(const PsAttnShape *s)
{
  g_return_val_if_fail(ps_attention_valid(s), 0);
  AttnDims d = attn_dims(s);
  return (size_t)s->batch * ((size_t)d.S * (d.P + d.I) + (size_t)d.H * d.S * d.S);
}

/* Forward: the Q K V rows and one head's context.  Backward: the context
 * gradient rows (later the Q K V gradient rows), the head-block Q K V
 * gradients, one head's context gradient and one score matrix.  With
 * dropout, one more score matrix: a head's dropped-out probabilities. */
size_t ps_attention_workspace(const PsAttnShape *s)
{
  g_return_val_if_fail(ps_attention_valid(s), 0);
  AttnDims d = attn_dims(s);
  size_t rows = (size_t)s->batch * d.S;
  size_t ss = (size_t)d.S * d.S;
  return 2 * rows * d.P + (size_t)d.S * d.dh + ss + (s->dropout > 0.0f ? ss : 0);
}

/* The probabilities of example e, head h dropped out into `out` (the
 * product with V reads them), or p itself without dropout. */
static const float *probs_dropped(const PsAttnShape *s, int e, int h, const float *p,
                                  float *out)
{
  if (s->dropout <= 0.0f || !s->key)
    return p;
  const size_t S = (size_t)s->seq;
  ps_dropout_row(s->key, s->dropout, e, (size_t)h * S * S, p, out, S * S);
  return out;
}

/* Rows (batch seq, blocks dh) <-> head blocks (example, block: seq x dh):
 * copies src, rows when from_rows and blocks otherwise, into dst, the
 * other layout. */
static void copy_heads(const float *src, float *dst, int batch, int seq, int blocks, int dh,
                       gboolean from_rows)
{
  const size_t width = (size_t)blocks * dh;
  for (int b = 0; b < batch; b++)
    for (int i = 0; i < seq; i++)
      for (int k = 0; k < blocks; k++) {
        size_t row = ((size_t)b * seq + i) * width + (size_t)k * dh;
        size_t head = (((size_t)b * blocks + k) * seq + i) * dh;
        memcpy(dst + (from_rows ? head : row), src + (from_rows ? row : head),
               (size_t)dh * sizeof *src);
      }
}

/* Turns the first `n` head blocks (the queries and keys) of every example
 * by their positions' angles, backwards (the transpose, for gradients)
 * when sign is -1. */
static void rope_rotate(float *qkvh, int batch, const AttnDims *d, int n, float sign)
{
  for (int i = 0; i < d->S; i++)
    for (int p = 0; p < d->dh / 2; p++) {
      double angle = (double)i * pow(PS_ROPE_BASE, -2.0 * p / d->dh);
      const float c = (float)cos(angle), sn = sign * (float)sin(angle);
      for (int e = 0; e < batch; e++)
        for (int k = 0; k < n; k++) {
          float *r = qkvh + (((size_t)e * d->blocks + k) * d->S + i) * d->dh + 2 * p;
          const float x0 = r[0], x1 = r[1];
          r[0] = x0 * c - x1 * sn;
          r[1] = x0 * sn + x1 * c;
        }
    }
}

/* Row-wise softmax of scale * scores in place (max subtracted first); a
 * causal row i keeps columns j <= i and zeroes the rest. */
static void attention_softmax(float *p, int seq, float scale, gboolean causal)
{
  for (int i = 0; i < seq; i++) {
    float *row = p + (size_t)i * seq;
    int n = causal ? i + 1 : seq;
    float mx = row[0] * scale;
    for (int j = 1; j < n; j++)
      mx = fmaxf(mx, row[j] * scale);
    float sum = 0.0f;
    for (int j = 0; j < n; j++) {
      row[j] = expf(row[j] * scale - mx);
      sum += row[j];
    }
    const float inv = 1.0f / sum;
    for (int j = 0; j < n; j++)
      row[j] *= inv;
    for (int j = n; j < seq; j++)
      row[j] = 0.0f;
  }
}

/* The block offsets of query head h of example e and of its key/value
 * head (Ainslie et al. 2023: query heads g*group .. (g+1)*group - 1 share
 * key/value head g). */
static void head_blocks(const AttnDims *d, int e, int h, size_t *qo, size_t *ko, size_t *vo)
{
  const size_t blk = (size_t)d->S * d->dh, base = (size_t)e * d->blocks;
  const int g = h / d->group;
  *qo = (base + h) * blk;
  *ko = (base + d->H + g) * blk;
  *vo = (base + d->H + d->KV + g) * blk;
}

void ps_attention_forward(PsPrecision prec, const PsAttnShape *s, const float *x,
                          const float *w, const float *b, float *y, float *saved,
                          float *workspace)
{
  g_return_if_fail(ps_attention_valid(s));
  g_return_if_fail(x && w && y && saved && workspace);
  const AttnDims d = attn_dims(s);
  const int S = d.S, dh = d.dh;
  const size_t rows = (size_t)s->batch * S;
  const float scale = 1.0f / sqrtf((float)dh);
  float *qkvh = saved, *ctx = saved + rows * d.P, *probs = ctx + rows * d.I;
  float *qkv = workspace, *head_ctx = workspace + rows * d.P;
  float *dropped = head_ctx + (size_t)S * dh + (size_t)S * S;

  ps_dense_forward(prec, x, w, b, qkv, (int)rows, d.D, d.P);
  copy_heads(qkv, qkvh, s->batch, S, d.blocks, dh, TRUE);
  if (s->rope)
    rope_rotate(qkvh, s->batch, &d, d.H + d.KV, 1.0f);
  for (int e = 0; e < s->batch; e++) {
    for (int h = 0; h < d.H; h++) {
      size_t qo, ko, vo;
      head_blocks(&d, e, h, &qo, &ko, &vo);
      float *p = probs + ((size_t)e * d.H + h) * S * S;
      ps_gemm(prec, FALSE, TRUE, S, S, dh, qkvh + qo, qkvh + ko, FALSE, p);
      attention_softmax(p, S, scale, s->causal);
      ps_gemm(prec, FALSE, FALSE, S, dh, S, probs_dropped(s, e, h, p, dropped), qkvh + vo,
              FALSE, head_ctx);
      for (int i = 0; i < S; i++)
        memcpy(ctx + ((size_t)e * S + i) * d.I + (size_t)h * dh, head_ctx + (size_t)i * dh,
               (size_t)dh * sizeof *ctx);
    }
  }
  ps_dense_forward(prec, ctx, w + (size_t)d.D * d.P, b ? b + d.P : NULL, y, (int)rows, d.I,
                   d.D);
}

/* dS = scale P o (dP - rowsum(dP o P)) in place of dP, row by row. */
static void softmax_backward(const float *p, float *dp, int S, float scale)
{
  for (int i = 0; i < S; i++) {
    const float *pr = p + (size_t)i * S;
    float *dr = dp + (size_t)i * S;
    float dot = 0.0f;
    for (int j = 0; j < S; j++)
      dot += pr[j] * dr[j];
    for (int j = 0; j < S; j++)
      dr[j] = scale * pr[j] * (dr[j] - dot);
  }
}

/* Per head, with C = P' V, P' = P or its dropout, P = softmax(scale Q
 * K^T): dP' = dC V^T, dV = P'^T dC, dP = dP' through the same mask, dS
 * as softmax_backward says, dQ = dS K,
 * dK = dS^T Q; a key/value head sums the gradients of the query heads
 * that share it; rope's rotation is undone on dQ and dK; then the
 * projections as dense layers. */
void ps_attention_backward(PsPrecision prec, const PsAttnShape *s, const float *x,
                           const float *w, const float *saved, const float *dy, float *dx,
                           float *dw, float *db, float *workspace)
{
  g_return_if_fail(ps_attention_valid(s));
  g_return_if_fail(x && w && saved && dy && dw && workspace);
  const AttnDims d = attn_dims(s);
  const int S = d.S, dh = d.dh;
  const size_t rows = (size_t)s->batch * S;
  const float scale = 1.0f / sqrtf((float)dh);
  const float *qkvh = saved, *ctx = saved + rows * d.P, *probs = ctx + rows * d.I;
  float *dctx = workspace, *dqkv = workspace; /* the second once the first is used up */
  float *dqkvh = workspace + rows * d.P;
  float *head_dctx = dqkvh + rows * d.P, *dp = head_dctx + (size_t)S * dh;
  float *dropped = dp + (size_t)S * S;

  ps_dense_backward(prec, ctx, w + (size_t)d.D * d.P, dy, dctx, dw + (size_t)d.D * d.P,
                    db ? db + d.P : NULL, (int)rows, d.I, d.D);
  for (int e = 0; e < s->batch; e++) {
    for (int h = 0; h < d.H; h++) {
      size_t qo, ko, vo;
      head_blocks(&d, e, h, &qo, &ko, &vo);
      const gboolean shared = h % d.group != 0; /* not the group's first head: add */
      const float *p = probs + ((size_t)e * d.H + h) * S * S;
      for (int i = 0; i < S; i++)
        memcpy(head_dctx + (size_t)i * dh, dctx + ((size_t)e * S + i) * d.I + (size_t)h * dh,
               (size_t)dh * sizeof *dctx);
      ps_gemm(prec, FALSE, TRUE, S, S, dh, head_dctx, qkvh + vo, FALSE, dp);
      ps_gemm(prec, TRUE, FALSE, S, dh, S, probs_dropped(s, e, h, p, dropped), head_dctx,
              shared, dqkvh + vo);
      if (s->dropout > 0.0f && s->key)
        ps_dropout_row(s->key, s->dropout, e, (size_t)h * S * S, dp, dp, (size_t)S * S);
      softmax_backward(p, dp, S, scale);
      ps_gemm(prec, FALSE, FALSE, S, dh, S, dp, qkvh + ko, FALSE, dqkvh + qo);
      ps_gemm(prec, TRUE, FALSE, S, dh, S, dp, qkvh + qo, shared, dqkvh + ko);
    }
  }
  if (s->rope)
    rope_rotate(dqkvh, s->batch, &d, d.H + d.KV, -1.0f);
  copy_heads(dqkvh, dqkv, s->batch, S, d.blocks, dh, FALSE);
  ps_dense_backward(prec, x, w, dqkv, dx, dw, db, (int)rows, d.D, d.P);
}
