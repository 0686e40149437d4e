/* layer-norm.c: the normalization kinds, batchnorm (statistics per
 * channel over the batch), layernorm (statistics per row, over the last
 * dimension) and rmsnorm (a root mean square per row, no centring), as
 * entries of the layer table (layer-private.h).
 *
 * Costs: 8 FLOPs per element forward, 12 backward (statistics, normalize,
 * scale and shift); two passes over x and a write of y forward, two passes
 * over dy and x and a write of dx backward; each keeps its input and a
 * mean and variance (per channel for batchnorm, per row for layernorm).
 * rmsnorm: 4 FLOPs forward (square, sum, scale, gain), 8 backward, the
 * same passes, its input and one figure per row kept.
 * batchnorm's numerics: kernels-optim.c's two phases, with the statistics
 * of the device's own batch.
 * Invariant: the parameters are a gain and a shift per feature (rmsnorm:
 * a gain only). */
#include "model/layer-private.h"

/* Shapes and costs of both kinds but the statistics kept. */
static void norm_shape(PsLayer *L, const PsLayerIn *in)
{
  int64_t c = in->shape[in->rank - 1];
  L->out_rank = in->rank;
  memcpy(L->out_shape, in->shape, sizeof L->out_shape);
  L->params = 2 * c;
  L->fwd_flops = PS_NORM_FWD * (double)in->elems;
  L->bwd_flops = PS_NORM_BWD * (double)in->elems;
  /* forward: two passes over x, write y; backward: two passes over dy
   * and x, write dx; parameters read and (backward) written */
  L->fwd_bytes = 3.0 * (double)in->elems + (double)L->params;
  L->bwd_bytes = 5.0 * (double)in->elems + 2.0 * (double)L->params;
}

static gboolean batchnorm_shape(PsLayer *L, const PsLayerIn *in, GError **error)
{
  norm_shape(L, in);
  L->saves = PS_SAVES_INPUT;
  L->stat_elems = 2 * in->shape[in->rank - 1];
  return TRUE;
}

static gboolean batchnorm_plan(const NetPlan *p, NetLayer *nl, GError **error)
{
  nl->in_dim = (int)p->shape[p->rank - 1]; /* channels */
  nl->groups = (int)(p->elems / nl->in_dim); /* rows per example */
  nl->w_len = (size_t)nl->in_dim;           /* gamma */
  nl->b_len = (size_t)nl->in_dim;           /* beta */
  /* the batch's mean and rstd, then the moments of the last phase one
   * (forward or backward); per channel, whatever the batch */
  nl->cache_elems = 4 * (size_t)nl->in_dim;
  return TRUE;
}

/* Statistics of this device's batch alone (a group of one replica), or
 * with nl->bn_group > 1 the group's moments, which
 * ps_net_batchnorm_moments computed and the caller reduced. */
static gboolean own_moments(const NetStep *st)
{
  return st->nl->bn_group <= 1 || st->net->bn_local;
}

static void batchnorm_forward(const NetStep *st)
{
  const NetLayer *nl = st->nl;
  int rows = st->batch * nl->groups, C = nl->in_dim;
  float *moments = st->sl->cache + 2 * (size_t)C;
  if (own_moments(st))
    ps_batchnorm_moments(st->x, rows, C, 1, moments);
  ps_batchnorm_normalize(st->x, st->w, st->b, moments, st->sl->out, st->sl->cache, rows, C);
}

static gboolean batchnorm_backward(const NetStep *st)
{
  const NetLayer *nl = st->nl;
  int rows = st->batch * nl->groups, C = nl->in_dim;
  float *moments = st->sl->cache + 2 * (size_t)C;
  if (own_moments(st))
    ps_batchnorm_grad_moments(st->x, st->sl->cache, st->dy, rows, C, 1, st->dw, st->db,
                              moments);
  if (st->dx)
    ps_batchnorm_input_grad(st->x, st->w, st->sl->cache, moments, st->dy, st->dx, rows, C);
  return st->dx != NULL;
}

static void layernorm_init(PsNet *net, int i, GRand *rng);

/* Ioffe and Szegedy, "Batch Normalization", ICML 2015: training mode,
 * the statistics of the batch; gains start at one. */
const PsLayerOps ps_layer_batchnorm = {
  .kind = PS_LAYER_BATCHNORM,
  .name = "batchnorm",
  .keys = ps_layer_keys_plain,
  .parse = ps_layer_parse_plain,
  .shape = batchnorm_shape,
  .plan = batchnorm_plan,
  .init = layernorm_init,
  .forward = batchnorm_forward,
  .backward = batchnorm_backward,
  .lower = {.lowering = PS_LOWER_NORM_STATS, .fuses_into_producer = TRUE,
            .kernel = "batchnorm"},
};

