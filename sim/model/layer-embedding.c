/* layer-embedding.c: the kinds that turn an input into a sequence of
 * vectors, embedding (token ids (S) -> (S, D), plus learned positions) and
 * patch_embedding ((H, W, C) image -> (S, D), one token per PxP patch), as
 * entries of the layer table (layer-private.h).  An embedding's numerics
 * read the token ids from the net's float input.
 * Invariant: a position table, when there is one, is part of the layer's
 * parameters (patch_embedding: stored after the projection). */
#include "model/layer-private.h"

/* ---- embedding ---------------------------------------------------------- */

static const char *const keys_embedding[] = {"type", "name", "vocab", "dim", "positions",
                                             "lookup", NULL};

/* How the rows are looked up: gathered (XLA's gather, and a scatter-add of
 * the rows' gradients backward), or as MaxText's use_iota_embed does it,
 * a one-hot matrix (ids == iota) times the table on the MXU. */
static const char *const lookup_choices[] = {"gather", "matmul", NULL};

static gboolean embedding_parse(PsLayer *L, json_object *obj, const char *file,
                                const char *path, GError **error)
{
  L->bias = FALSE;
  L->positions = TRUE;
  int lookup = 0;
  gboolean ok = ps_json_check_keys(obj, file, path, keys_embedding, error) &&
                ps_layer_get_dim(obj, file, path, "vocab", TRUE, &L->vocab, error) &&
                ps_layer_get_dim(obj, file, path, "dim", TRUE, &L->dim, error) &&
                ps_json_get_bool(obj, file, path, "positions", FALSE, &L->positions, error) &&
                ps_json_get_enum(obj, file, path, "lookup", FALSE, lookup_choices, &lookup, error);
  L->lookup_matmul = lookup == 1;
  return ok;
}

static gboolean embedding_shape(PsLayer *L, const PsLayerIn *in, GError **error)
{
  if (!in->tokens || in->rank != 1) {
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, in->file, in->path,
                   "embedding needs token ids as input (input.tokens = true, shape [S]), got %s",
                   in->str);
    return FALSE;
  }
  if (!ps_layer_check_size((double)L->vocab * (double)L->dim, "embedding table", in, error) ||
      !ps_layer_check_size((double)in->shape[0] * (double)L->dim, "output", in, error))
    return FALSE;
  int64_t s = in->shape[0], sd = s * L->dim;
  gboolean pos = L->positions;
  L->out_rank = 2;
  L->out_shape[0] = s;
  L->out_shape[1] = L->dim;
  L->params = L->vocab * L->dim + (pos ? sd : 0);
  L->act_elems = s;
  if (L->lookup_matmul) {
    /* one_hot(ids) (S x V) times the table (V x D): 2 S V D FLOPs forward
     * and again for the table's gradient, one_hot^T dy; no input gradient
     * (PsLayerLowerInfo.takes_ids).  The one-hot operand is made inside
     * the product's kernel, never written (XLA fuses a matmul's producers
     * into it: Cloud TPU documentation, "Profile TensorFlow workloads",
     * tf.matmul), so a step reads the ids, the table (and positions) once
     * and writes y forward; reads the ids and dy backward, and writes the
     * dense gradient.  Its numerics are the gather's: exactly one 1 a row
     * picks the row unrounded, in any precision. */
    double vd = 2.0 * (double)s * (double)L->vocab * (double)L->dim;
    ps_layer_add_matmul(L, s, L->vocab, L->dim, 1);
    L->fwd_flops = vd + (pos ? (double)sd : 0);
    L->bwd_flops = vd + (pos ? (double)sd : 0); /* the positions' sum over the batch */
    L->fwd_bytes = (double)s + (double)sd;
    L->bwd_bytes = (double)s + (double)sd;
    return TRUE;
  }
  L->fwd_flops = pos ? (double)sd : 0;           /* gather, then add positions */
  L->bwd_flops = (double)sd;                     /* scatter-add of rows */
  L->fwd_bytes = (double)s + (pos ? 3.0 : 2.0) * (double)sd; /* ids, rows, (pos), y */
  L->bwd_bytes = (double)s + (pos ? 3.0 : 2.0) * (double)sd;
  return TRUE;
}

