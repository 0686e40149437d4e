/* net-tensor.c: which elements of a layer's weights each rank of a tensor
 * group owns, and the vocab-parallel loss (see net-tensor.h).
 *
 * Invariant: a split layer's ranges count exactly its parameters / T, so
 * the T ranks tile the block; a layer that does not divide so is an error,
 * never a silently uneven split. */
#include "model/net-tensor.h"

#include "model/layer-private.h"

static void add(GArray *out, size_t off, size_t len)
{
  PsNetRange r = {off, len};
  if (len > 0)
    g_array_append_val(out, r);
}

/* Columns [c0, c0 + n) of each of `rows` rows `width` wide from base. */
static void add_cols(GArray *out, size_t base, size_t rows, size_t width, size_t c0, size_t n)
{
  for (size_t r = 0; r < rows; r++)
    add(out, base + r * width + c0, n);
}

static gboolean split_fails(const PsNet *net, int layer, const char *what, int64_t n, int T,
                            GError **error)
{
  g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
              "the %s's %s (%" G_GINT64_FORMAT ") is not divisible by the tensor group of %d, "
              "which its numerics split",
              ps_layer_ops(net->layers[layer].kind)->name, what, n, T);
  return FALSE;
}

static gboolean attention_ranges(const NetLayer *nl, int layer, int t, int T, GArray *out,
                                 const PsNet *net, GError **error)
{
  const PsAttnShape *a = &nl->attn;
  size_t D = (size_t)a->dim, H = (size_t)a->heads;
  size_t I = a->inner > 0 ? (size_t)a->inner : D, KV = a->kv_heads > 0 ? (size_t)a->kv_heads : H;
  size_t kvw = KV * (I / H), P = I + 2 * kvw;
  if (H % (size_t)T != 0)
    return split_fails(net, layer, "heads", (int64_t)H, T, error);
  if (KV % (size_t)T != 0)
    return split_fails(net, layer, "key/value heads", (int64_t)KV, T, error);
  if (nl->b_len && D % (size_t)T != 0)
    return split_fails(net, layer, "width", (int64_t)D, T, error);
  size_t qi = I / T, kv = kvw / T;
  for (size_t r = 0; r < D; r++) { /* W_qkv: the rank's Q, K and V columns */
    size_t row = nl->w_off + r * P;
    add(out, row + t * qi, qi);
    add(out, row + I + t * kv, kv);
    add(out, row + I + kvw + t * kv, kv);
  }
  add(out, nl->w_off + D * P + t * qi * D, qi * D); /* W_o: the heads' rows */
  if (nl->b_len) {
    add(out, nl->b_off + t * qi, qi);
    add(out, nl->b_off + I + t * kv, kv);
    add(out, nl->b_off + I + kvw + t * kv, kv);
    add(out, nl->b_off + P + t * (D / T), D / T); /* b_o in slices: added once */
  }
  return TRUE;
}

static gboolean dense_ranges(const NetLayer *nl, int layer, PsTensorSplit how, int t, int T,
                             GArray *out, const PsNet *net, GError **error)
{
  size_t in = (size_t)nl->in_dim, u = (size_t)nl->units, Tz = (size_t)T;
  gboolean glu = nl->kind == PS_LAYER_SWIGLU;
  if (u % Tz != 0)
    return split_fails(net, layer, "units", (int64_t)u, T, error);
  if (how == PS_SPLIT_ROWS) {
    if (glu || in % Tz != 0)
      return split_fails(net, layer, "input width", (int64_t)in, T, error);
    add(out, nl->w_off + t * (in / Tz) * u, (in / Tz) * u);
    if (nl->b_len)
      add(out, nl->b_off + t * (u / Tz), u / Tz);
    return TRUE;
  }
  int blocks = glu ? 2 : 1; /* swiglu: [W_g, W_u], [b_g, b_u] */
  for (int k = 0; k < blocks; k++)
    add_cols(out, nl->w_off + k * in * u, in, u, t * (u / Tz), u / Tz);
  for (int k = 0; k < blocks && nl->b_len; k++)
    add(out, nl->b_off + k * u + t * (u / Tz), u / Tz);
  return TRUE;
}

static gboolean embedding_ranges(const NetLayer *nl, int layer, int t, int T, GArray *out,
                                 const PsNet *net, GError **error)
{
  size_t V = (size_t)nl->groups, d = (size_t)nl->units, S = (size_t)nl->in_dim;
  if (V % (size_t)T != 0)
    return split_fails(net, layer, "vocabulary", (int64_t)V, T, error);
  if (nl->positions && d % (size_t)T != 0)
    return split_fails(net, layer, "width", (int64_t)d, T, error);
  add(out, nl->w_off + t * (V / T) * d, (V / T) * d);
  if (nl->positions) /* positions in column slices: each rank adds its own */
    add_cols(out, nl->w_off + V * d, S, d, t * (d / T), d / T);
  return TRUE;
}