static gboolean layernorm_shape(PsLayer *L, const PsLayerIn *in, GError **error)
{
  norm_shape(L, in);
  L->saves = PS_SAVES_INPUT;
  L->stat_elems = 2 * (in->elems / in->shape[in->rank - 1]);
  return TRUE;
}

static gboolean layernorm_plan(const NetPlan *p, NetLayer *nl, GError **error)
{
  nl->in_dim = (int)p->shape[p->rank - 1];
  nl->groups = (int)(p->elems / nl->in_dim);
  nl->w_len = (size_t)nl->in_dim; /* gamma */
  nl->b_len = (size_t)nl->in_dim; /* beta */
  nl->cache_elems = 2 * (size_t)nl->groups;
  return TRUE;
}

/* gains one, shifts zero */
static void layernorm_init(PsNet *net, int i, GRand *rng)
{
  const NetLayer *nl = &net->layers[i];
  float *w = net->params + nl->w_off;
  for (size_t j = 0; j < nl->w_len; j++)
    w[j] = 1.0f;
}

static void layernorm_forward(const NetStep *st)
{
  const NetLayer *nl = st->nl;
  ps_layernorm_forward(st->x, st->w, st->b, st->sl->out, st->sl->cache, st->batch * nl->groups,
                       nl->in_dim);
}

static gboolean layernorm_backward(const NetStep *st)
{
  const NetLayer *nl = st->nl;
  ps_layernorm_backward(st->x, st->w, st->sl->cache, st->dy, st->dx, st->dw, st->db,
                        st->batch * nl->groups, nl->in_dim);
  return TRUE;
}

const PsLayerOps ps_layer_layernorm = {
  .kind = PS_LAYER_LAYERNORM,
  .name = "layernorm",
  .keys = ps_layer_keys_plain,
  .parse = ps_layer_parse_plain,
  .shape = layernorm_shape,
  .plan = layernorm_plan,
  .init = layernorm_init,
  .forward = layernorm_forward,
  .backward = layernorm_backward,
  .lower = {.lowering = PS_LOWER_PRODUCER, .tensor = PS_TP_NORM, .fuses_into_producer = TRUE,
            .kernel = "layernorm"},
};

/* ---- rmsnorm ------------------------------------------------------------ */


static gboolean rmsnorm_shape(PsLayer *L, const PsLayerIn *in, GError **error)
{
  int64_t c = in->shape[in->rank - 1];
  L->out_rank = in->rank;
  memcpy(L->out_shape, in->shape, sizeof L->out_shape);
  L->params = c;
  L->fwd_flops = PS_RMSNORM_FWD * (double)in->elems;
  L->bwd_flops = PS_RMSNORM_BWD * (double)in->elems;
  L->fwd_bytes = 3.0 * (double)in->elems + (double)L->params;
  L->bwd_bytes = 5.0 * (double)in->elems + 2.0 * (double)L->params;
  L->saves = PS_SAVES_INPUT;
  L->stat_elems = in->elems / c;
  return TRUE;
}

static gboolean rmsnorm_plan(const NetPlan *p, NetLayer *nl, GError **error)
{
  nl->in_dim = (int)p->shape[p->rank - 1];
  nl->groups = (int)(p->elems / nl->in_dim);
  nl->w_len = (size_t)nl->in_dim; /* gain */
  nl->cache_elems = (size_t)nl->groups;
  return TRUE;
}

static void rmsnorm_forward(const NetStep *st)
{
  const NetLayer *nl = st->nl;
  ps_rmsnorm_forward(st->x, st->w, st->sl->out, st->sl->cache, st->batch * nl->groups,
                     nl->in_dim);
}

static gboolean rmsnorm_backward(const NetStep *st)
{
  const NetLayer *nl = st->nl;
  ps_rmsnorm_backward(st->x, st->w, st->sl->cache, st->dy, st->dx, st->dw,
                      st->batch * nl->groups, nl->in_dim);
  return TRUE;
}

/* Zhang and Sennrich, "Root Mean Square Layer Normalization", NeurIPS
 * 2019: the gain starts at one, as layernorm's. */
const PsLayerOps ps_layer_rmsnorm = {
  .kind = PS_LAYER_RMSNORM,
  .name = "rmsnorm",
  .keys = ps_layer_keys_plain,
  .parse = ps_layer_parse_plain,
  .shape = rmsnorm_shape,
  .plan = rmsnorm_plan,
  .init = layernorm_init,
  .forward = rmsnorm_forward,
  .backward = rmsnorm_backward,
  .lower = {.lowering = PS_LOWER_PRODUCER, .tensor = PS_TP_NORM, .fuses_into_producer = TRUE,
            .kernel = "rmsnorm"},
};
