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
  if (s->flash_block < 0 || (s->flash_block > 0 && s->dropout > 0.0f) || s->window < 0)
    return FALSE;
  AttnDims d = attn_dims(s);
  return d.I % d.H == 0 && d.H % d.KV == 0 && (!s->rope || d.dh % 2 == 0);
}

/* The flash block: flash_block, at most the sequence. */
static int flash_rows(const PsAttnShape *s)
{
  return MIN(s->flash_block, s->seq);
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
 * (example, head: seq x seq) or, with a flash block, each row's log-sum-exp
 * (example, head: seq). */
size_t ps_attention_saved(const PsAttnShape *s)
{
  g_return_val_if_fail(ps_attention_valid(s), 0);
  AttnDims d = attn_dims(s);
  size_t per_head = s->flash_block > 0 ? (size_t)d.S : (size_t)d.S * d.S;
  return (size_t)s->batch * ((size_t)d.S * (d.P + d.I) + (size_t)d.H * per_head);
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
  if (s->flash_block > 0) {
    /* a block's scores (then probabilities) and their gradient, a block
     * of output rows, and three numbers per row (maximum, sum, rowsum of
     * dO o O) */
    size_t B = (size_t)flash_rows(s);
    return 2 * rows * d.P + (size_t)d.S * d.dh + 2 * B * B + B * d.dh + 3 * B;
  }
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

/* The columns [*lo, *hi) row i of shape s sees: j <= i when causal, and
 * |i - j| < window when it has one (MaxText's sliding window). */
static void visible_span(const PsAttnShape *s, int seq, int i, int *lo, int *hi)
{
  *lo = s->window > 0 ? MAX(0, i - s->window + 1) : 0;
  *hi = s->causal ? i + 1 : s->window > 0 ? MIN(seq, i + s->window) : seq;
}

/* Row-wise softmax of scale * scores in place (max subtracted first); row
 * i keeps the columns it sees (visible_span) and zeroes the rest. */
static void attention_softmax(const PsAttnShape *s, float *p, int seq, float scale)
{
  for (int i = 0; i < seq; i++) {
    float *row = p + (size_t)i * seq;
    int lo, hi;
    visible_span(s, seq, i, &lo, &hi);
    float mx = row[lo] * scale;
    for (int j = lo + 1; j < hi; j++)
      mx = fmaxf(mx, row[j] * scale);
    float sum = 0.0f;
    for (int j = lo; j < hi; j++) {
      row[j] = expf(row[j] * scale - mx);
      sum += row[j];
    }
    const float inv = 1.0f / sum;
    for (int j = lo; j < hi; j++)
      row[j] *= inv;
    for (int j = 0; j < lo; j++)
      row[j] = 0.0f;
    for (int j = hi; j < seq; j++)
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

/* ---- flash attention (ps_attention_* with flash_block > 0) ------------- */

/* Query block [i0, i0 + bq) against key block [j0, j0 + bk): hidden when
 * no row of it sees a column of it: a causal head's block wholly above
 * the diagonal, a windowed head's wholly W or more away from every row. */
static gboolean block_hidden(const PsAttnShape *s, int i0, int bq, int j0, int bk)
{
  if (s->causal && j0 > i0 + bq - 1)
    return TRUE;
  return s->window > 0 && (j0 + bk - 1 <= i0 - s->window || j0 >= i0 + bq - 1 + s->window);
}

static gboolean visible(const PsAttnShape *s, int i, int j)
{
  return (!s->causal || j <= i) && (s->window <= 0 || (i - j < s->window && j - i < s->window));
}

/* One query head: o (S x dh) = softmax(scale q k^T) v block by block with
 * a running maximum m and sum l per row; lse[i] = m + log l.  `ws`: the
 * block's scores (B x B), its output rows (B x dh), m and l (B each). */
static void flash_head_forward(PsPrecision prec, const PsAttnShape *s, const AttnDims *d,
                               const float *q, const float *k, const float *v, float *o,
                               float *lse, float *ws)
{
  const int S = d->S, dh = d->dh, B = flash_rows(s);
  const float scale = 1.0f / sqrtf((float)dh);
  float *sc = ws, *acc = sc + (size_t)B * B, *m = acc + (size_t)B * dh, *l = m + B;
  for (int i0 = 0; i0 < S; i0 += B) {
    const int bq = MIN(B, S - i0);
    for (int r = 0; r < bq; r++) {
      m[r] = -INFINITY;
      l[r] = 0.0f;
    }
    memset(acc, 0, (size_t)bq * dh * sizeof *acc);
    for (int j0 = 0; j0 < S; j0 += B) {
      const int bk = MIN(B, S - j0);
      if (block_hidden(s, i0, bq, j0, bk))
        continue;
      ps_gemm(prec, FALSE, TRUE, bq, bk, dh, q + (size_t)i0 * dh, k + (size_t)j0 * dh, FALSE,
              sc);
      for (int r = 0; r < bq; r++) {
        float *row = sc + (size_t)r * bk, mx = m[r], sum = 0.0f;
        for (int c = 0; c < bk; c++)
          if (visible(s, i0 + r, j0 + c))
            mx = fmaxf(mx, row[c] * scale);
        if (mx == -INFINITY) { /* a window's row that sees none of this block yet */
          memset(row, 0, (size_t)bk * sizeof *row);
          continue;
        }
        const float alpha = expf(m[r] - mx); /* 0 on the first block */
        for (int c = 0; c < bk; c++) {
          row[c] = visible(s, i0 + r, j0 + c) ? expf(row[c] * scale - mx) : 0.0f;
          sum += row[c];
        }
        l[r] = l[r] * alpha + sum;
        m[r] = mx;
        for (int t = 0; t < dh; t++)
          acc[(size_t)r * dh + t] *= alpha;
      }
      ps_gemm(prec, FALSE, FALSE, bq, dh, bk, sc, v + (size_t)j0 * dh, TRUE, acc);
    }
    for (int r = 0; r < bq; r++) {
      const float inv = 1.0f / l[r];
      for (int t = 0; t < dh; t++)
        o[(size_t)(i0 + r) * dh + t] = acc[(size_t)r * dh + t] * inv;
      lse[i0 + r] = m[r] + logf(l[r]);
    }
  }
}

/* What one head's flash backward reads: its q, k, v head blocks, its
 * output rows (every ld floats) and their gradient (S x dh), and its
 * log-sum-exps. */
typedef struct {
  const float *q, *k, *v, *o;
  int ld;
  const float *dout, *lse;
} FlashIn;

/* Per visible block: P = exp(scale q k^T - lse) again, dV += P^T dO,
 * dP = dO v^T, dS = scale P o (dP - D) with D = rowsum(dO o O) (Dao et
 * al. 2022, algorithm 2), dQ += dS k, dK += dS^T q; dq, dk and dv are
 * added to.  `ws`: P and dP (B x B each), D (B). */
static void flash_head_backward(PsPrecision prec, const PsAttnShape *s, const AttnDims *d,
                                const FlashIn *in, float *dq, float *dk, float *dv, float *ws)
{
  const int S = d->S, dh = d->dh, B = flash_rows(s);
  const float scale = 1.0f / sqrtf((float)dh);
  float *p = ws, *dp = p + (size_t)B * B, *D = dp + (size_t)B * B;
  for (int i0 = 0; i0 < S; i0 += B) {
    const int bq = MIN(B, S - i0);
    for (int r = 0; r < bq; r++) {
      float sum = 0.0f;
      for (int t = 0; t < dh; t++)
        sum += in->dout[(size_t)(i0 + r) * dh + t] * in->o[(size_t)(i0 + r) * in->ld + t];
      D[r] = sum;
    }
    for (int j0 = 0; j0 < S; j0 += B) {
      const int bk = MIN(B, S - j0);
      if (block_hidden(s, i0, bq, j0, bk))
        continue;
      const float *qb = in->q + (size_t)i0 * dh, *kb = in->k + (size_t)j0 * dh;
      const float *dob = in->dout + (size_t)i0 * dh;
      ps_gemm(prec, FALSE, TRUE, bq, bk, dh, qb, kb, FALSE, p);
      for (int r = 0; r < bq; r++)
        for (int c = 0; c < bk; c++) {
          float *x = p + (size_t)r * bk + c;
          *x = visible(s, i0 + r, j0 + c) ? expf(*x * scale - in->lse[i0 + r]) : 0.0f;
        }
      ps_gemm(prec, TRUE, FALSE, bk, dh, bq, p, dob, TRUE, dv + (size_t)j0 * dh);
      ps_gemm(prec, FALSE, TRUE, bq, bk, dh, dob, in->v + (size_t)j0 * dh, FALSE, dp);
      for (int r = 0; r < bq; r++)
        for (int c = 0; c < bk; c++) {
          const size_t x = (size_t)r * bk + c;
          dp[x] = scale * p[x] * (dp[x] - D[r]);
        }
      ps_gemm(prec, FALSE, FALSE, bq, dh, bk, dp, kb, TRUE, dq + (size_t)i0 * dh);
      ps_gemm(prec, TRUE, FALSE, bk, dh, bq, dp, qb, TRUE, dk + (size_t)j0 * dh);
    }
  }
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
      if (s->flash_block > 0) {
        flash_head_forward(prec, s, &d, qkvh + qo, qkvh + ko, qkvh + vo, head_ctx,
                           probs + ((size_t)e * d.H + h) * S, head_ctx + (size_t)S * dh);
      } else {
        float *p = probs + ((size_t)e * d.H + h) * S * S;
        ps_gemm(prec, FALSE, TRUE, S, S, dh, qkvh + qo, qkvh + ko, FALSE, p);
        attention_softmax(s, p, S, scale);
        ps_gemm(prec, FALSE, FALSE, S, dh, S, probs_dropped(s, e, h, p, dropped),
                qkvh + vo, FALSE, head_ctx);
      }
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
  if (s->flash_block > 0) /* the blocks add into every head's gradients */
    memset(dqkvh, 0, rows * d.P * sizeof *dqkvh);
  for (int e = 0; e < s->batch; e++) {
    for (int h = 0; h < d.H; h++) {
      size_t qo, ko, vo;
      head_blocks(&d, e, h, &qo, &ko, &vo);
      const gboolean shared = h % d.group != 0; /* not the group's first head: add */
      for (int i = 0; i < S; i++)
        memcpy(head_dctx + (size_t)i * dh, dctx + ((size_t)e * S + i) * d.I + (size_t)h * dh,
               (size_t)dh * sizeof *dctx);
      if (s->flash_block > 0) {
        const float *o = ctx + (size_t)e * S * d.I + (size_t)h * dh;
        const FlashIn in = {qkvh + qo, qkvh + ko, qkvh + vo, o, d.I, head_dctx,
                            probs + ((size_t)e * d.H + h) * S};
        flash_head_backward(prec, s, &d, &in, dqkvh + qo, dqkvh + ko, dqkvh + vo, dp);
        continue;
      }
      const float *p = probs + ((size_t)e * d.H + h) * S * S;
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
