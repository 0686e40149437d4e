/* nets.c: small models built by hand and a fixture around their net, for
 * the numerics tests (see nets.h). */
#include "nets.h"

#include <math.h>
#include <string.h>

PsModel *model_new(int rank, const int64_t *shape, int classes)
{
  PsModel *m = g_new0(PsModel, 1);
  m->name = g_strdup("test-model");
  m->in_rank = rank;
  memcpy(m->in_shape, shape, sizeof(int64_t) * rank);
  m->classes = classes;
  m->layers = g_new0(PsLayer, 32);
  return m;
}

/* Frees a model built here or read by layers.c. */
void model_free(PsModel *m)
{
  for (int i = 0; i < m->n_layers; i++)
    g_free(m->layers[i].name);
  g_free(m->layers);
  g_free(m->name);
  g_free(m->file);
  g_free(m->description);
  g_free(m);
}

int64_t elems(const int64_t *shape, int rank)
{
  int64_t n = 1;
  for (int d = 0; d < rank; d++)
    n *= shape[d];
  return n;
}

static int ceil_div(int64_t a, int64_t b)
{
  return (int)((a + b - 1) / b);
}

/* Appends a layer fed by the previous one; `a` is units or filters, `k` the
 * kernel or pool size, `s` the stride (0: default).  Output shape and
 * parameter count follow TensorFlow's conventions. */
PsLayer *add(PsModel *m, PsLayerKind kind, int64_t a, int64_t k, int64_t s, int same, int bias)
{
  g_assert_cmpint(m->n_layers, <, 32);
  PsLayer *l = &m->layers[m->n_layers];
  const PsLayer *prev = m->n_layers ? &m->layers[m->n_layers - 1] : NULL;
  l->kind = kind;
  l->name = g_strdup_printf("l%d", m->n_layers);
  l->input_from = m->n_layers - 1;
  l->shortcut_from = -1;
  l->in_rank = prev ? prev->out_rank : m->in_rank;
  memcpy(l->in_shape, prev ? prev->out_shape : m->in_shape, sizeof l->in_shape);
  l->out_rank = l->in_rank;
  memcpy(l->out_shape, l->in_shape, sizeof l->out_shape);
  l->bias = bias;
  l->same_padding = same;
  l->stride = s;
  const int64_t *in = l->in_shape;
  switch (kind) {
  case PS_LAYER_DENSE:
    l->units = a;
    l->out_shape[l->in_rank - 1] = a;
    l->params = in[l->in_rank - 1] * a + (bias ? a : 0);
    break;
  case PS_LAYER_CONV2D: {
    int st = s ? (int)s : 1;
    l->filters = a;
    l->kernel = k;
    l->out_shape[0] = same ? ceil_div(in[0], st) : ceil_div(in[0] - k + 1, st);
    l->out_shape[1] = same ? ceil_div(in[1], st) : ceil_div(in[1] - k + 1, st);
    l->out_shape[2] = a;
    l->params = k * k * in[2] * a + (bias ? a : 0);
    break;
  }
  case PS_LAYER_MAXPOOL:
  case PS_LAYER_AVGPOOL: {
    int st = s ? (int)s : (int)k;
    l->pool = k;
    l->out_shape[0] = ceil_div(in[0] - k + 1, st);
    l->out_shape[1] = ceil_div(in[1] - k + 1, st);
    break;
  }
  case PS_LAYER_GLOBAL_AVGPOOL:
    l->out_rank = 1;
    l->out_shape[0] = in[2];
    l->out_shape[1] = l->out_shape[2] = 0;
    break;
  case PS_LAYER_FLATTEN:
    l->out_rank = 1;
    l->out_shape[0] = elems(in, l->in_rank);
    l->out_shape[1] = l->out_shape[2] = 0;
    break;
  default:
    break;
  }
  m->params += l->params;
  m->n_layers++;
  return l;
}

/* 6 -> 8 relu -> 7 gelu -> 5 tanh -> 3 classes */
PsModel *make_mlp(void)
{
  int64_t in[] = {6};
  PsModel *m = model_new(1, in, 3);
  add(m, PS_LAYER_DENSE, 8, 0, 0, 0, 1);
  add(m, PS_LAYER_RELU, 0, 0, 0, 0, 0);
  add(m, PS_LAYER_DENSE, 7, 0, 0, 0, 1);
  add(m, PS_LAYER_GELU, 0, 0, 0, 0, 0);
  add(m, PS_LAYER_DENSE, 5, 0, 0, 0, 0);
  add(m, PS_LAYER_TANH, 0, 0, 0, 0, 0);
  add(m, PS_LAYER_DENSE, 3, 0, 0, 0, 1);
  add(m, PS_LAYER_SOFTMAX_XENT, 0, 0, 0, 0, 0);
  return m;
}

