/* test_decoder.c: decoder-only language models and the layer kinds they
 * bring (rmsnorm, swiglu, attention's kv_heads, dim and rope): parameter
 * counts against the published figures, each counted again here from the
 * architecture, and the costs of grouped-query attention against closed
 * forms written here.
 *
 * Invariant checked: a model's totals are the sums of its layers, and the
 * counts here are computed from the papers' hyper-parameters, never read
 * back from podsim. */
#include "common/json.h"
#include "model/layers.h"
#include "model/net.h"
#include "support/experiment.h"

#include <math.h>
#include <string.h>
#include <time.h>

/* ---- helpers ------------------------------------------------------------ */

static PsModel *decoder_load(const char *name)
{
  const char *dir = g_getenv("PODSIM_DATA_DIR");
  g_autofree char *file = g_strdup_printf("%s.json", name);
  g_autofree char *path = g_build_filename(dir && *dir ? dir : ".", "models", file, NULL);
  GError *err = NULL;
  PsModel *m = ps_model_load_file(path, &err);
  g_assert_no_error(err);
  int64_t params = 0;
  for (int i = 0; i < m->n_layers; i++)
    params += m->layers[i].params;
  g_assert_cmpint(m->params, ==, params);
  g_assert_true(m->token_input);
  return m;
}

static int count_kind(const PsModel *m, PsLayerKind kind)
{
  int n = 0;
  for (int i = 0; i < m->n_layers; i++)
    n += m->layers[i].kind == kind;
  return n;
}

/* Pre-LN decoder layer of width d: two norms (each `norm` parameters),
 * attention of h heads over kv key/value heads of d / h (no biases unless
 * `bias`: then 4 d for the projections), and the feed-forward block. */
static int64_t attention_params(int64_t d, int64_t h, int64_t kv, gboolean bias)
{
  int64_t dh = d / h;
  return d * d + 2 * d * kv * dh + d * d + (bias ? d + 2 * kv * dh + d : 0);
}

/* ---- published models --------------------------------------------------- */

/* Brown et al. 2020, table 2.1: n_layers 96, d_model 12288, n_heads 96,
 * d_head 128, d_ff = 4 d_model (section 2.1), context 2048; GPT-2's
 * vocabulary of 50257 and learned positions, biases everywhere.  The paper
 * says 175.0B; the tied model counts 174.60B and this untied one 175.22B:
 * both are 175B to the billion, which is the figure the paper names the
 * model by. */
static void test_gpt3(void)
{
  clock_t c0 = clock(); /* CPU time: a loaded machine stretches wall time */
  PsModel *m = decoder_load("gpt3-175b");
  double secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
  const int64_t L = 96, d = 12288, V = 50257, S = 2048, F = 4 * d;
  int64_t layer = 2 * (2 * d) + attention_params(d, 96, 96, TRUE) + (d * F + F) + (F * d + d);
  int64_t tied = V * d + S * d + L * layer + 2 * d;
  g_assert_cmpint(m->params, ==, tied + V * d);
  g_assert_cmpint(tied, ==, INT64_C(174604259328));
  g_assert_cmpint(llround((double)tied / 1e9), ==, 175);
  g_assert_cmpint(llround((double)m->params / 1e9), ==, 175);
  g_assert_cmpint(count_kind(m, PS_LAYER_ATTENTION), ==, L);
  g_assert_cmpint(count_kind(m, PS_LAYER_LAYERNORM), ==, 2 * L + 1);
  g_assert_cmpint(m->labels_per_example, ==, S);
  const PsLayer *head = &m->layers[m->n_layers - 2];
  g_assert_cmpint(head->out_rank, ==, 2);
  g_assert_cmpint(head->mm[0].rows, ==, S);
  g_assert_cmpint(head->mm[0].n, ==, V);
  for (int i = 0; i < m->n_layers; i++)
    if (m->layers[i].kind == PS_LAYER_ATTENTION)
      g_assert_true(m->layers[i].causal);
  /* the build counts; it allocates nothing per parameter (175 G floats
   * would take minutes and 700 GB) */
  g_assert_cmpfloat(secs, <, 5.0);
  ps_model_free(m);
}

/* Touvron et al. 2023 (Llama 2), table 1 and section 2.2; the reference
 * implementation's widths (FFN 11008 and 28672).  Untied embedding and
 * head, no biases, one gain per RMSNorm. */