static gboolean embedding_plan(const NetPlan *p, NetLayer *nl, GError **error)
{
  const PsLayer *l = p->l;
  if (l->vocab <= 0 || l->vocab > G_MAXINT32 || l->dim <= 0 || l->dim > G_MAXINT32) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": embedding needs vocab > 0 and dim > 0", p->where, p->lname);
    return FALSE;
  }
  nl->in_dim = (int)p->shape[0]; /* the sequence */
  nl->units = (int)l->dim;
  nl->groups = (int)l->vocab;
  nl->positions = l->positions;
  nl->out_rank = 2;
  nl->out_shape[0] = p->shape[0];
  nl->out_shape[1] = l->dim;
  nl->w_len = (size_t)(l->vocab + (l->positions ? p->shape[0] : 0)) * (size_t)l->dim;
  return TRUE;
}

/* Table and positions uniform with standard deviation 0.02 (the
 * normal(0.02) of GPT-2's and BERT's initialisation). */
static void embedding_init(PsNet *net, int i, GRand *rng)
{
  const NetLayer *nl = &net->layers[i];
  ps_net_fill_uniform(rng, net->params + nl->w_off, nl->w_len, 0.02 * sqrt(3.0));
}

/* Token ids arrive as floats (exact below 2^24). */
static void embedding_forward(const NetStep *st)
{
  const NetLayer *nl = st->nl;
  size_t table = (size_t)nl->groups * nl->units;
  ps_embedding_forward(st->x, st->w, nl->positions ? st->w + table : NULL, st->sl->out,
                       st->batch * nl->in_dim, nl->in_dim, nl->groups, nl->units);
}

/* Ids have no gradient: dx is left alone. */
static gboolean embedding_backward(const NetStep *st)
{
  const NetLayer *nl = st->nl;
  size_t table = (size_t)nl->groups * nl->units;
  ps_embedding_backward(st->x, st->dy, st->dw, nl->positions ? st->dw + table : NULL,
                        st->batch * nl->in_dim, nl->in_dim, nl->groups, nl->units);
  return FALSE;
}

const PsLayerOps ps_layer_embedding = {
  .kind = PS_LAYER_EMBEDDING,
  .name = "embedding",
  .keys = keys_embedding,
  .parse = embedding_parse,
  .shape = embedding_shape,
  .takes_tokens = TRUE,
  .ranks = 1u << 1,
  .plan = embedding_plan,
  .init = embedding_init,
  .forward = embedding_forward,
  .backward = embedding_backward,
  .lower = {.lowering = PS_LOWER_PRODUCER, .tensor = PS_TP_VOCAB, .kernel = "embedding",
            .gathers = TRUE, .takes_ids = TRUE},
};

/* ---- patch_embedding ---------------------------------------------------- */

static const char *const keys_patch[] = {"type", "name", "size", "dim", "positions", NULL};

static gboolean patch_parse(PsLayer *L, json_object *obj, const char *file, const char *path,
                            GError **error)
{
  L->positions = TRUE;
  gboolean ok = ps_json_check_keys(obj, file, path, keys_patch, error) &&
                ps_layer_get_dim(obj, file, path, "size", TRUE, &L->kernel, error) &&
                ps_layer_get_dim(obj, file, path, "dim", TRUE, &L->dim, error) &&
                ps_json_get_bool(obj, file, path, "positions", FALSE, &L->positions, error);
  L->stride = L->kernel;
  return ok;
}

/* Dosovitskiy et al., "An Image is Worth 16x16 Words: Transformers for
 * Image Recognition at Scale", ICLR 2021, arXiv:2010.11929, eq. 1: the
 * image cut into non-overlapping PxP patches, each flattened and projected
 * to D, plus a learned position embedding per patch. */
