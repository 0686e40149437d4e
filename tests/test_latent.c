/* test_latent.c: latent attention (the attention layer's kv_lora_rank,
 * q_lora_rank, qk_rope_head_dim and v_head_dim: DeepSeek's multi-head
 * latent attention, model/layer-attention.c) against closed forms written
 * here from the architecture.
 *
 * - /latent/closed-form: a latent layer of H heads over (S, D), query and
 *   key heads dn + dr wide, value heads dv, latents of ql and kl: params
 *   D ql + ql + ql H (dn + dr) + D (kl + dr) + kl + kl H (dn + dv) + H dv D
 *   (without a query latent D H (dn + dr) for the first three); the
 *   weight products' FLOPs 2 S times the same sums; the score and context
 *   products 2 S^2 H (dn + dr) and 2 S^2 H dv over the whole square, of
 *   which flash executes the blocks the causal mask lets it see; MFU's
 *   causal count halves those two products; the kept activations are the
 *   latents, Q, K, V and the context (and its input);
 * - /latent/deepseek: models/deepseek3-671b.json has DeepSeek-V3's
 *   671,026,404,352 weights (61 layers of latent attention, 3 dense and 58
 *   of 256 experts of 2048, 8 a token, and a shared one) and its model
 *   FLOPs a token are 2 x its active weights (the head's, the embedding
 *   being looked up, but as a matmul: MFU leaves it out) plus attention's
 *   products over the whole sequence;
 * - /latent/run: DeepSeek-V3 cut to one dense and one MoE layer, fully
 *   sharded over a tpu7x-8, compiles and runs, its flash kernels' softmax
 *   in series part of the MXU-bound time and halved by twice the vector
 *   unit's rate; keeping the queries, the
 *   keys and values and the context (remat_keep) reruns less of it than
 *   keeping nothing, and a full recompute reruns every product of it;
 * - /latent/errors: the latent keys without kv_lora_rank, latent attention
 *   without flash, with biases or with grouped key/value heads, a tensor
 *   or a context axis over it, numerics on it (timing only), and
 *   attention_kernel unfused over it: errors naming the key or the
 *   setting. */
#include "model/layers.h"
#include "program/program.h"
#include "run/experiment.h"
#include "strategy/strategy.h"
#include "support/experiment.h"

#include <math.h>
#include <string.h>

/* A model of an embedding, one latent attention layer and a head. */
static PsModel *latent_model(int64_t s, int64_t d, int64_t h, int64_t dn, int64_t dr, int64_t dv,
                             int64_t ql, int64_t kl, GError **error)
{
  g_autofree char *q = ql > 0 ? g_strdup_printf(", 'q_lora_rank': %" G_GINT64_FORMAT, ql)
                              : g_strdup("");
  g_autofree char *r = dr > 0 ? g_strdup_printf(", 'qk_rope_head_dim': %" G_GINT64_FORMAT, dr)
                              : g_strdup("");
  g_autofree char *text = g_strdup_printf(
      "{'name': 'm', 'input': {'shape': [%" G_GINT64_FORMAT "], 'classes': 16, 'tokens': true},"
      " 'layers': [{'type': 'embedding', 'name': 'embed', 'vocab': 16, 'dim': %" G_GINT64_FORMAT
      "},"
      " {'type': 'attention', 'name': 'attn', 'heads': %" G_GINT64_FORMAT
      ", 'dim': %" G_GINT64_FORMAT ", 'kv_lora_rank': %" G_GINT64_FORMAT "%s%s"
      ", 'v_head_dim': %" G_GINT64_FORMAT
      ", 'bias': false, 'causal': true, 'rope': true, 'flash': true, 'flash_block': 64,"
      " 'flash_fused_backward': true},"
      " {'type': 'dense', 'name': 'head', 'units': 16}, {'type': 'softmax_xent', 'name': 'loss'}]}",
      s, d, h, h * dn, kl, q, r, dv);
  return model_parse_quoted(text, error);
}

static double product(const PsMatmul *mm)
{
  return 2.0 * (double)mm->rows * (double)mm->k * (double)mm->n * (double)mm->count;
}

