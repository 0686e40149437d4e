/* test_shard_vocab.c: the shard strategy's vocabulary tiling
 * (strategy.vocab_tiling, MaxText's num_vocab_tiling) against closed
 * forms, on LLaMA-2 7B (experiments/shard-llama2-7b.json: d_model 4096,
 * a vocabulary of 32000, sequences of 4096) fully sharded over the 32
 * devices of a tpu-v5p-64, one sequence a device.
 *
 * - /shard/vocab/compute: tiling in N tiles computes each tile's logits
 *   again in backward, so a device's matmul FLOPs grow by exactly the
 *   head's forward product, 2 S D V, where a policy kept its output
 *   (none, attention_only, minimal, custom), and not at all under full
 *   rematerialization,
 *   which recomputes it already;
 * - /shard/vocab/memory: the loss keeps one tile's logits, not all of
 *   them: the head group's forward leaves (1 - 1/N) S V activation
 *   elements fewer live, and the plan's peak falls by the same;
 * - /shard/vocab/bad-input: tiles that do not divide a device's positions
 *   and a model without a language-model head are refused naming
 *   strategy.vocab_tiling; the resolved strategy says the tiling;
 * - /shard/vocab/advice: Gemma 3 12B at two sequences of 32768 tokens a
 *   v6e chip does not fit, its logits (262144 a position, 32 GiB a chip)
 *   most of it: the refusal says to tile them; with 16 tiles it fits. */
#include "hw/cost.h"
#include "hw/topology.h"
#include "program/program.h"
#include "run/experiment.h"
#include "strategy/strategy.h"
#include "support/experiment.h"

#include <math.h>
#include <string.h>

static const char *llama = "experiments/shard-llama2-7b.json";

static PsPlan *compile(const char *const *ov, PsExperiment **out)
{
  return experiment_compile(llama, ov, out);
}

/* Device 0's matmul FLOPs over its FWD, BWD and RECOMPUTE ops. */
static double mxu_of(const PsPlan *p)
{
  const PsProgram *pr = ps_plan_program(p, 0);
  double mxu = 0;
  for (int i = 0; i < pr->n_ops; i++) {
    PsOpKind k = pr->ops[i].kind;
    if (k == PS_OP_FWD || k == PS_OP_BWD || k == PS_OP_RECOMPUTE)
      mxu += pr->ops[i].mxu_flops;
  }
  return mxu;
}

/* The index of the loss layer (the last) and its head (the one before). */
static int head_of(const PsModel *m)
{
  int h = m->n_layers - 2;
  g_assert_cmpint(m->layers[h].kind, ==, PS_LAYER_DENSE);
  g_assert_cmpint(m->layers[h + 1].input_from, ==, h);
  return h;
}

static void check_compute(const char *remat, gboolean kept)
{
  const char *one[] = {"global_batch=32", remat, NULL};
  const char *four[] = {"global_batch=32", remat, "strategy.vocab_tiling=4", NULL};
  PsExperiment *e1, *e4;
  PsPlan *p1 = compile(one, &e1), *p4 = compile(four, &e4);
  const PsModel *m = e1->model;
  const PsLayer *h = &m->layers[head_of(m)];
  /* one sequence a device: S x D by D x V, every side a multiple of v5p's
   * 128-wide MXU, so the padded product is the product */
  const double S = (double)h->in_shape[0], D = (double)h->in_shape[1], V = (double)h->units;
  g_assert_cmpfloat(V, ==, 32000);
  const double head = 2 * S * D * V;
  double d = mxu_of(p4) - mxu_of(p1);
  g_test_message("%s: extra %.6e, head forward %.6e", remat, d, head);
  g_assert_cmpfloat(fabs(d - (kept ? head : 0)), <=, 1e-9 * head);
  ps_plan_free(p1);
  ps_plan_free(p4);
  ps_experiment_free(e1);
  ps_experiment_free(e4);
}

static void test_compute(void)
{
  check_compute("strategy.rematerialize=\"none\"", TRUE);
  check_compute("strategy.rematerialize=\"attention_only\"", TRUE);
  check_compute("strategy.rematerialize=\"minimal\"", TRUE);
  check_compute("strategy.rematerialize=\"custom\"", TRUE);
  check_compute("strategy.rematerialize=\"full\"", FALSE);
}

/* The FWD op whose group holds layer l: its activation bytes. */
static int64_t fwd_act(const PsPlan *p, int l)
{
  const PsProgram *pr = ps_plan_program(p, 0);
  for (int i = 0; i < pr->n_ops; i++)
    if (pr->ops[i].kind == PS_OP_FWD && pr->ops[i].first <= l && l <= pr->ops[i].last)
      return pr->ops[i].act_bytes;
  g_assert_not_reached();
  return 0;
}

