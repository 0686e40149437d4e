/* layer-dense.c: the matrix-product kinds, dense (y = x W + b over the last
 * dimension) and conv2d (NHWC, square kernel, stride, "same" or "valid"),
 * as entries of the layer table (layer-private.h).
 *
 * Costs (layers.c's conventions): forward 2 rows k n FLOPs per product,
 * backward twice that, a bias 1 FLOP per output each way; backward traffic
 * twice the forward's; the input kept for backward.
 * Invariant: the shape's parameter count equals the plan's w_len + b_len. */
#include "model/layer-private.h"

/* ---- dense -------------------------------------------------------------- */

static const char *const keys_dense[] = {"type", "name", "units", "bias", NULL};

static gboolean dense_parse(PsLayer *L, json_object *obj, const char *file, const char *path,
                            GError **error)
{
  return ps_json_check_keys(obj, file, path, keys_dense, error) &&
         ps_layer_get_dim(obj, file, path, "units", TRUE, &L->units, error) &&
         ps_json_get_bool(obj, file, path, "bias", FALSE, &L->bias, error);
}

static gboolean dense_shape(PsLayer *L, const PsLayerIn *in, GError **error)
{
  if (in->rank > 2) {
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, in->file, in->path,
                   "dense needs a rank-1 or rank-2 input, got %s; add a flatten first",
                   in->str);
    return FALSE;
  }
  int64_t rows = in->rank == 2 ? in->shape[0] : 1;
  int64_t d = in->shape[in->rank - 1];
  if (!ps_layer_check_size((double)d * (double)L->units, "weight matrix", in, error) ||
      !ps_layer_check_size((double)rows * (double)L->units, "output", in, error))
    return FALSE;
  L->out_rank = in->rank;
  memcpy(L->out_shape, in->shape, sizeof L->out_shape);
  L->out_shape[in->rank - 1] = L->units;
  L->params = d * L->units + (L->bias ? L->units : 0);
  ps_layer_add_matmul(L, rows, d, L->units, 1);
  double mm = ps_layer_matmul_flops(L), nb = L->bias ? (double)(rows * L->units) : 0;
  L->fwd_flops = mm + nb;
  L->bwd_flops = 2 * mm + nb;
  L->fwd_bytes = (double)in->elems + (double)L->params + (double)(rows * L->units);
  L->bwd_bytes = 2 * L->fwd_bytes;
  L->saves = PS_SAVES_INPUT;
  return TRUE;
}

gboolean ps_layer_dense_plan(const NetPlan *p, NetLayer *nl, GError **error)
{
  const PsLayer *l = p->l;
  if (p->rank < 1 || l->units <= 0 || l->units > G_MAXINT32) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": %s needs units > 0 and an input of rank >= 1",
                p->where, p->lname, p->kname);
    return FALSE;
  }
  nl->in_dim = (int)p->shape[p->rank - 1];
  nl->units = (int)l->units;
  nl->groups = (int)(p->elems / nl->in_dim);
  nl->out_shape[p->rank - 1] = l->units;
  nl->w_len = (size_t)nl->in_dim * nl->units;
  nl->b_len = l->bias ? (size_t)nl->units : 0;
  return TRUE;
}

static void dense_init(PsNet *net, int i, GRand *rng)
{
  const NetLayer *nl = &net->layers[i];
  ps_net_init_fan(net, i, rng, nl->in_dim, nl->units);
}

static void dense_forward(const NetStep *st)
{
  const NetLayer *nl = st->nl;
  ps_dense_forward(st->net->prec, st->x, st->w, st->b, st->sl->out, st->batch * nl->groups,
                   nl->in_dim, nl->units);
}

static gboolean dense_backward(const NetStep *st)
{
  const NetLayer *nl = st->nl;
  ps_dense_backward(st->net->prec, st->x, st->w, st->dy, st->dx, st->dw, st->db,
                    st->batch * nl->groups, nl->in_dim, nl->units);
  return TRUE;
}

const PsLayerOps ps_layer_dense = {
  .kind = PS_LAYER_DENSE,
  .name = "dense",
  .keys = keys_dense,
  .parse = dense_parse,
  .shape = dense_shape,
  .plan = ps_layer_dense_plan,
  .init = dense_init,
  .forward = dense_forward,
  .backward = dense_backward,
  .lower = {.lowering = PS_LOWER_PRODUCER, .tensor = PS_TP_MATMUL, .kernel = "matmul"},
};

/* ---- conv2d ------------------------------------------------------------- */

static const char *const keys_conv[] = {"type",    "name", "filters", "kernel", "stride",
                                        "padding", "bias", NULL};

static gboolean conv_parse(PsLayer *L, json_object *obj, const char *file, const char *path,
                           GError **error)
{
  return ps_json_check_keys(obj, file, path, keys_conv, error) &&
         ps_layer_get_dim(obj, file, path, "filters", TRUE, &L->filters, error) &&
         ps_layer_get_dim(obj, file, path, "kernel", TRUE, &L->kernel, error) &&
         ps_layer_get_dim(obj, file, path, "stride", FALSE, &L->stride, error) &&
         ps_layer_get_padding(L, obj, file, path, TRUE, error) &&
         ps_json_get_bool(obj, file, path, "bias", FALSE, &L->bias, error);
}

