/* layer-pool.c: the pooling kinds, maxpool and avgpool (square windows over
 * (H, W, C), stride, "same" or "valid") and global_avgpool ((H, W, C) ->
 * (C), or (S, D) -> (D) over tokens), as entries of the layer table
 * (layer-private.h).
 *
 * Costs: max pool size^2 FLOPs per output forward, 1 backward, keeping its
 * argmax; avg pool size^2 + 1 per output forward, size^2 backward; global
 * average pool 1 per input each way.  Numerics have valid windows only: a
 * "same" pool runs when it adds no padding.
 * Invariant: pools have no parameters. */
#include "model/layer-private.h"

static const char *const keys_pool[] = {"type", "name", "size", "stride", "padding", NULL};

static gboolean pool_parse(PsLayer *L, json_object *obj, const char *file, const char *path,
                           GError **error)
{
  L->bias = FALSE;
  gboolean ok = ps_json_check_keys(obj, file, path, keys_pool, error) &&
                ps_layer_get_dim(obj, file, path, "size", TRUE, &L->pool, error);
  L->stride = L->pool;
  return ok && ps_layer_get_dim(obj, file, path, "stride", FALSE, &L->stride, error) &&
         ps_layer_get_padding(L, obj, file, path, FALSE, error);
}

/* Output shape of a max or average pool; its costs are the caller's. */
static gboolean pool_out(PsLayer *L, const PsLayerIn *in, GError **error)
{
  if (in->rank != 3) {
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, in->file, in->path,
                   "%s needs a rank-3 (H, W, C) input, got %s", ps_layer_kind_name(L->kind),
                   in->str);
    return FALSE;
  }
  int64_t h = in->shape[0], w = in->shape[1], c = in->shape[2];
  if (!L->same_padding && (L->pool > h || L->pool > w)) {
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, in->file, in->path,
                   "pool size %" G_GINT64_FORMAT " is larger than the input %s with \"valid\" "
                   "padding",
                   L->pool, in->str);
    return FALSE;
  }
  L->out_rank = 3;
  L->out_shape[0] = ps_layer_sweep_out(h, L->pool, L->stride, L->same_padding);
  L->out_shape[1] = ps_layer_sweep_out(w, L->pool, L->stride, L->same_padding);
  L->out_shape[2] = c;
  return TRUE;
}

static gboolean maxpool_shape(PsLayer *L, const PsLayerIn *in, GError **error)
{
  if (!pool_out(L, in, error))
    return FALSE;
  int64_t e_out = ps_shape_elems(L->out_shape, L->out_rank);
  double win = (double)(L->pool * L->pool);
  L->fwd_flops = win * (double)e_out;
  L->bwd_flops = (double)e_out;
  L->act_elems = e_out; /* argmax */
  L->fwd_bytes = (double)in->elems + 2.0 * (double)e_out;
  L->bwd_bytes = 2.0 * (double)e_out + (double)in->elems;
  return TRUE;
}

static gboolean avgpool_shape(PsLayer *L, const PsLayerIn *in, GError **error)
{
  if (!pool_out(L, in, error))
    return FALSE;
  int64_t e_out = ps_shape_elems(L->out_shape, L->out_rank);
  double win = (double)(L->pool * L->pool);
  L->fwd_flops = (win + 1) * (double)e_out;
  L->bwd_flops = win * (double)e_out;
  L->act_elems = 0;
  L->fwd_bytes = (double)in->elems + (double)e_out;
  L->bwd_bytes = (double)e_out + (double)in->elems;
  return TRUE;
}

static gboolean pool_numeric(const PsLayer *L)
{
  return !L->same_padding;
}

static gboolean pool_plan(const NetPlan *pl, NetLayer *nl, GError **error)
{
  const PsLayer *l = pl->l;
  const int64_t *shape = pl->shape;
  if (l->pool <= 0 || l->pool > 1024) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": %s needs pool > 0", pl->where, pl->lname, pl->kname);
    return FALSE;
  }
  PsPoolShape *p = &nl->pool;
  *p = (PsPoolShape){.batch = 1, .h = (int)shape[0], .w = (int)shape[1], .c = (int)shape[2],
                     .size = (int)l->pool,
                     .stride = l->stride > 0 ? (int)l->stride : (int)l->pool};
  ps_pool_shape(p);
  if (l->same_padding) {
    /* "same" pooling equals "valid" exactly when it adds no padding:
     * ceil(in / stride) windows that already fit. */
    int need_h = (int)((shape[0] + p->stride - 1) / p->stride);
    int need_w = (int)((shape[1] + p->stride - 1) / p->stride);
    if (need_h != p->out_h || need_w != p->out_w) {
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "%s: layer \"%s\": %s with \"same\" padding over a %dx%d input "
                  "would pad, and the pooling kernels have valid windows only",
                  pl->where, pl->lname, pl->kname, p->h, p->w);
      return FALSE;
    }
  }
  if (p->out_h <= 0 || p->out_w <= 0) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": pool %d is larger than the %dx%d input", pl->where, pl->lname,
                p->size, p->h, p->w);
    return FALSE;
  }
  nl->out_shape[0] = p->out_h;
  nl->out_shape[1] = p->out_w;
  return TRUE;
}

static gboolean maxpool_plan(const NetPlan *pl, NetLayer *nl, GError **error)
{
  nl->argmax = TRUE;
  return pool_plan(pl, nl, error);
}