static void test_memory(void)
{
  const char *one[] = {"global_batch=32", "strategy.rematerialize=\"none\"", NULL};
  const char *eight[] = {"global_batch=32", "strategy.rematerialize=\"none\"",
                         "strategy.vocab_tiling=8", NULL};
  PsExperiment *e1, *e8;
  PsPlan *p1 = compile(one, &e1), *p8 = compile(eight, &e8);
  const PsModel *m = e1->model;
  const int h = head_of(m);
  const int64_t S = m->layers[h].in_shape[0], V = m->layers[h].units;
  const int64_t eb = ps_cost_act_bytes(e1->numerics.precision);
  const int64_t fewer = S * V * eb - S * V * eb / 8;
  g_assert_cmpint(fwd_act(p1, h + 1) - fwd_act(p8, h + 1), ==, fewer);
  const int64_t peak1 = ps_plan_program(p1, 0)->hbm_peak_bytes,
                peak8 = ps_plan_program(p8, 0)->hbm_peak_bytes;
  g_test_message("peak %" G_GINT64_FORMAT " -> %" G_GINT64_FORMAT ", logits %" G_GINT64_FORMAT,
                 peak1, peak8, S * V * eb);
  g_assert_cmpint(peak1 - peak8, ==, fewer);
  ps_plan_free(p1);
  ps_plan_free(p8);
  ps_experiment_free(e1);
  ps_experiment_free(e8);
}

static void expect_refused(const char *const *ov, const char *needle)
{
  GError *error = NULL;
  PsExperiment *e = ps_experiment_load(llama, ov, &error);
  if (e != NULL) {
    PsPlan *p = ps_strategy_compile(e, &error);
    g_assert_null(p);
    ps_experiment_free(e);
  }
  g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE);
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, "strategy.vocab_tiling"));
  g_assert_nonnull(strstr(error->message, needle));
  g_error_free(error);
}

static void test_bad_input(void)
{
  const char *odd[] = {"global_batch=32", "strategy.vocab_tiling=3", NULL};
  expect_refused(odd, "does not divide the 4096 positions");
  const char *mlp[] = {"model=mlp", "global_batch=32", "strategy.vocab_tiling=2", NULL};
  expect_refused(mlp, "no dense head");
  /* the resolved strategy says it */
  const char *four[] = {"global_batch=32", "strategy.vocab_tiling=4", NULL};
  PsExperiment *e;
  PsPlan *p = compile(four, &e);
  json_object *s = NULL, *t = NULL;
  g_assert_true(json_object_object_get_ex(e->resolved, "strategy", &s));
  g_assert_true(json_object_object_get_ex(s, "vocab_tiling", &t));
  g_assert_cmpint(json_object_get_int(t), ==, 4);
  ps_plan_free(p);
  ps_experiment_free(e);
}

static void test_advice(void)
{
  const char *ov[] = {"model=gemma3-12b", "topology=tpu-v6e-256", "global_batch=512",
                      "strategy.mesh.fsdp=256", "strategy.rematerialize=\"custom\"",
                      "strategy.remat_keep=[\"decoder_layer_input\"]", "strategy.remat_offload=[]",
                      NULL};
  GError *error = NULL;
  PsExperiment *e = ps_experiment_load("experiments/maxtext-tpu7x.json", ov, &error);
  g_assert_null(e); /* loading checks that the step fits */
  g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_DOES_NOT_FIT);
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, "tile the logits with strategy.vocab_tiling (32.0 GiB"));
  g_clear_error(&error);
  const char *tiled[] = {"model=gemma3-12b", "topology=tpu-v6e-256", "global_batch=512",
                         "strategy.mesh.fsdp=256", "strategy.rematerialize=\"custom\"",
                         "strategy.remat_keep=[\"decoder_layer_input\"]",
                         "strategy.remat_offload=[]", "strategy.vocab_tiling=16", NULL};
  PsPlan *p = experiment_compile("experiments/maxtext-tpu7x.json", tiled, &e);
  g_assert_cmpint(ps_plan_program(p, 0)->hbm_peak_bytes, <=,
                  ps_topology_device_hbm_bytes(e->topology));
  ps_plan_free(p);
  ps_experiment_free(e);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/shard/vocab/compute", test_compute);
  g_test_add_func("/shard/vocab/memory", test_memory);
  g_test_add_func("/shard/vocab/bad-input", test_bad_input);
  g_test_add_func("/shard/vocab/advice", test_advice);
  return g_test_run();
}