static int64_t llama_params(int64_t L, int64_t d, int64_t h, int64_t kv, int64_t f)
{
  const int64_t V = 32000;
  int64_t layer = 2 * d + attention_params(d, h, kv, FALSE) + 2 * d * f + f * d;
  return 2 * V * d + L * layer + d;
}

static void check_llama(PsModel *m, int64_t L, int64_t kv)
{
  g_assert_cmpint(count_kind(m, PS_LAYER_RMSNORM), ==, 2 * L + 1);
  g_assert_cmpint(count_kind(m, PS_LAYER_SWIGLU), ==, L);
  g_assert_cmpint(count_kind(m, PS_LAYER_LAYERNORM), ==, 0);
  g_assert_false(m->layers[0].positions);
  for (int i = 0; i < m->n_layers; i++)
    if (m->layers[i].kind == PS_LAYER_ATTENTION) {
      g_assert_true(m->layers[i].rope && m->layers[i].causal && !m->layers[i].bias);
      g_assert_cmpint(m->layers[i].kv_heads, ==, kv);
    }
}

/* 6.74B (the model card's exact 6,738,415,616) and 68.98B. */
static void test_llama2(void)
{
  PsModel *m = decoder_load("llama2-7b");
  g_assert_cmpint(m->params, ==, llama_params(32, 4096, 32, 32, 11008));
  g_assert_cmpint(llround((double)m->params / 1e7), ==, 674);
  check_llama(m, 32, 32);
  ps_model_free(m);
  m = decoder_load("llama2-70b");
  g_assert_cmpint(m->params, ==, llama_params(80, 8192, 64, 8, 28672));
  g_assert_cmpint(llround((double)m->params / 1e7), ==, 6898);
  check_llama(m, 80, 8);
  ps_model_free(m);
}

/* 2 layers of d 64, 4 heads over 2 key/value heads, SwiGLU 128, bytes. */
static void test_tiny(void)
{
  PsModel *m = decoder_load("tiny-decoder");
  const int64_t d = 64, V = 128, f = 128;
  int64_t layer = 2 * d + attention_params(d, 4, 2, FALSE) + 3 * d * f;
  g_assert_cmpint(m->params, ==, 2 * V * d + 2 * layer + d);
  g_assert_true(m->numerics_supported);
  g_assert_cmpint(m->classes, ==, V);
  g_assert_cmpint(m->labels_per_example, ==, 64);
  check_llama(m, 2, 2);
  ps_model_free(m);
}

/* ---- grouped-query attention: closed forms ------------------------------ */

typedef struct {
  int64_t s, d, h, kv, inner;
  gboolean bias, rope;
} GqaForm;

/* One attention layer over (S, D) with the case's keys. */
static PsModel *gqa_model(const GqaForm *c)
{
  g_autofree char *text = g_strdup_printf(
      "{'input': {'shape': [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "], 'classes': %"
      G_GINT64_FORMAT "}, 'layers': [{'type': 'attention', 'heads': %" G_GINT64_FORMAT
      ", 'kv_heads': %" G_GINT64_FORMAT ", 'dim': %" G_GINT64_FORMAT
      ", 'bias': %s, 'rope': %s}, {'type': 'softmax_xent'}]}",
      c->s, c->d, c->d, c->h, c->kv, c->inner, c->bias ? "true" : "false",
      c->rope ? "true" : "false");
  GError *err = NULL;
  PsModel *m = model_parse_quoted(text, &err);
  g_assert_no_error(err);
  return m;
}

/* Params D (I + 2 KV dh) + I D (+ I + 2 KV dh + D); forward FLOPs 2 S D
 * (I + 2 KV dh) + 4 S^2 I + 2 S I D, 6 h S^2 for the scale and softmax,
 * the biases' adds and 3 per rotated element; backward twice the matmuls
 * and 5 h S^2; kept: x, Q, K, V, context and the probabilities. */
static void check_gqa_form(const GqaForm *c, const PsLayer *L)
{
  const double S = (double)c->s, D = (double)c->d, H = (double)c->h, I = (double)c->inner;
  const double kvw = (double)c->kv * (I / H), P = I + 2 * kvw;
  double params = D * P + I * D + (c->bias ? P + D : 0);
  double mm = 2 * S * D * P + 4 * S * S * I + 2 * S * I * D;
  double extra = (c->bias ? S * (P + D) : 0) + (c->rope ? 3 * S * (I + kvw) : 0);
  g_assert_cmpfloat((double)L->params, ==, params);
  g_assert_cmpfloat(L->fwd_flops, ==, mm + 6 * H * S * S + extra);
  g_assert_cmpfloat(L->bwd_flops, ==, 2 * mm + 5 * H * S * S + extra);
  g_assert_cmpfloat((double)L->act_elems, ==, S * D + 2 * S * I + 2 * S * kvw + H * S * S);
  g_assert_cmpfloat(L->fwd_bytes, ==, 2 * S * D + 4 * S * I + 4 * S * kvw + 4 * H * S * S + params);
}