static void maxpool_forward(const NetStep *st)
{
  PsPoolShape p = st->nl->pool;
  p.batch = st->batch;
  ps_maxpool_forward(&p, st->x, st->sl->out, st->sl->argmax);
}

static gboolean maxpool_backward(const NetStep *st)
{
  PsPoolShape p = st->nl->pool;
  p.batch = st->batch;
  if (st->dx)
    ps_maxpool_backward(&p, st->sl->argmax, st->dy, st->dx);
  return TRUE;
}

static void avgpool_forward(const NetStep *st)
{
  PsPoolShape p = st->nl->pool;
  p.batch = st->batch;
  ps_avgpool_forward(&p, st->x, st->sl->out);
}

static gboolean avgpool_backward(const NetStep *st)
{
  PsPoolShape p = st->nl->pool;
  p.batch = st->batch;
  if (st->dx)
    ps_avgpool_backward(&p, st->dy, st->dx);
  return TRUE;
}

const PsLayerOps ps_layer_maxpool = {
  .kind = PS_LAYER_MAXPOOL,
  .name = "maxpool",
  .keys = keys_pool,
  .parse = pool_parse,
  .shape = maxpool_shape,
  .ranks = 1u << 3,
  .numeric = pool_numeric,
  .plan = maxpool_plan,
  .forward = maxpool_forward,
  .backward = maxpool_backward,
  .lower = {.lowering = PS_LOWER_PRODUCER, .kernel = "maxpool"},
};

const PsLayerOps ps_layer_avgpool = {
  .kind = PS_LAYER_AVGPOOL,
  .name = "avgpool",
  .keys = keys_pool,
  .parse = pool_parse,
  .shape = avgpool_shape,
  .ranks = 1u << 3,
  .numeric = pool_numeric,
  .plan = pool_plan,
  .forward = avgpool_forward,
  .backward = avgpool_backward,
  .lower = {.lowering = PS_LOWER_PRODUCER, .kernel = "avgpool"},
};

/* ---- global_avgpool ----------------------------------------------------- */

/* the mean over pixels (H, W, C) or over tokens (S, D) */
static gboolean global_avgpool_shape(PsLayer *L, const PsLayerIn *in, GError **error)
{
  if (in->rank != 3 && in->rank != 2) {
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, in->file, in->path,
                   "global_avgpool needs a rank-3 (H, W, C) or rank-2 (S, D) input, got %s",
                   in->str);
    return FALSE;
  }
  int64_t c = in->shape[in->rank - 1];
  L->out_rank = 1;
  L->out_shape[0] = c;
  L->fwd_flops = (double)in->elems + (double)c;
  L->bwd_flops = (double)in->elems;
  L->fwd_bytes = (double)in->elems + (double)c;
  L->bwd_bytes = (double)c + (double)in->elems;
  L->act_elems = 0;
  return TRUE;
}

/* (S, D) is pooled as an S x 1 image of D channels */
static gboolean global_avgpool_plan(const NetPlan *pl, NetLayer *nl, GError **error)
{
  int rank = pl->rank;
  nl->pool = (PsPoolShape){.batch = 1, .h = (int)pl->shape[0],
                           .w = rank == 3 ? (int)pl->shape[1] : 1,
                           .c = (int)pl->shape[rank - 1]};
  nl->out_rank = 1;
  nl->out_shape[0] = pl->shape[rank - 1];
  nl->out_shape[1] = nl->out_shape[2] = 0;
  return TRUE;
}

static void global_avgpool_forward(const NetStep *st)
{
  const PsPoolShape *p = &st->nl->pool;
  const size_t hw = (size_t)p->h * p->w;
  const float inv = 1.0f / (float)hw;
  for (int b = 0; b < st->batch; b++) {
    float *out = st->sl->out + (size_t)b * p->c;
    const float *img = st->x + (size_t)b * hw * p->c;
    memset(out, 0, (size_t)p->c * sizeof *out);
    for (size_t q = 0; q < hw; q++)
      for (int ch = 0; ch < p->c; ch++)
        out[ch] += img[q * p->c + ch];
    for (int ch = 0; ch < p->c; ch++)
      out[ch] *= inv;
  }
}

static gboolean global_avgpool_backward(const NetStep *st)
{
  if (!st->dx)
    return TRUE;
  const PsPoolShape *p = &st->nl->pool;
  const size_t hw = (size_t)p->h * p->w;
  const float inv = 1.0f / (float)hw;
  for (int b = 0; b < st->batch; b++) {
    const float *g = st->dy + (size_t)b * p->c;
    float *img = st->dx + (size_t)b * hw * p->c;
    for (size_t q = 0; q < hw; q++)
      for (int ch = 0; ch < p->c; ch++)
        img[q * p->c + ch] = g[ch] * inv;
  }
  return TRUE;
}

const PsLayerOps ps_layer_global_avgpool = {
  .kind = PS_LAYER_GLOBAL_AVGPOOL,
  .name = "global_avgpool",
  .keys = ps_layer_keys_plain,
  .parse = ps_layer_parse_plain,
  .shape = global_avgpool_shape,
  .ranks = (1u << 2) | (1u << 3),
  .plan = global_avgpool_plan,
  .forward = global_avgpool_forward,
  .backward = global_avgpool_backward,
  .lower = {.lowering = PS_LOWER_PRODUCER, .kernel = "global_avgpool"},
};