static void check_layer(int64_t s, int64_t d, int64_t h, int64_t dn, int64_t dr, int64_t dv,
                        int64_t ql, int64_t kl)
{
  GError *error = NULL;
  PsModel *m = latent_model(s, d, h, dn, dr, dv, ql, kl, &error);
  g_assert_no_error(error);
  const PsLayer *L = &m->layers[1];
  const int64_t dqk = dn + dr;
  int64_t q = ql > 0 ? d * ql + ql + ql * h * dqk : d * h * dqk;
  int64_t params = q + d * (kl + dr) + kl + kl * h * (dn + dv) + h * dv * d;
  g_assert_cmpint(L->params, ==, params);
  g_assert_false(m->numerics_supported);
  /* the weight products: the norms' gains are not products */
  double weights = 2.0 * (double)s *
                   (double)((ql > 0 ? d * ql + ql * h * dqk : d * h * dqk) + d * (kl + dr) +
                            kl * h * (dn + dv) + h * dv * d);
  double square = 2.0 * (double)s * (double)s * (double)h * (double)(dqk + dv);
  double w = 0, a = 0;
  for (int j = 0; j < L->n_mm; j++)
    *(L->mm[j].activations ? &a : &w) += product(&L->mm[j]);
  g_test_message("S %" G_GINT64_FORMAT " H %" G_GINT64_FORMAT " ql %" G_GINT64_FORMAT
                 ": weight products %.6e (closed form %.6e), score and context %.6e (%.6e)",
                 s, h, ql, w, weights, a, square);
  g_assert_cmpfloat(fabs(w - weights), <=, 1e-12 * weights);
  g_assert_cmpfloat(fabs(a - square), <=, 1e-12 * square);
  /* flash runs the causal blocks only: at blocks of 64 over S, the
   * diagonal blocks whole */
  double blocks = (double)(s / 64), seen = 64.0 * 64.0 * blocks * (blocks + 1) / 2;
  g_assert_cmpfloat(fabs(L->mm[1].done - seen / ((double)s * (double)s)), <=, 1e-12);
  g_assert_cmpfloat(L->fwd_flops, >, weights + square * L->mm[1].done);
  /* MFU's causal count: the two products halved */
  double model = ps_model_flops_per_example(m), halved = ps_model_flops_causal_halved_per_example(m);
  g_assert_cmpfloat(fabs((model - halved) - 3.0 * 0.5 * square), <=, 1e-9 * square);
  /* kept: latents, Q, K, V, context, and its input (the embedding's
   * output, which it is the first to need) */
  int64_t kept = s * (ql + kl + dr) + s * h * dqk + s * h * (dqk + dv) + s * h * dv + s * d;
  g_assert_cmpint(L->act_elems, ==, kept);
  ps_model_free(m);
}

static void test_closed_form(void)
{
  check_layer(256, 64, 4, 16, 8, 16, 32, 24); /* DeepSeek's shape, small */
  check_layer(256, 64, 4, 16, 8, 24, 0, 24);  /* no query latent, wider values */
  check_layer(128, 32, 2, 8, 0, 8, 16, 8);    /* no rotary part */
}

static void test_deepseek(void)
{
  const char *dir = g_getenv("PODSIM_DATA_DIR");
  g_autofree char *path =
      g_build_filename(dir && *dir ? dir : ".", "models", "deepseek3-671b.json", NULL);
  GError *error = NULL;
  PsModel *m = ps_model_load_file(path, &error);
  g_assert_no_error(error);
  const int64_t d = 7168, h = 128, dn = 128, dr = 64, dv = 128, ql = 1536, kl = 512;
  const int64_t v = 129280, s = 4096, dense = 3, moe = 58, e = 256, k = 8, f = 2048;
  const int64_t mlp = 18432, dqk = dn + dr;
  int64_t attn = d * ql + ql + ql * h * dqk + d * (kl + dr) + kl + kl * h * (dn + dv) + h * dv * d;
  int64_t params = v * d + dense * (attn + 3 * d * mlp + 2 * d) +
                   moe * (attn + d * e + (e + 1) * 3 * d * f + 2 * d) + d + d * v;
  g_assert_cmpint(params, ==, INT64_C(671026404352));
  g_assert_cmpint(m->params, ==, params);
  /* active weights a token: attention's products, the dense layers', the
   * router, 8 experts and the shared one, the head */
  int64_t attn_w = d * ql + ql * h * dqk + d * (kl + dr) + kl * h * (dn + dv) + h * dv * d;
  double active = (double)((dense + moe) * attn_w + dense * 3 * d * mlp +
                           moe * (d * e + (k + 1) * 3 * d * f) + d * v);
  double attn_core = (double)(dense + moe) * 2.0 * (double)s * (double)h * (double)(dqk + dv);
  double per_token = ps_model_flops_per_example(m) / 3.0 / (double)s;
  g_test_message("matmul FLOPs a token %.6e; 2 x active weights %.6e (%.1f B) + attention %.6e",
                 per_token, 2 * active, active / 1e9, attn_core);
  g_assert_cmpfloat(fabs(per_token - (2 * active + attn_core)), <=, 1e-9 * per_token);
  ps_model_free(m);
}

/* DeepSeek-V3 cut to one dense layer and one MoE layer on a tpu7x-8. */
#define SMALL                                                                                  \
  "model=deepseek3-671b", "topology=tpu7x-8", "global_batch=8", "strategy.mesh={\"fsdp\": 8}", \
      "model.layers[1].count=1", "model.layers[2].count=1"