static gboolean conv_shape(PsLayer *L, const PsLayerIn *in, GError **error)
{
  if (in->rank != 3) {
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, in->file, in->path,
                   "conv2d needs a rank-3 (H, W, C) input, got %s", in->str);
    return FALSE;
  }
  int64_t h = in->shape[0], w = in->shape[1], c = in->shape[2];
  if (!L->same_padding && (L->kernel > h || L->kernel > w)) {
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, in->file, in->path,
                   "kernel %" G_GINT64_FORMAT " is larger than the input %s with \"valid\" "
                   "padding",
                   L->kernel, in->str);
    return FALSE;
  }
  int64_t oh = ps_layer_sweep_out(h, L->kernel, L->stride, L->same_padding);
  int64_t ow = ps_layer_sweep_out(w, L->kernel, L->stride, L->same_padding);
  double kk = (double)L->kernel * (double)L->kernel;
  if (!ps_layer_check_size(kk * (double)c * (double)L->filters, "kernel", in, error) ||
      !ps_layer_check_size(kk * (double)c * (double)(oh * ow), "patch matrix", in, error) ||
      !ps_layer_check_size((double)(oh * ow) * (double)L->filters, "output", in, error))
    return FALSE;
  L->out_rank = 3;
  L->out_shape[0] = oh;
  L->out_shape[1] = ow;
  L->out_shape[2] = L->filters;
  L->params = L->kernel * L->kernel * c * L->filters + (L->bias ? L->filters : 0);
  ps_layer_add_matmul(L, oh * ow, L->kernel * L->kernel * c, L->filters, 1);
  double mm = ps_layer_matmul_flops(L), nb = L->bias ? (double)(oh * ow * L->filters) : 0;
  L->fwd_flops = mm + nb;
  L->bwd_flops = 2 * mm + nb;
  L->fwd_bytes = (double)in->elems + (double)L->params + (double)(oh * ow * L->filters);
  L->bwd_bytes = 2 * L->fwd_bytes;
  L->saves = PS_SAVES_INPUT;
  return TRUE;
}

static gboolean conv_plan(const NetPlan *p, NetLayer *nl, GError **error)
{
  const PsLayer *l = p->l;
  int stride = l->stride > 0 ? (int)l->stride : 1;
  if (l->kernel <= 0 || l->filters <= 0 || l->kernel > 1024 || l->filters > G_MAXINT32) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": conv2d needs kernel > 0 and filters > 0", p->where,
                p->lname);
    return FALSE;
  }
  PsConvShape *c = &nl->conv;
  *c = (PsConvShape){.batch = 1, .h = (int)p->shape[0], .w = (int)p->shape[1],
                     .cin = (int)p->shape[2], .kernel = (int)l->kernel, .stride = stride,
                     .same_padding = l->same_padding, .cout = (int)l->filters};
  ps_conv2d_shape(c);
  if (c->out_h <= 0 || c->out_w <= 0) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": kernel %d is larger than the %dx%d input", p->where,
                p->lname, c->kernel, c->h, c->w);
    return FALSE;
  }
  nl->out_shape[0] = c->out_h;
  nl->out_shape[1] = c->out_w;
  nl->out_shape[2] = c->cout;
  nl->w_len = (size_t)c->kernel * c->kernel * c->cin * c->cout;
  nl->b_len = l->bias ? (size_t)c->cout : 0;
  return TRUE;
}

static void conv_init(PsNet *net, int i, GRand *rng)
{
  const NetLayer *nl = &net->layers[i];
  double area = (double)nl->conv.kernel * nl->conv.kernel;
  ps_net_init_fan(net, i, rng, area * nl->conv.cin, area * nl->conv.cout);
}

static size_t conv_workspace(const NetLayer *nl, int max_batch)
{
  PsConvShape c = nl->conv;
  c.batch = max_batch;
  return ps_conv2d_workspace(&c);
}

static void conv_forward(const NetStep *st)
{
  PsConvShape c = st->nl->conv;
  c.batch = st->batch;
  ps_conv2d_forward(st->net->prec, &c, st->x, st->w, st->b, st->sl->out, st->net->workspace);
}

static gboolean conv_backward(const NetStep *st)
{
  PsConvShape c = st->nl->conv;
  c.batch = st->batch;
  ps_conv2d_backward(st->net->prec, &c, st->x, st->w, st->dy, st->dx, st->dw, st->db,
                     st->net->workspace);
  return TRUE;
}

const PsLayerOps ps_layer_conv2d = {
  .kind = PS_LAYER_CONV2D,
  .name = "conv2d",
  .keys = keys_conv,
  .parse = conv_parse,
  .shape = conv_shape,
  .ranks = 1u << 3,
  .plan = conv_plan,
  .init = conv_init,
  .workspace = conv_workspace,
  .forward = conv_forward,
  .backward = conv_backward,
  .lower = {.lowering = PS_LOWER_PRODUCER, .kernel = "conv", .window_contraction = TRUE},
};