/* (6,6,2): conv3 same relu, maxpool 2, conv3 stride 2 same gelu, global
 * average, dense 3. */
PsModel *make_cnn(void)
{
  int64_t in[] = {6, 6, 2};
  PsModel *m = model_new(3, in, 3);
  add(m, PS_LAYER_CONV2D, 3, 3, 1, 1, 1);
  add(m, PS_LAYER_RELU, 0, 0, 0, 0, 0);
  add(m, PS_LAYER_MAXPOOL, 0, 2, 0, 0, 0);
  add(m, PS_LAYER_CONV2D, 4, 3, 2, 1, 1);
  add(m, PS_LAYER_GELU, 0, 0, 0, 0, 0);
  add(m, PS_LAYER_GLOBAL_AVGPOOL, 0, 0, 0, 0, 0);
  add(m, PS_LAYER_DENSE, 3, 0, 0, 0, 1);
  add(m, PS_LAYER_SOFTMAX_XENT, 0, 0, 0, 0, 0);
  return m;
}

/* (7,7,1): conv3 valid tanh, overlapping avgpool 2 stride 1, flatten,
 * dense 3; a flatten between layers with parameters. */
PsModel *make_cnn_flat(void)
{
  int64_t in[] = {7, 7, 1};
  PsModel *m = model_new(3, in, 3);
  add(m, PS_LAYER_CONV2D, 2, 3, 1, 0, 1);
  add(m, PS_LAYER_TANH, 0, 0, 0, 0, 0);
  add(m, PS_LAYER_AVGPOOL, 0, 2, 1, 0, 0);
  add(m, PS_LAYER_FLATTEN, 0, 0, 0, 0, 0);
  add(m, PS_LAYER_DENSE, 3, 0, 0, 0, 1);
  add(m, PS_LAYER_SOFTMAX_XENT, 0, 0, 0, 0, 0);
  return m;
}



void fixture_batch(Fixture *f, int batch, GRand *r)
{
  f->batch = batch;
  f->in_elems = (size_t)elems(f->model->in_shape, f->model->in_rank);
  f->x = g_new(float, f->in_elems * batch);
  f->labels = g_new(int32_t, batch);
  for (size_t i = 0; i < f->in_elems * batch; i++)
    f->x[i] = (float)g_rand_double_range(r, -1, 1);
  for (int b = 0; b < batch; b++)
    f->labels[b] = g_rand_int_range(r, 0, (gint32)f->model->classes);
}

void fixture_init(Fixture *f, MakeModel make, int batch, int max_batch, PsPrecision prec,
                  uint64_t seed)
{
  GError *error = NULL;
  f->model = make();
  f->net = ps_net_new(f->model, max_batch, prec, seed, &error);
  g_assert_no_error(error);
  g_assert_nonnull(f->net);
  GRand *r = g_rand_new_with_seed((guint32)seed + 1000);
  fixture_batch(f, batch, r);
  /* Non-zero biases, so their gradients and wiring are exercised too. */
  float *p = ps_net_params(f->net);
  for (int i = 0; i < f->model->n_layers; i++) {
    const PsLayer *l = &f->model->layers[i];
    if (!l->bias)
      continue;
    size_t off, len;
    ps_net_layer_params(f->net, i, &off, &len);
    int64_t nb = l->kind == PS_LAYER_DENSE ? l->units : l->filters;
    for (size_t j = off + len - (size_t)nb; j < off + len; j++)
      p[j] = (float)g_rand_double_range(r, -0.3, 0.3);
  }
  g_rand_free(r);
}

void fixture_clear(Fixture *f)
{
  ps_net_free(f->net);
  model_free(f->model);
  g_free(f->x);
  g_free(f->labels);
}

double net_loss_at(Fixture *f)
{
  ps_net_set_input(f->net, f->x, f->labels, f->batch);
  ps_net_forward(f->net);
  return ps_net_loss(f->net);
}

void net_gradient(Fixture *f, float loss_scale)
{
  ps_net_zero_grads(f->net);
  ps_net_set_input(f->net, f->x, f->labels, f->batch);
  ps_net_forward(f->net);
  ps_net_backward(f->net, loss_scale);
}

double train(Fixture *f, PsOptimizer *opt, int steps)
{
  double first = net_loss_at(f);
  for (int s = 0; s < steps; s++) {
    net_gradient(f, 1.0f);
    ps_optimizer_step(opt, ps_net_params(f->net), ps_net_grads(f->net));
  }
  double last = net_loss_at(f);
  g_test_message("loss %.4f -> %.4f after %d steps", first, last, steps);
  return last / first;
}

void fixture_separate(Fixture *f)
{
  for (int b = 0; b < f->batch; b++)
    for (size_t i = 0; i < f->in_elems; i++)
      f->x[b * f->in_elems + i] += 0.8f * (float)sin(1.7 * (i + 1) * (f->labels[b] + 1));
}