static void test_gqa_closed_form(void)
{
  static const GqaForm cases[] = {
    {16, 64, 8, 2, 64, FALSE, TRUE}, {10, 48, 6, 1, 96, TRUE, FALSE},
    {32, 8192, 64, 8, 8192, FALSE, TRUE}, {12, 40, 4, 4, 40, TRUE, FALSE},
  };
  for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
    PsModel *m = gqa_model(&cases[i]);
    check_gqa_form(&cases[i], &m->layers[0]);
    ps_model_free(m);
  }
  /* kv_heads = heads and dim = d_model: plain multi-head attention, 4 D^2
   * + 4 D weights and 10 S D + 4 h S^2 + params of traffic */
  const GqaForm mha = {12, 40, 4, 4, 40, TRUE, FALSE};
  PsModel *m = gqa_model(&mha);
  const PsLayer *L = &m->layers[0];
  g_assert_cmpint(L->params, ==, 4 * 40 * 40 + 4 * 40);
  g_assert_cmpfloat(L->fwd_bytes, ==, 10.0 * 12 * 40 + 4.0 * 4 * 12 * 12 + (double)L->params);
  ps_model_free(m);
}

/* A head-split shard (heads / T, kv_heads / T, dim / T) is an attention
 * layer with 1/T of the weights and of the matmul FLOPs. */
static void test_gqa_shard(void)
{
  const GqaForm full = {16, 64, 8, 4, 64, FALSE, TRUE};
  PsModel *mf = gqa_model(&full);
  for (int64_t T = 2; T <= 4; T *= 2) {
    const GqaForm part = {16, 64, 8 / T, 4 / T, 64 / T, FALSE, TRUE};
    PsModel *mp = gqa_model(&part);
    g_assert_cmpint(mp->layers[0].params * T, ==, mf->layers[0].params);
    for (int j = 0; j < mf->layers[0].n_mm; j++) {
      const PsMatmul *a = &mf->layers[0].mm[j], *b = &mp->layers[0].mm[j];
      g_assert_cmpfloat((double)(a->rows * a->k * a->n * a->count), ==,
                        (double)(T * b->rows * b->k * b->n * b->count));
    }
    ps_model_free(mp);
  }
  ps_model_free(mf);
}

/* ---- a decoder's numerics through the net ------------------------------- */

/* Every new kind in one net (token ids in, vector logits out through a
 * mean over positions, so the loss is today's one label per example). */
static const char decoder_net[] =
    "{'input': {'shape': [8], 'classes': 5, 'tokens': true}, 'layers': ["
    "{'type': 'embedding', 'vocab': 7, 'dim': 8, 'positions': false},"
    "{'type': 'residual', 'body': [{'type': 'rmsnorm'}, {'type': 'attention', 'heads': 4, "
    "'kv_heads': 2, 'rope': true, 'causal': true, 'bias': false}]},"
    "{'type': 'residual', 'body': [{'type': 'rmsnorm'}, {'type': 'swiglu', 'units': 12},"
    "{'type': 'dense', 'units': 8, 'bias': false}]},"
    "{'type': 'rmsnorm'}, {'type': 'global_avgpool'}, {'type': 'dense', 'units': 5},"
    "{'type': 'softmax_xent'}]}";

/* The same with a GeGLU feed-forward block: the gate's activation reaches
 * the kernels (a silu gate would miss the differences). */
static const char decoder_net_geglu[] =
    "{'input': {'shape': [8], 'classes': 5, 'tokens': true}, 'layers': ["
    "{'type': 'embedding', 'vocab': 7, 'dim': 8, 'positions': false},"
    "{'type': 'residual', 'body': [{'type': 'rmsnorm'}, {'type': 'attention', 'heads': 4, "
    "'kv_heads': 2, 'rope': true, 'causal': true, 'bias': false}]},"
    "{'type': 'residual', 'body': [{'type': 'rmsnorm'}, {'type': 'swiglu', 'units': 12, "
    "'activation': 'gelu'}, {'type': 'dense', 'units': 8, 'bias': false}]},"
    "{'type': 'rmsnorm'}, {'type': 'global_avgpool'}, {'type': 'dense', 'units': 5},"
    "{'type': 'softmax_xent'}]}";