static gboolean patch_shape(PsLayer *L, const PsLayerIn *in, GError **error)
{
  if (in->rank != 3) {
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, in->file, in->path,
                   "patch_embedding needs a rank-3 (H, W, C) input, got %s", in->str);
    return FALSE;
  }
  int64_t h = in->shape[0], w = in->shape[1], c = in->shape[2], p = L->kernel;
  if (h % p != 0 || w % p != 0) {
    ps_layer_error(error, PS_INPUT_ERROR_VALUE, in->file, in->path,
                   "patch size %" G_GINT64_FORMAT " does not divide the input %s into whole "
                   "patches; H and W must be multiples of it",
                   p, in->str);
    return FALSE;
  }
  int64_t s = (h / p) * (w / p), k = p * p * c;
  if (!ps_layer_check_size((double)k * (double)L->dim, "projection", in, error) ||
      !ps_layer_check_size((double)s * (double)L->dim, "output", in, error))
    return FALSE;
  int64_t sd = s * L->dim;
  L->out_rank = 2;
  L->out_shape[0] = s;
  L->out_shape[1] = L->dim;
  L->params = k * L->dim + L->dim + (L->positions ? sd : 0);
  ps_layer_add_matmul(L, s, k, L->dim, 1);
  double mm = ps_layer_matmul_flops(L), adds = (double)sd * (L->positions ? 2 : 1);
  L->fwd_flops = mm + adds;
  L->bwd_flops = 2 * mm + adds;
  L->fwd_bytes = (double)in->elems + (double)L->params + (double)sd;
  L->bwd_bytes = 2 * L->fwd_bytes;
  L->saves = PS_SAVES_INPUT;
  return TRUE;
}

static gboolean patch_plan(const NetPlan *pl, NetLayer *nl, GError **error)
{
  const PsLayer *l = pl->l;
  const int64_t *shape = pl->shape;
  int64_t p = l->kernel;
  if (p <= 0 || shape[0] % p != 0 || shape[1] % p != 0 || l->dim <= 0 ||
      l->dim > G_MAXINT32) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: layer \"%s\": patch_embedding needs dim > 0 and a patch size dividing "
                "the %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT " input", pl->where, pl->lname,
                shape[0], shape[1]);
    return FALSE;
  }
  nl->patch = (PsPatchShape){.batch = 1, .h = (int)shape[0], .w = (int)shape[1],
                             .c = (int)shape[2], .patch = (int)p, .dim = (int)l->dim};
  nl->positions = l->positions;
  int seq = ps_patch_seq(&nl->patch);
  nl->out_rank = 2;
  nl->out_shape[0] = seq;
  nl->out_shape[1] = l->dim;
  nl->out_shape[2] = 0;
  nl->w_len = (size_t)(p * p * shape[2] + (l->positions ? seq : 0)) * (size_t)l->dim;
  nl->b_len = (size_t)l->dim;
  return TRUE;
}

/* The projection Glorot-uniform; positions uniform with standard
 * deviation 0.02 (the normal(0.02) of the ViT reference implementation,
 * github.com/google-research/vision_transformer, models_vit.py). */
static void patch_init(PsNet *net, int i, GRand *rng)
{
  const NetLayer *nl = &net->layers[i];
  float *w = net->params + nl->w_off;
  const PsPatchShape *p = &nl->patch;
  size_t k = (size_t)p->patch * p->patch * p->c;
  ps_net_fill_uniform(rng, w, k * p->dim, sqrt(6.0 / ((double)k + p->dim)));
  ps_net_fill_uniform(rng, w + k * p->dim, nl->w_len - k * p->dim, 0.02 * sqrt(3.0));
}

static size_t patch_workspace(const NetLayer *nl, int max_batch)
{
  PsPatchShape p = nl->patch;
  p.batch = max_batch;
  return ps_patch_workspace(&p);
}

static void patch_forward(const NetStep *st)
{
  PsPatchShape p = st->nl->patch;
  p.batch = st->batch;
  size_t proj = (size_t)p.patch * p.patch * p.c * p.dim;
  ps_patch_forward(st->net->prec, &p, st->x, st->w, st->nl->positions ? st->w + proj : NULL,
                   st->b, st->sl->out, st->net->workspace);
}

static gboolean patch_backward(const NetStep *st)
{
  PsPatchShape p = st->nl->patch;
  p.batch = st->batch;
  size_t proj = (size_t)p.patch * p.patch * p.c * p.dim;
  ps_patch_backward(st->net->prec, &p, st->x, st->w, st->dy, st->dx, st->dw,
                    st->nl->positions ? st->dw + proj : NULL, st->db, st->net->workspace);
  return TRUE;
}

const PsLayerOps ps_layer_patch_embedding = {
  .kind = PS_LAYER_PATCH_EMBEDDING,
  .name = "patch_embedding",
  .keys = keys_patch,
  .parse = patch_parse,
  .shape = patch_shape,
  .ranks = 1u << 3,
  .plan = patch_plan,
  .init = patch_init,
  .workspace = patch_workspace,
  .forward = patch_forward,
  .backward = patch_backward,
  .lower = {.lowering = PS_LOWER_PRODUCER, .kernel = "matmul"},
};