gboolean ps_net_tensor_ranges(const PsNet *net, int layer, PsTensorSplit how, int t, int T,
                              GArray *out, GError **error)
{
  g_return_val_if_fail(net && layer >= 0 && layer < net->n_layers && out, FALSE);
  g_return_val_if_fail(T >= 1 && t >= 0 && t < T, FALSE);
  const NetLayer *nl = &net->layers[layer];
  size_t n = nl->w_len + nl->b_len;
  if (n == 0)
    return TRUE;
  if (how == PS_SPLIT_NONE || how == PS_SPLIT_SEQUENCE || T == 1) {
    add(out, nl->w_off, n);
    return TRUE;
  }
  if (nl->kind == PS_LAYER_ATTENTION && how == PS_SPLIT_HEADS)
    return attention_ranges(nl, layer, t, T, out, net, error);
  if ((nl->kind == PS_LAYER_DENSE || nl->kind == PS_LAYER_SWIGLU) &&
      (how == PS_SPLIT_COLS || how == PS_SPLIT_ROWS))
    return dense_ranges(nl, layer, how, t, T, out, net, error);
  if (nl->kind == PS_LAYER_EMBEDDING && how == PS_SPLIT_VOCAB)
    return embedding_ranges(nl, layer, t, T, out, net, error);
  g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
              "a %s layer has no numerics split over a tensor group",
              ps_layer_ops(nl->kind)->name);
  return FALSE;
}

/* ---- vocab-parallel softmax cross-entropy -------------------------------- */

int ps_net_loss_rows(const PsNet *net)
{
  g_return_val_if_fail(net != NULL, 0);
  return net->cur->batch * net->labels_per;
}

static const float *loss_logits(PsNet *net)
{
  const NetLayer *nl = &net->layers[net->n_layers - 1];
  g_assert(nl->kind == PS_LAYER_SOFTMAX_XENT);
  return ps_net_slot_output(net->cur, nl->input_from);
}

void ps_net_vocab_loss_shift(PsNet *net, int lo, int hi, int T, float *shift)
{
  g_return_if_fail(net && shift && lo >= 0 && lo < hi && hi <= net->classes && T >= 1);
  const float *z = loss_logits(net);
  int rows = ps_net_loss_rows(net), V = net->classes;
  for (int r = 0; r < rows; r++) {
    const float *zr = z + (size_t)r * V;
    float m = zr[lo];
    for (int v = lo + 1; v < hi; v++)
      m = fmaxf(m, zr[v]);
    shift[r] = m / (float)T;
  }
}

void ps_net_vocab_loss_sums(PsNet *net, int lo, int hi, const float *shift, float *sums)
{
  g_return_if_fail(net && shift && sums && lo >= 0 && lo < hi && hi <= net->classes);
  const float *z = loss_logits(net);
  int rows = ps_net_loss_rows(net), V = net->classes;
  for (int r = 0; r < rows; r++) {
    const float *zr = z + (size_t)r * V;
    double s = 0.0;
    for (int v = lo; v < hi; v++)
      s += exp((double)zr[v] - shift[r]);
    sums[r] = (float)s;
  }
}

void ps_net_vocab_loss_finish(PsNet *net, int lo, int hi, int T, const float *shift,
                              const float *sums)
{
  g_return_if_fail(net && shift && sums && lo >= 0 && lo < hi && hi <= net->classes);
  const float *z = loss_logits(net);
  float *p = net->cur->layers[net->n_layers - 1].out;
  int rows = ps_net_loss_rows(net), V = net->classes;
  double loss = 0;
  for (int r = 0; r < rows; r++) {
    const float *zr = z + (size_t)r * V;
    float *pr = p + (size_t)r * V;
    int32_t y = net->cur->labels[r];
    for (int v = 0; v < V; v++)
      pr[v] = v == y ? 1.0f : 0.0f;
    for (int v = lo; v < hi; v++)
      pr[v] = (float)(exp((double)zr[v] - shift[r]) / sums[r]);
    loss += (double)shift[r] + log((double)sums[r]);
    if (y >= lo && y < hi)
      loss -= (double)T * zr[y];
  }
  net->cur->loss_sum = loss;
  net->cur->correct = 0;
}