static double decoder_loss(PsNet *net, const float *x, const int32_t *labels, int batch)
{
  ps_net_set_input(net, x, labels, batch);
  ps_net_forward(net);
  return ps_net_loss(net);
}

/* The net's gradient against differences of its own float loss, with
 * test_net.c's bound: float rounding puts ~1e-7 on the loss, ~5e-5 on a
 * difference over 2h with h = 1e-3, so 3e-4 + 2% of the entry; the
 * parameter count is the plan's and the closed form's. */
static void test_decoder_net(gconstpointer text)
{
  GError *err = NULL;
  PsModel *m = model_parse_quoted(text, &err);
  g_assert_no_error(err);
  g_assert_true(m->numerics_supported);
  PsNet *net = ps_net_new(m, 4, PS_PRECISION_F32, 7, &err);
  g_assert_no_error(err);
  const size_t n = ps_net_n_params(net);
  g_assert_cmpuint(n, ==, (size_t)m->params);
  g_assert_cmpuint(n, ==, 7 * 8 + 8 + attention_params(8, 4, 2, FALSE) + 8 + 3 * 8 * 12 + 8 +
                              8 * 5 + 5);
  const int batch = 4;
  float x[32];
  int32_t labels[4] = {0, 3, 1, 4};
  for (int i = 0; i < 32; i++)
    x[i] = (float)((i * 5 + i / 8) % 7);
  /* the table at unit scale: at its initial 0.02 a step of h would be a
   * few percent of the rows the first rmsnorm divides by */
  float *p = ps_net_params(net);
  for (int i = 0; i < 7 * 8; i++)
    p[i] *= 50.0f;
  ps_net_zero_grads(net);
  decoder_loss(net, x, labels, batch);
  ps_net_backward(net, 1.0f);
  g_autofree float *g = g_memdup2(ps_net_grads(net), n * sizeof(float));
  const float h = 1e-3f;
  size_t big = 0;
  for (size_t i = 0; i < n; i++) {
    float save = p[i];
    p[i] = save + h;
    double hp = (double)p[i] - save, lp = decoder_loss(net, x, labels, batch);
    p[i] = save - h;
    double hm = save - (double)p[i], lm = decoder_loss(net, x, labels, batch);
    p[i] = save;
    double d = (lp - lm) / (hp + hm);
    big += fabs(d) > 1e-2;
    if (fabs(g[i] - d) > 3e-4 + 2e-2 * fabs(d))
      g_test_message("param %zu grad %.6g, differences %.6g", i, g[i], d);
    g_assert_cmpfloat(fabs(g[i] - d), <=, 3e-4 + 2e-2 * fabs(d));
  }
  g_assert_cmpuint(big * 4, >=, n); /* the check is not vacuous */
  ps_net_free(net);
  ps_model_free(m);
}

/* ---- the other kinds: costs and errors ---------------------------------- */

/* rmsnorm: D gains, 4 and 8 FLOPs per element; swiglu: 2 D F weights,
 * two products; an embedding without positions holds the table only. */
static void test_kinds(void)
{
  GError *err = NULL;
  PsModel *m = model_parse_quoted("{'input': {'shape': [6], 'classes': 11, 'tokens': true}, "
                             "'layers': [{'type': 'embedding', 'vocab': 11, 'dim': 8, "
                             "'positions': false}, {'type': 'rmsnorm'}, "
                             "{'type': 'swiglu', 'units': 20}, {'type': 'dense', 'units': 11},"
                             "{'type': 'softmax_xent'}]}", &err);
  g_assert_no_error(err);
  g_assert_cmpint(m->layers[0].params, ==, 11 * 8);
  g_assert_cmpint(m->layers[1].params, ==, 8);
  g_assert_cmpfloat(m->layers[1].fwd_flops, ==, 4.0 * 48);
  g_assert_cmpfloat(m->layers[1].bwd_flops, ==, 8.0 * 48);
  const PsLayer *g = &m->layers[2];
  g_assert_cmpint(g->params, ==, 2 * 8 * 20);
  g_assert_cmpint(g->out_shape[1], ==, 20);
  g_assert_cmpfloat(g->fwd_flops, ==, 2.0 * 2 * 6 * 8 * 20 + 5.0 * 6 * 20);
  g_assert_cmpint(g->act_elems, ==, 6 * 8 + 2 * 6 * 20);
  g_assert_cmpint(m->labels_per_example, ==, 6);
  g_assert_true(m->numerics_supported);
  ps_model_free(m);

  /* GeGLU: the same weights and products; gelu and the product 11 FLOPs
   * an output forward, 20 backward, against silu's 5 and 8 */
  m = model_parse_quoted("{'input': {'shape': [6, 8], 'classes': 11}, 'layers': ["
                         "{'type': 'swiglu', 'units': 20, 'activation': 'gelu'}, "
                         "{'type': 'dense', 'units': 11}, {'type': 'softmax_xent'}]}", &err);
  g_assert_no_error(err);
  g = &m->layers[0];
  const double mm = 2.0 * 2 * 6 * 8 * 20;
  g_assert_true(g->gelu_gate);
  g_assert_cmpint(g->params, ==, 2 * 8 * 20);
  g_assert_cmpfloat(g->fwd_flops, ==, mm + 11.0 * 6 * 20);
  g_assert_cmpfloat(g->bwd_flops, ==, 2 * mm + 20.0 * 6 * 20);
  ps_model_free(m);
}