/* Device 0's RECOMPUTE MXU FLOPs of the ops holding latent attention. */
static double attention_rerun(const char *const *ov)
{
  PsExperiment *e;
  PsPlan *p = experiment_compile("maxtext-tpu7x", ov, &e);
  const PsProgram *pr = ps_plan_program(p, 0);
  double f = 0;
  for (int i = 0; i < pr->n_ops; i++) {
    const PsOp *op = &pr->ops[i];
    gboolean latent = FALSE;
    for (int l = op->first; l <= op->last && op->kind == PS_OP_RECOMPUTE; l++)
      latent = latent || e->model->layers[l].kv_rank > 0;
    if (latent)
      f += op->mxu_flops;
  }
  ps_plan_free(p);
  ps_experiment_free(e);
  return f;
}

static void test_run(void)
{
  const char *keep[] = {SMALL, NULL};
  GError *error = NULL;
  PsExperiment *e = ps_experiment_load("maxtext-tpu7x", keep, &error);
  g_assert_no_error(error);
  PsSummary s = experiment_run(e);
  g_assert_cmpfloat(s.step_time_s, >, 0);
  /* the softmax in series with the flash kernels' products is part of the
   * MXU-bound time, at the vector unit's rate: twice the rate, half of it */
  g_assert_cmpfloat(s.compute_serial_s, >, 0);
  g_assert_cmpfloat(s.compute_serial_s, <, s.compute_mxu_s);
  const char *fast_vpu[] = {SMALL, "topology.chip.vpu_flops=140e12", NULL};
  PsExperiment *e2 = ps_experiment_load("maxtext-tpu7x", fast_vpu, &error);
  g_assert_no_error(error);
  PsSummary s2 = experiment_run(e2);
  g_test_message("softmax in series: %.6f s of %.6f s MXU-bound; %.6f s at twice the vector rate",
                 s.compute_serial_s, s.compute_mxu_s, s2.compute_serial_s);
  g_assert_cmpfloat(fabs(2 * s2.compute_serial_s - s.compute_serial_s), <=,
                    1e-9 * s.compute_serial_s);
  ps_summary_clear(&s2);
  ps_experiment_free(e2);
  ps_summary_clear(&s);
  ps_experiment_free(e);
  const char *none[] = {SMALL, "strategy.remat_keep=[]", NULL};
  const char *full[] = {SMALL, "strategy.rematerialize=full", "strategy.remat_keep=null", NULL};
  double r_keep = attention_rerun(keep), r_none = attention_rerun(none);
  double r_full = attention_rerun(full);
  g_test_message("recomputed MXU FLOPs with latent attention: keeping q, k, v and the context "
                 "%.4e, keeping nothing %.4e, full %.4e",
                 r_keep, r_none, r_full);
  g_assert_cmpfloat(r_keep, <, r_none);
  g_assert_cmpfloat(r_none, <=, r_full);
}

static void test_errors(void)
{
  static const struct {
    const char *layer, *want;
  } cases[] = {
      {"'heads': 2, 'dim': 16, 'q_lora_rank': 8, 'bias': false, 'flash': true", "q_lora_rank"},
      {"'heads': 2, 'dim': 16, 'kv_lora_rank': 8, 'bias': false", "set \"flash\": true"},
      {"'heads': 2, 'dim': 16, 'kv_lora_rank': 8, 'flash': true", "no biases"},
      {"'heads': 2, 'kv_heads': 1, 'dim': 16, 'kv_lora_rank': 8, 'bias': false, 'flash': true",
       "own keys and values"},
      {"'heads': 2, 'dim': 16, 'kv_lora_rank': 0, 'bias': false, 'flash': true", "kv_lora_rank"},
  };
  for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
    g_autofree char *layer = g_strdup_printf("{'type': 'attention', 'name': 'attn', %s}",
                                             cases[i].layer);
    model_layer_refused(layer, cases[i].want);
  }
  static const struct {
    const char *setting, *want;
  } plans[] = {
      {"strategy.mesh={\"fsdp\": 4, \"tensor\": 2}", "strategy.mesh.tensor"},
      {"strategy.mesh={\"fsdp\": 4, \"context\": 2}", "strategy.mesh.context"},
      {"numerics.enabled=true", "numerics"},
      {"attention_kernel=unfused", "attention_kernel"},
  };
  for (size_t i = 0; i < G_N_ELEMENTS(plans); i++) {
    const char *ov[] = {SMALL, plans[i].setting, NULL};
    GError *error = NULL;
    PsExperiment *e = ps_experiment_load("maxtext-tpu7x", ov, &error);
    PsPlan *p = e ? ps_strategy_compile(e, &error) : NULL;
    g_assert_null(p);
    g_assert_nonnull(error);
    g_test_message("%s", error->message);
    g_assert_nonnull(strstr(error->message, plans[i].want));
    g_clear_error(&error);
    if (e)
      ps_experiment_free(e);
  }
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/latent/closed-form", test_closed_form);
  g_test_add_func("/latent/deepseek", test_deepseek);
  g_test_add_func("/latent/run", test_run);
  g_test_add_func("/latent/errors", test_errors);
  return g_test_run();
}