static void expect_error(const char *layer, const char *want)
{
  g_autofree char *text = g_strdup_printf(
      "{'input': {'shape': [8, 24], 'classes': 24}, 'layers': [%s, {'type': 'softmax_xent'}]}",
      layer);
  GError *err = NULL;
  PsModel *m = model_parse_quoted(text, &err);
  g_assert_null(m);
  g_assert_nonnull(err);
  g_assert_true(err->domain == PS_INPUT_ERROR);
  if (!strstr(err->message, want))
    g_error("got \"%s\", want \"%s\"", err->message, want);
  g_error_free(err);
}

/* The gate's activation reaches the net's kernels: the SwiGLU and GeGLU
 * nets, built with the same seed (the same weights), give the losses of
 * their own activation, which differ. */
static void test_geglu_differs(void)
{
  GError *err = NULL;
  double loss[2];
  const char *texts[2] = {decoder_net, decoder_net_geglu};
  float x[32];
  int32_t labels[4] = {0, 3, 1, 4};
  for (int i = 0; i < 32; i++)
    x[i] = (float)((i * 5 + i / 8) % 7);
  for (int k = 0; k < 2; k++) {
    PsModel *m = model_parse_quoted(texts[k], &err);
    g_assert_no_error(err);
    PsNet *net = ps_net_new(m, 4, PS_PRECISION_F32, 7, &err);
    g_assert_no_error(err);
    loss[k] = decoder_loss(net, x, labels, 4);
    ps_net_free(net);
    ps_model_free(m);
  }
  g_assert_cmpfloat(fabs(loss[0] - loss[1]), >, 1e-6);
}

static void test_errors(void)
{
  expect_error("{'type': 'attention', 'heads': 4, 'kv_heads': 3}",
               "t.json: layers[0]: kv_heads 3 does not divide heads 4");
  expect_error("{'type': 'attention', 'heads': 4, 'kv_heads': 8}",
               "kv_heads 8 does not divide heads 4");
  expect_error("{'type': 'attention', 'heads': 4, 'dim': 30}",
               "dim 30 is not divisible by heads 4");
  expect_error("{'type': 'attention', 'heads': 8, 'rope': true}",
               "rope needs an even head_dim, got d_model 24 / heads 8 = 3");
  expect_error("{'type': 'swiglu'}", "units");
  expect_error("{'type': 'swiglu', 'units': 4, 'activation': 'relu'}",
               "t.json: layers[0].activation: must be one of: silu, gelu; got 'relu'");
  expect_error("{'type': 'rmsnorm', 'units': 3}", "units");
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/decoder/gpt3-175b", test_gpt3);
  g_test_add_func("/decoder/llama2", test_llama2);
  g_test_add_func("/decoder/tiny", test_tiny);
  g_test_add_func("/decoder/gqa/closed-form", test_gqa_closed_form);
  g_test_add_func("/decoder/gqa/shard", test_gqa_shard);
  g_test_add_func("/decoder/kinds", test_kinds);
  g_test_add_data_func("/decoder/net", decoder_net, test_decoder_net);
  g_test_add_data_func("/decoder/net-geglu", decoder_net_geglu, test_decoder_net);
  g_test_add_func("/decoder/net-geglu/differs", test_geglu_differs);
  g_test_add_func("/decoder/errors", test_errors);
  return g_test_run();
}
