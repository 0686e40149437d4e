/* test_moe.c: the mixture-of-experts layer (model/layer-moe.c) against
 * closed forms written here from the architecture.
 *
 * - /moe/closed-form: a block of E experts of F units, top k, over (S, D):
 *   params D E + 3 (E + shared) D F; matmul FLOPs 2 S (D E + 3 k D F +
 *   3 shared D F), whether or not E divides S k (no rounding to whole rows
 *   an expert: a short sequence costs its active experts only); the output
 *   keeps the input's shape;
 * - /moe/qwen3: models/qwen3-235b-a22b.json has the parameters its
 *   configuration gives (94 layers of grouped-query attention and 128
 *   experts of 1536, 8 a token), 235,093,610,496, and its matmul FLOPs a
 *   token are 2 x its active weights (the router, 8 experts, attention's
 *   projections, the head) plus attention's products;
 * - /moe/gpt-oss: models/gpt-oss-120b.json has the parameters of its
 *   closed form (36 layers, attention with biases, 128 experts of 2880, 4
 *   a token), 116,789,336,640, and 2 x 5.13 billion active weights a token
 *   plus attention's products over the keys a query sees (a window of 128
 *   in every other layer);
 * - /moe/run: the Qwen3 decoder, cut to 2 layers, fully sharded over a
 *   tpu7x-8 compiles and runs; each MoE layer's weights are gathered
 *   whole (fsdp), with its norm's, before its forward; fp8 quantization halves every one of
 *   its products' padded FLOPs (the router's and the experts'), and a
 *   tensor axis is refused naming strategy.mesh.tensor;
 * - /moe/remat: a full recompute runs the router and the experts' gate
 *   and up products again; remat_keep's mlpwi and mlpwo keep them;
 * - /moe/remat/offload: remat_offload's mlpwo sends the S k routed rows of
 *   D up to the host, whole, with or without decoder_layer_input;
 * - /moe/errors: top_k above experts, a rank-3 input, a missing key, and
 *   numerics on a model with a MoE layer (timing only): errors naming the
 *   file's path or key;
 * - /moe/advice: a layout over HBM is refused with advice that is well
 *   formed and does not name the tensor axis;
 * - /moe/capacity/closed-form: with a capacity factor cf (MaxText's
 *   dropping path) each expert has C = floor(max(ceil(S k / E) cf, cf))
 *   slots, computed here in integers; the products are the router's, the
 *   experts' three over all E C slots and the dispatch and combine (2 S E C
 *   D each); on a device, forward executes them once, backward twice but
 *   the dispatch once (its mask has no gradient); params do not change;
 * - /moe/capacity/mixtral: models/mixtral-8x7b.json has Mixtral's
 *   46,702,792,704 parameters and 1280 slots an expert (4096 positions, 2
 *   of 8 experts, cf 1.25); its model FLOPs (MFU) are the dropless
 *   layout's, capacity_factor set to 0 by --set;
 * - /moe/capacity/remat: a full recompute of two capacity layers runs each
 *   one's router, gate, up, down and dispatch again (the combine's backward
 *   reads the experts' outputs for the router's gradient), and the last
 *   one's combine too (the final norm reads its output);
 * - /moe/capacity/errors: a negative factor, a string, and a factor that
 *   leaves an expert no slot are refused naming the key and the fix;
 * - /moe/group-tiles: a dropless layer's grouped products walk their rows
 *   in each kernel's tiles t (group_tiles), and each of the E - 1 group
 *   boundaries lands inside a tile with probability (t - 1) / t: each
 *   pass's padded FLOPs exceed the same layer's at tiles of one row by
 *   2 ((m padded to t) - m + (E - 1)(t - 1)) K N a product, m = B S k, for
 *   every tile and batch tried; the tiles default to 128; the dropping
 *   layout has none;
 * - /moe/apart: dropless, the sort, gating and combination are kernels of
 *   their own, forward scores + 3 S k D + 3 S k F + S D elements and
 *   8 S E + 5 S k F + 2 S k D FLOPs a sequence, backward 2 S E + 3 S k D +
 *   5 S k F + 2 S D and 10 S E + 8 S k F + 4 S k D; the forward kernels'
 *   traffic adds up to the layer's; the dropping layout has no such kernel;
 *   on Qwen3's shapes the kernel is HBM-bound and its time adds to the
 *   products' (no overlap);
 * - /moe/group-tiles/errors: group_tiles with a capacity factor, an
 *   unknown key and a tile of 0 are refused naming the key. */
#include "common/json.h"
#include "hw/cost.h"
#include "model/layers.h"
#include "program/program.h"
#include "run/experiment.h"
#include "strategy/cost-options.h"
#include "strategy/strategy.h"
#include "support/experiment.h"

#include <math.h>
#include <string.h>

static PsModel *block(int64_t s, int64_t d, int64_t e, int64_t k, int64_t f, int64_t sh)
{
  g_autofree char *text = g_strdup_printf(
      "{'name': 'm', 'input': {'shape': [%" G_GINT64_FORMAT "], 'classes': 16, 'tokens': true},"
      " 'layers': [{'type': 'embedding', 'name': 'embed', 'vocab': 16, 'dim': %" G_GINT64_FORMAT
      "},"
      " {'type': 'moe', 'name': 'moe', 'experts': %" G_GINT64_FORMAT ", 'top_k': %" G_GINT64_FORMAT
      ", 'units': %" G_GINT64_FORMAT ", 'shared_experts': %" G_GINT64_FORMAT "},"
      " {'type': 'dense', 'name': 'head', 'units': 16}, {'type': 'softmax_xent', 'name': 'loss'}]}",
      s, d, e, k, f, sh);
  GError *error = NULL;
  PsModel *m = model_parse_quoted(text, &error);
  g_assert_no_error(error);
  return m;
}

/* A layer's matmul FLOPs a example, from its product list. */
static double mm_flops(const PsLayer *L)
{
  double f = 0;
  for (int j = 0; j < L->n_mm; j++)
    f += 2.0 * (double)L->mm[j].rows * (double)L->mm[j].k * (double)L->mm[j].n *
         (double)L->mm[j].count;
  return f;
}

static void check_block(int64_t s, int64_t d, int64_t e, int64_t k, int64_t f, int64_t sh)
{
  PsModel *m = block(s, d, e, k, f, sh);
  const PsLayer *L = &m->layers[1];
  g_assert_cmpint(L->kind, ==, PS_LAYER_MOE);
  g_assert_cmpint(L->params, ==, d * e + 3 * (e + sh) * d * f);
  g_assert_cmpint(L->out_rank, ==, 2);
  g_assert_cmpint(L->out_shape[0], ==, s);
  g_assert_cmpint(L->out_shape[1], ==, d);
  /* the router on every position, k experts' three products on each */
  double want = 2.0 * (double)s * (double)(d * e) + 2.0 * (double)(s * k) * 3.0 * (double)(d * f) +
                2.0 * (double)s * 3.0 * (double)(sh * d * f);
  g_test_message("S %" G_GINT64_FORMAT " E %" G_GINT64_FORMAT " k %" G_GINT64_FORMAT
                 ": matmul FLOPs %.6e, closed form %.6e",
                 s, e, k, mm_flops(L), want);
  g_assert_cmpfloat(fabs(mm_flops(L) - want), <=, 1e-12 * want);
  g_assert_cmpfloat(L->fwd_flops, >, mm_flops(L));
  g_assert_cmpfloat(L->bwd_flops, >, 2 * mm_flops(L));
  g_assert_cmpint(L->act_elems, >, 0);
  g_assert_false(m->numerics_supported);
  ps_model_free(m);
}

static void test_closed_form(void)
{
  check_block(64, 32, 8, 2, 48, 0);  /* 16 rows an expert */
  check_block(64, 32, 8, 2, 48, 1);  /* with a shared expert */
  check_block(10, 32, 8, 2, 48, 0);  /* 20 routed copies over 8 experts */
  check_block(1, 32, 128, 1, 48, 0); /* one position: one expert's work, not 128 */
  check_block(64, 32, 4, 4, 16, 2);  /* every expert for every position */
}

static void test_qwen3(void)
{
  const char *dir = g_getenv("PODSIM_DATA_DIR");
  g_autofree char *path =
      g_build_filename(dir && *dir ? dir : ".", "models", "qwen3-235b-a22b.json", NULL);
  GError *error = NULL;
  PsModel *m = ps_model_load_file(path, &error);
  g_assert_no_error(error);
  const int64_t L = 94, d = 4096, h = 64, kv = 4, dh = 128, e = 128, k = 8, f = 1536;
  const int64_t v = 151936, s = 4096, inner = h * dh;
  int64_t attn = d * (inner + 2 * kv * dh) + inner * d;
  int64_t moe = d * e + 3 * e * d * f;
  int64_t params = v * d + L * (attn + moe + 2 * d) + d + d * v;
  g_assert_cmpint(params, ==, INT64_C(235093610496));
  g_assert_cmpint(m->params, ==, params);
  /* active weights a token: the router, k experts, attention's
   * projections, the head (the embedding is looked up) */
  double active = (double)(L * (attn + d * e + 3 * k * d * f) + d * v);
  /* attention's two products, causal blocks not halved in the layer's
   * matmul list: 2 x 2 S inner FLOPs a token, a layer */
  double attn_core = (double)L * 4.0 * (double)s * (double)inner;
  double per_token = ps_model_flops_per_example(m) / 3.0 / (double)s;
  g_test_message("matmul FLOPs a token %.6e; 2 x active weights %.6e (%.1f B) + attention "
                 "%.6e", per_token, 2 * active, active / 1e9, attn_core);
  g_assert_cmpfloat(fabs(per_token - (2 * active + attn_core)), <=, 1e-9 * per_token);
  ps_model_free(m);
}

/* models/gpt-oss-120b.json: 36 layers alternating a causal window of 128
 * positions and full causal attention, 64 query and 8 key/value heads of
 * 64 (with biases), a mixture of 128 experts of 2880, 4 a token: the
 * parameters of its closed form (the model card's 116.8 billion less the
 * experts' biases and the attention sinks, which the file leaves out), and
 * the model FLOPs a token of 2 x the active weights plus attention's two
 * products over the keys a query may see (S in a full layer, the window in
 * a local one). */
static void test_gpt_oss(void)
{
  const char *dir = g_getenv("PODSIM_DATA_DIR");
  g_autofree char *path =
      g_build_filename(dir && *dir ? dir : ".", "models", "gpt-oss-120b.json", NULL);
  GError *error = NULL;
  PsModel *m = ps_model_load_file(path, &error);
  g_assert_no_error(error);
  const int64_t L = 36, d = 2880, h = 64, kv = 8, dh = 64, e = 128, k = 4, f = 2880;
  const int64_t v = 201088, s = 8192, w = 128, inner = h * dh, proj = inner + 2 * kv * dh;
  int64_t attn = d * proj + inner * d + proj + d;
  int64_t moe = d * e + 3 * e * d * f;
  int64_t params = v * d + L * (attn + moe + 2 * d) + d + d * v;
  g_assert_cmpint(params, ==, INT64_C(116789336640));
  g_assert_cmpint(m->params, ==, params);
  double active = (double)(L * (d * proj + inner * d + d * e + 3 * k * d * f) + d * v);
  double attn_core = (double)(L / 2) * 4.0 * (double)(s + w) * (double)inner;
  double per_token = ps_model_flops_per_example(m) / 3.0 / (double)s;
  g_test_message("matmul FLOPs a token %.6e; 2 x active weights %.6e (%.2f B) + attention "
                 "%.6e", per_token, 2 * active, active / 1e9, attn_core);
  g_assert_cmpfloat(fabs(per_token - (2 * active + attn_core)), <=, 1e-6 * per_token);
  ps_model_free(m);
}

/* The Qwen3 decoder cut to 2 layers on a tpu7x-8 (8 devices). */
static const char *const small[] = {"model=qwen3-235b-a22b", "topology=tpu7x-8",
                                    "global_batch=8", "strategy.mesh={\"fsdp\": 8}",
                                    "model.layers[1].count=2", NULL};

static void test_run(void)
{
  GError *error = NULL;
  PsExperiment *e = ps_experiment_load("maxtext-tpu7x", small, &error);
  g_assert_no_error(error);
  PsPlan *p = ps_strategy_compile(e, &error);
  g_assert_no_error(error);
  /* each MoE layer's weights gathered whole before its forward */
  int moe_gathers = 0;
  const PsProgram *pr = ps_plan_program(p, 0);
  for (int i = 0; i < pr->n_ops; i++) {
    if (pr->ops[i].kind != PS_OP_COLL_START)
      continue;
    const PsPlanColl *c = &p->colls[ps_plan_op_coll(p, 0, &pr->ops[i])];
    if (c->buffer == PS_BUFFER_PARAMS && c->layer >= 0 &&
        e->model->layers[c->layer].kind == PS_LAYER_MOE && strstr(pr->ops[i].name, "w fwd")) {
      /* the block's weights whole, with the norm before it (its 4096 gains) */
      g_assert_cmpint(c->count, ==, e->model->layers[c->layer].params + 4096);
      moe_gathers++;
    }
  }
  g_assert_cmpint(moe_gathers, ==, 2);
  ps_plan_free(p);
  PsSummary s = experiment_run(e);
  g_assert_cmpfloat(s.step_time_s, >, 0);
  ps_summary_clear(&s);

  /* fp8: every product of the block at half the padded FLOPs */
  PsCostOptions q, b;
  ps_strategy_cost_options(e, &b);
  q = b;
  q.quant_share = e->topology->peak_flops / e->topology->fp8_peak_flops;
  int l = 0;
  while (e->model->layers[l].kind != PS_LAYER_MOE)
    l++;
  for (int bwd = 0; bwd <= 1; bwd++) {
    PsOpCost cq, cb;
    ps_cost_op(e->topology, e->model, l, l, 1, &q, bwd, NULL, &cq);
    ps_cost_op(e->topology, e->model, l, l, 1, &b, bwd, NULL, &cb);
    g_assert_cmpfloat(fabs(cq.padded_flops - 0.5 * cb.padded_flops), <=,
                      1e-12 * cb.padded_flops);
  }
  ps_experiment_free(e);

  const char *tensor[] = {"model=qwen3-235b-a22b", "topology=tpu7x-8", "global_batch=8",
                          "strategy.mesh={\"fsdp\": 4, \"tensor\": 2}",
                          "model.layers[1].count=2", NULL};
  g_assert_null(ps_experiment_load("maxtext-tpu7x", tensor, &error));
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, "strategy.mesh.tensor"));
  g_clear_error(&error);
}

/* Device 0's RECOMPUTE matmul FLOPs of the ops that hold a MoE layer, and
 * its program's HBM peak. */
static void remat_figures(const char *const *ov, double *recompute, int64_t *peak)
{
  PsExperiment *e;
  PsPlan *p = experiment_compile("maxtext-tpu7x", ov, &e);
  const PsProgram *pr = ps_plan_program(p, 0);
  *recompute = 0;
  for (int i = 0; i < pr->n_ops; i++) {
    const PsOp *op = &pr->ops[i];
    gboolean moe = FALSE;
    for (int l = op->first; l <= op->last && op->kind == PS_OP_RECOMPUTE; l++)
      moe = moe || e->model->layers[l].kind == PS_LAYER_MOE;
    if (moe)
      *recompute += op->mxu_flops;
  }
  *peak = pr->hbm_peak_bytes;
  ps_plan_free(p);
  ps_experiment_free(e);
}

/* Rematerialization of a mixture of experts: its output only feeds the
 * residual add, but its backward reads its own scores and projections and
 * its experts' outputs (the router weights' gradient of the weighted sum),
 * so a full recompute runs the router and the experts' gate, up and down
 * products again: 2 x 4096 positions x 2 (D E + 3 k D F) FLOPs; and
 * remat_keep's mlpwi and mlpwo keep its products (more HBM, less rerun). */
static void test_remat(void)
{
  const char *full[] = {"model=qwen3-235b-a22b", "topology=tpu7x-8", "global_batch=8",
                        "strategy.mesh={\"fsdp\": 8}", "model.layers[1].count=2",
                        "strategy.rematerialize=full", "strategy.remat_keep=null", NULL};
  const char *input[] = {"model=qwen3-235b-a22b", "topology=tpu7x-8", "global_batch=8",
                         "strategy.mesh={\"fsdp\": 8}", "model.layers[1].count=2",
                         "strategy.remat_keep=[\"decoder_layer_input\"]", NULL};
  const char *kept[] = {"model=qwen3-235b-a22b", "topology=tpu7x-8", "global_batch=8",
                        "strategy.mesh={\"fsdp\": 8}", "model.layers[1].count=2",
                        "strategy.remat_keep=[\"decoder_layer_input\", \"mlpwi\", "
                        "\"mlpwo\"]",
                        NULL};
  double r_full, r_input, r_kept;
  int64_t p_full, p_input, p_kept;
  remat_figures(full, &r_full, &p_full);
  remat_figures(input, &r_input, &p_input);
  remat_figures(kept, &r_kept, &p_kept);
  const double d = 4096, e = 128, k = 8, f = 1536, tokens = 4096; /* one example a device */
  /* both layers' router, gate, up and down */
  double moe_rerun = 2.0 * 2.0 * tokens * (d * e + 3.0 * k * d * f);
  g_test_message("MoE recompute FLOPs: full %.4e (closed form %.4e), custom input %.4e, "
                 "custom mlpwi+mlpwo %.4e; HBM peak %" G_GINT64_FORMAT " / %" G_GINT64_FORMAT,
                 r_full, moe_rerun, r_input, r_kept, p_input, p_kept);
  g_assert_cmpfloat(fabs(r_full - moe_rerun), <=, 1e-9 * moe_rerun);
  g_assert_cmpfloat(r_kept, <, r_input);
  g_assert_cmpint(p_kept, >, p_input);
}

/* Device 0's bytes copied up to the host in a step. */
static double offloaded_up(const char *const *ov)
{
  PsExperiment *e;
  PsPlan *p = experiment_compile("maxtext-tpu7x", ov, &e);
  const PsProgram *pr = ps_plan_program(p, 0);
  double up = 0;
  for (int i = 0; i < pr->n_ops; i++)
    if (pr->ops[i].kind == PS_OP_COPY_START && pr->ops[i].to_host)
      up += pr->ops[i].bytes;
  ps_plan_free(p);
  ps_experiment_free(e);
  return up;
}

/* Offloading a mixture of experts' mlpwo (remat_offload, MaxText's
 * mlpwo=offload) sends its down product's output up whole: the S k routed
 * rows of D, which the combination's backward reads, not the S x D sum
 * the residual add takes (a dense block's down product, whose sum the
 * next layer's kept input holds, is not kept at all). Two layers of 4096
 * positions, 8 experts a position, d_model 4096, 2-byte activations; with
 * decoder_layer_input as well, the difference is the same. */
static void test_remat_offload(void)
{
  const char *wo[] = {"model=qwen3-235b-a22b", "topology=tpu7x-8", "global_batch=8",
                      "strategy.mesh={\"fsdp\": 8}", "model.layers[1].count=2",
                      "strategy.remat_offload=[\"mlpwo\"]", NULL};
  const char *input[] = {"model=qwen3-235b-a22b", "topology=tpu7x-8", "global_batch=8",
                         "strategy.mesh={\"fsdp\": 8}", "model.layers[1].count=2",
                         "strategy.remat_keep=[]",
                         "strategy.remat_offload=[\"decoder_layer_input\"]", NULL};
  const char *both[] = {"model=qwen3-235b-a22b", "topology=tpu7x-8", "global_batch=8",
                        "strategy.mesh={\"fsdp\": 8}", "model.layers[1].count=2",
                        "strategy.remat_keep=[]",
                        "strategy.remat_offload=[\"decoder_layer_input\", \"mlpwo\"]", NULL};
  const double layers = 2, s = 4096, k = 8, d = 4096, bytes = 2;
  const double routed = layers * s * k * d * bytes;
  double a = offloaded_up(wo), b = offloaded_up(input), c = offloaded_up(both);
  g_test_message("offloaded up: mlpwo %.0f, decoder_layer_input %.0f, both %.0f; closed form "
                 "of the routed rows %.0f",
                 a, b, c, routed);
  g_assert_cmpfloat(a, ==, routed);
  g_assert_cmpfloat(b, >, 0);
  g_assert_cmpfloat(c - b, ==, routed);
}

static void test_errors(void)
{
  static const struct {
    const char *layer, *want;
  } cases[] = {
      {"{'type': 'moe', 'name': 'x', 'experts': 4, 'top_k': 5, 'units': 8}", "top_k 5"},
      {"{'type': 'moe', 'name': 'x', 'experts': 4, 'units': 8}", "top_k"},
      {"{'type': 'moe', 'name': 'x', 'experts': 4, 'top_k': 2, 'units': 8, 'gated': true}",
       "gated"},
      {"{'type': 'moe', 'name': 'x', 'experts': 0, 'top_k': 1, 'units': 8}", "experts"},
  };
  for (size_t i = 0; i < G_N_ELEMENTS(cases); i++)
    model_layer_refused(cases[i].layer, cases[i].want);
  /* an image's (H, W, C) is rank 3 */
  GError *error = NULL;
  g_assert_null(model_parse_quoted("{'name': 'm', 'input': {'shape': [4, 4, 8], 'classes': 16},"
                      " 'layers': [{'type': 'moe', 'name': 'x', 'experts': 4, 'top_k': 2, "
                      "'units': 8}, {'type': 'flatten', 'name': 'f'}, {'type': 'dense', "
                      "'name': 'head', 'units': 16}, {'type': 'softmax_xent', 'name': 'loss'}]}",
                      &error));
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, "rank-1 or rank-2"));
  g_clear_error(&error);
}

/* A refusal for HBM names what to change, well formed, without the
 * tensor axis a MoE cannot use: for a model of rows (no context axis
 * either), at one and at two examples a device, on chips of 64 GiB
 * (one example needs about 73 GiB). */
static void test_advice(void)
{
  for (int batch = 32; batch <= 64; batch *= 2) {
    g_autofree char *gb = g_strdup_printf("global_batch=%d", batch);
    const char *ov[] = {"model=tests/data/good/models/moe-rows.json", gb,
                        "input.source=synthetic", "topology.chip.hbm_bytes=64GiB", NULL};
    GError *error = NULL;
    g_assert_null(ps_experiment_load("experiments/shard-llama2-7b.json", ov, &error));
    g_test_message("%s", error->message);
    const char *advice = strstr(error->message, "per device; ");
    g_assert_nonnull(advice);
    advice += strlen("per device; ");
    g_assert_cmpint(strlen(advice), >, 10);
    g_assert_null(strstr(error->message, "; ,"));
    g_assert_null(strstr(error->message, "strategy.mesh.tensor"));
    g_clear_error(&error);
  }
}

/* A block of E experts (and sh shared ones) with capacity factor cf over
 * (S, D). */
static PsModel *capacity_block_shared(int64_t s, int64_t d, int64_t e, int64_t k, int64_t f,
                                      int64_t sh, const char *cf, GError **error)
{
  g_autofree char *text = g_strdup_printf(
      "{'name': 'm', 'input': {'shape': [%" G_GINT64_FORMAT "], 'classes': 16, 'tokens': true},"
      " 'layers': [{'type': 'embedding', 'name': 'embed', 'vocab': 16, 'dim': %" G_GINT64_FORMAT
      "},"
      " {'type': 'moe', 'name': 'moe', 'experts': %" G_GINT64_FORMAT ", 'top_k': %" G_GINT64_FORMAT
      ", 'units': %" G_GINT64_FORMAT ", 'shared_experts': %" G_GINT64_FORMAT
      ", 'capacity_factor': %s},"
      " {'type': 'dense', 'name': 'head', 'units': 16}, {'type': 'softmax_xent', 'name': 'loss'}]}",
      s, d, e, k, f, sh, cf);
  return model_parse_quoted(text, error);
}

static PsModel *capacity_block(int64_t s, int64_t d, int64_t e, int64_t k, int64_t f,
                               const char *cf, GError **error)
{
  return capacity_block_shared(s, d, e, k, f, 0, cf, error);
}

/* MaxText's int(max(ceil(S k / E) cf, cf)) for cf = num / den, in
 * integers. */
static int64_t slots_of(int64_t s, int64_t k, int64_t e, int64_t num, int64_t den)
{
  int64_t per = (s * k + e - 1) / e;
  return MAX(per * num, num) / den;
}

static void test_capacity_closed_form(void)
{
  static const struct {
    int64_t s, e, k, sh, num, den;
  } cases[] = {
      {64, 8, 2, 0, 5, 4},   /* 16 an expert, 20 slots */
      {10, 8, 2, 0, 3, 2},   /* ceil(20 / 8) = 3, 4.5 slots: 4 */
      {64, 4, 4, 0, 1, 1},   /* every expert for every position: 64 slots */
      {1, 64, 1, 0, 2, 1},   /* one position: cf's 2 slots an expert, 64 experts */
      {96, 16, 1, 0, 25, 10}, /* 6 an expert, 15 slots */
      {64, 8, 2, 2, 5, 4},   /* with 2 shared experts: seven products */
      {64, 8, 2, 0, 1, 2},   /* a factor under 1: 8 slots for 16 an expert */
  };
  const int64_t d = 32, f = 48;
  GError *error = NULL;
  PsExperiment *ex = ps_experiment_load("maxtext-tpu7x", small, &error);
  g_assert_no_error(error);
  PsCostOptions o;
  ps_strategy_cost_options(ex, &o);
  o.rerun = NULL;
  for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
    int64_t s = cases[i].s, e = cases[i].e, k = cases[i].k, sh = cases[i].sh;
    g_autofree char *cf = g_strdup_printf("%g", (double)cases[i].num / (double)cases[i].den);
    PsModel *m = capacity_block_shared(s, d, e, k, f, sh, cf, &error);
    g_assert_no_error(error);
    const PsLayer *L = &m->layers[1];
    int64_t c = slots_of(s, k, e, cases[i].num, cases[i].den);
    g_assert_cmpint(L->capacity, ==, c);
    g_assert_cmpint(L->params, ==, d * e + 3 * (e + sh) * d * f);
    g_assert_cmpint(L->n_mm, ==, sh > 0 ? 7 : 5);
    /* the shared experts' products on every position count as the routed ones do */
    double router = 2.0 * (double)(s * d * e),
           experts = 6.0 * (double)(e * c * d * f) + 6.0 * (double)(s * sh * d * f);
    double move = 2.0 * (double)(s * e * c * d); /* the dispatch's, and the combine's */
    g_test_message("S %" G_GINT64_FORMAT " E %" G_GINT64_FORMAT " k %" G_GINT64_FORMAT
                   " cf %s: %" G_GINT64_FORMAT " slots, matmul FLOPs %.6e, closed form %.6e",
                   s, e, k, cf, c, mm_flops(L), router + experts + 2 * move);
    g_assert_cmpfloat(fabs(mm_flops(L) - (router + experts + 2 * move)), <=,
                      1e-12 * mm_flops(L));
    PsOpCost fw, bw;
    ps_cost_op(ex->topology, m, 1, 1, 1, &o, FALSE, NULL, &fw);
    ps_cost_op(ex->topology, m, 1, 1, 1, &o, TRUE, NULL, &bw);
    double want_bw = 2.0 * (router + experts + move) + move;
    g_assert_cmpfloat(fabs(fw.mxu_flops - (router + experts + 2 * move)), <=, 1e-9 * fw.mxu_flops);
    g_assert_cmpfloat(fabs(bw.mxu_flops - want_bw), <=, 1e-9 * want_bw);
    /* MFU's model FLOPs: the useful S k routed copies (and the shared
     * experts' positions), whatever the slots, under a factor of 1 too;
     * the same block dropless gives them */
    PsModel *dl = capacity_block_shared(s, d, e, k, f, sh, "0", &error);
    g_assert_no_error(error);
    double useful = 3.0 * (router + 6.0 * (double)(s * k * d * f) + 6.0 * (double)(s * sh * d * f));
    double head = 3.0 * 2.0 * (double)(s * d * 16);
    g_assert_cmpfloat(fabs(ps_model_flops_per_example(m) - (useful + head)), <=,
                      1e-9 * (useful + head));
    g_assert_cmpfloat(fabs(ps_model_flops_per_example(m) - ps_model_flops_per_example(dl)), <=,
                      1e-9 * (useful + head));
    ps_model_free(dl);
    ps_model_free(m);
  }
  ps_experiment_free(ex);
}

static void test_capacity_mixtral(void)
{
  const char *cap[] = {"model=mixtral-8x7b", "topology=tpu-v6e-8", "global_batch=8",
                       "strategy.mesh={\"fsdp\": 8}", "model.layers[1].count=2", NULL};
  const char *dropless[] = {"model=mixtral-8x7b", "topology=tpu-v6e-8", "global_batch=8",
                            "strategy.mesh={\"fsdp\": 8}", "model.layers[1].count=2",
                            "model.layers[1].body[1].body[1].capacity_factor=0", NULL};
  GError *error = NULL;
  const char *dir = g_getenv("PODSIM_DATA_DIR");
  g_autofree char *path =
      g_build_filename(dir && *dir ? dir : ".", "models", "mixtral-8x7b.json", NULL);
  PsModel *full = ps_model_load_file(path, &error);
  g_assert_no_error(error);
  const int64_t L = 32, d = 4096, h = 32, kv = 8, dh = 128, e = 8, f = 14336, v = 32000;
  int64_t attn = d * (h * dh + 2 * kv * dh) + h * dh * d;
  g_assert_cmpint(full->params, ==, v * d + L * (attn + d * e + 3 * e * d * f + 2 * d) + d + d * v);
  g_assert_cmpint(full->params, ==, INT64_C(46702792704));
  ps_model_free(full);

  PsExperiment *a = ps_experiment_load("maxtext-tpu7x", cap, &error);
  g_assert_no_error(error);
  PsExperiment *b = ps_experiment_load("maxtext-tpu7x", dropless, &error);
  g_assert_no_error(error);
  int l = 0;
  while (a->model->layers[l].kind != PS_LAYER_MOE)
    l++;
  g_assert_cmpint(a->model->layers[l].capacity, ==, 4096 * 2 / 8 * 5 / 4);
  g_assert_cmpint(b->model->layers[l].capacity, ==, 0);
  double fa = ps_model_flops_per_example(a->model), fb = ps_model_flops_per_example(b->model);
  g_test_message("model FLOPs an example: capacity %.6e, dropless %.6e; executed forward "
                 "matmul FLOPs of a block %.6e vs %.6e",
                 fa, fb, mm_flops(&a->model->layers[l]), mm_flops(&b->model->layers[l]));
  g_assert_cmpfloat(fabs(fa - fb), <=, 1e-12 * fb);
  g_assert_cmpfloat(mm_flops(&a->model->layers[l]), >, 1.2 * mm_flops(&b->model->layers[l]));
  /* the step does more work with slots, dispatch and combine */
  PsSummary sa = experiment_run(a), sb = experiment_run(b);
  g_test_message("step %.4f s with capacity, %.4f s dropless", sa.step_time_s, sb.step_time_s);
  g_assert_cmpfloat(sa.step_time_s, >, sb.step_time_s);
  ps_summary_clear(&sa);
  ps_summary_clear(&sb);
  ps_experiment_free(a);
  ps_experiment_free(b);
}

static void test_capacity_remat(void)
{
  const char *full[] = {"model=mixtral-8x7b", "topology=tpu-v6e-8", "global_batch=8",
                        "strategy.mesh={\"fsdp\": 8}", "model.layers[1].count=2",
                        "strategy.rematerialize=full", "strategy.remat_keep=null", NULL};
  double r;
  int64_t peak;
  remat_figures(full, &r, &peak);
  const double s = 4096, d = 4096, e = 8, k = 2, f = 14336, c = 1280;
  (void)k;
  double router = 2 * s * d * e, gate_up = 4 * e * c * d * f, down = 2 * e * c * f * d;
  double move = 2 * s * e * c * d;
  double want = 2 * (router + gate_up + down + move) + move;
  g_test_message("capacity MoE recompute FLOPs: %.6e, closed form %.6e", r, want);
  g_assert_cmpfloat(fabs(r - want), <=, 1e-9 * want);
}

static void test_capacity_errors(void)
{
  static const struct {
    int64_t s, e, k;
    const char *cf, *want[2];
  } cases[] = {
      {8, 4, 2, "-1", {"capacity_factor", ">= 0"}},
      {8, 4, 2, "'lots'", {"capacity_factor", "number"}},
      {1, 64, 1, "0.5", {"capacity_factor: 0.5", "use at least 1"}},
      {4096, 8, 2, "0.0001", {"capacity_factor: 0.0001 leaves", "use at least 0.000977"}},
      {90, 8, 3, "0.02", {"no slot", "use at least 0.029412"}}, /* 1 / ceil(270 / 8) = 1/34 */
  };
  for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
    GError *error = NULL;
    g_assert_null(capacity_block(cases[i].s, 32, cases[i].e, cases[i].k, 48, cases[i].cf, &error));
    g_assert_true(error->domain == PS_INPUT_ERROR);
    g_test_message("%s", error->message);
    for (int j = 0; j < 2; j++)
      g_assert_nonnull(strstr(error->message, cases[i].want[j]));
    /* the factor it suggests is accepted and gives each expert one slot */
    const char *at = strstr(error->message, "use at least ");
    if (at) {
      g_autofree char *least = g_strndup(at + strlen("use at least "),
                                         strcspn(at + strlen("use at least "), ", "));
      PsModel *m = capacity_block(cases[i].s, 32, cases[i].e, cases[i].k, 48, least, NULL);
      g_assert_nonnull(m);
      g_assert_cmpint(m->layers[1].capacity, ==, 1);
      ps_model_free(m);
    }
    g_error_free(error);
  }
}

/* A dropless block over (S, D) with group_tiles `tiles` (a JSON object's
 * members, or NULL). */
static PsModel *tiled_block(int64_t s, int64_t d, int64_t e, int64_t k, int64_t f,
                            const char *tiles, GError **error)
{
  g_autofree char *gt = tiles ? g_strdup_printf(", 'group_tiles': {%s}", tiles) : g_strdup("");
  g_autofree char *text = g_strdup_printf(
      "{'name': 'm', 'input': {'shape': [%" G_GINT64_FORMAT "], 'classes': 16, 'tokens': true},"
      " 'layers': [{'type': 'embedding', 'name': 'embed', 'vocab': 16, 'dim': %" G_GINT64_FORMAT
      "},"
      " {'type': 'moe', 'name': 'moe', 'experts': %" G_GINT64_FORMAT ", 'top_k': %" G_GINT64_FORMAT
      ", 'units': %" G_GINT64_FORMAT "%s},"
      " {'type': 'dense', 'name': 'head', 'units': 16}, {'type': 'softmax_xent', 'name': 'loss'}]}",
      s, d, e, k, f, gt);
  return model_parse_quoted(text, error);
}

static int64_t round_up(int64_t x, int64_t t)
{
  return (x + t - 1) / t * t;
}

/* The padded FLOPs of layer 1's forward (pass 0), input-gradient (1) and
 * weight-gradient (2) kernels at batch b. */
static void pass_flops(const PsExperiment *ex, const PsModel *m, int64_t b, const PsCostOptions *o,
                       double out[3])
{
  out[0] = out[1] = out[2] = 0;
  for (int bwd = 0; bwd <= 1; bwd++) {
    GArray *ks = g_array_new(FALSE, TRUE, sizeof(PsKernel));
    PsOpCost c;
    ps_cost_op(ex->topology, m, 1, 1, b, o, bwd, ks, &c);
    for (guint i = 0; i < ks->len; i++) {
      const PsKernel *k = &g_array_index(ks, PsKernel, i);
      int pass = !bwd ? 0 : strcmp(k->what, "wgrad") == 0 ? 2 : 1;
      out[pass] += k->padded_flops;
    }
    g_array_free(ks, TRUE);
  }
}

/* The small Qwen3 experiment and its cost options, every product run
 * once, none in fp8. */
static PsExperiment *small_bf16(PsCostOptions *o)
{
  GError *error = NULL;
  PsExperiment *ex = ps_experiment_load("maxtext-tpu7x", small, &error);
  g_assert_no_error(error);
  ps_strategy_cost_options(ex, o);
  o->rerun = NULL;
  o->quant_share = 0;
  return ex;
}

static void test_group_tiles(void)
{
  GError *error = NULL;
  PsCostOptions o;
  PsExperiment *ex = small_bf16(&o);
  /* sides that are multiples of the MXU (256 on v7): only rows pad */
  const int64_t s = 512, d = 256, e = 8, k = 2, f = 512;
  PsModel *one = tiled_block(s, d, e, k, f,
                             "'wi_fwd': 1, 'wi_dlhs': 1, 'wi_drhs': 1, 'wo_fwd': 1, "
                             "'wo_dlhs': 1, 'wo_drhs': 1",
                             &error);
  g_assert_no_error(error);
  static const int64_t tiles[][6] = {
      {256, 1024, 512, 512, 1024, 512}, /* tokamax's table for Qwen3's shapes */
      {128, 128, 128, 128, 128, 128},
      {3, 5, 7, 11, 13, 17},            /* tiles that divide no count of rows */
  };
  for (size_t t = 0; t <= G_N_ELEMENTS(tiles); t++) {
    const int64_t *tl = t < G_N_ELEMENTS(tiles) ? tiles[t] : tiles[1]; /* last: the default */
    g_autofree char *json =
        t < G_N_ELEMENTS(tiles)
            ? g_strdup_printf("'wi_fwd': %" G_GINT64_FORMAT ", 'wi_dlhs': %" G_GINT64_FORMAT
                              ", 'wi_drhs': %" G_GINT64_FORMAT ", 'wo_fwd': %" G_GINT64_FORMAT
                              ", 'wo_dlhs': %" G_GINT64_FORMAT ", 'wo_drhs': %" G_GINT64_FORMAT,
                              tl[0], tl[1], tl[2], tl[3], tl[4], tl[5])
            : NULL;
    PsModel *m = tiled_block(s, d, e, k, f, json, &error);
    g_assert_no_error(error);
    for (int64_t b = 1; b <= 3; b++) {
      double got[3], base[3];
      pass_flops(ex, m, b, &o, got);
      pass_flops(ex, one, b, &o, base);
      int64_t rows = b * s * k;
      for (int p = 0; p < 3; p++) {
        /* gate and up: K = D, N = F, two products; down: K = F, N = D */
        double extra_wi = (double)(round_up(rows, tl[p]) - rows + (e - 1) * (tl[p] - 1));
        double extra_wo = (double)(round_up(rows, tl[3 + p]) - rows + (e - 1) * (tl[3 + p] - 1));
        double want = 2.0 * extra_wi * (double)(d * f) * 2.0 + 2.0 * extra_wo * (double)(f * d);
        g_test_message("tiles %" G_GINT64_FORMAT "/%" G_GINT64_FORMAT " batch %" G_GINT64_FORMAT
                       " pass %d: %.6e more padded FLOPs, closed form %.6e",
                       tl[p], tl[3 + p], b, p, got[p] - base[p], want);
        g_assert_cmpfloat(fabs(got[p] - base[p] - want), <=, 1e-9 * got[p]);
        g_assert_cmpfloat(want, >, 0);
      }
    }
    ps_model_free(m);
  }
  ps_model_free(one);
  /* the dropping layout's products are dense: no groups */
  PsModel *cap = capacity_block(s, d, e, k, f, "1.25", &error);
  g_assert_no_error(error);
  for (int j = 0; j < cap->layers[1].n_mm; j++)
    g_assert_cmpint(cap->layers[1].mm[j].groups, ==, 0);
  ps_model_free(cap);
  ps_experiment_free(ex);
}

/* Layer 1's kernel named `what` at batch b, forward or backward. */
static gboolean find_kernel(const PsExperiment *ex, const PsModel *m, int l, int64_t b,
                            const PsCostOptions *o, gboolean bwd, const char *what, PsKernel *out,
                            double *total_bytes)
{
  GArray *ks = g_array_new(FALSE, TRUE, sizeof(PsKernel));
  PsOpCost c;
  ps_cost_op(ex->topology, m, l, l, b, o, bwd, ks, &c);
  gboolean found = FALSE;
  for (guint i = 0; i < ks->len; i++)
    if (strcmp(g_array_index(ks, PsKernel, i).what, what) == 0) {
      *out = g_array_index(ks, PsKernel, i);
      found = TRUE;
    }
  if (total_bytes)
    *total_bytes = c.bytes;
  g_array_free(ks, TRUE);
  return found;
}

static void test_apart(void)
{
  GError *error = NULL;
  PsCostOptions o;
  PsExperiment *ex = small_bf16(&o);
  const double eb = o.act_bytes;
  const int64_t s = 64, d = 32, e = 8, k = 2, f = 48;
  PsModel *m = tiled_block(s, d, e, k, f, NULL, &error);
  g_assert_no_error(error);
  const PsLayer *L = &m->layers[1];
  const double se = (double)(s * e), skd = (double)(s * k * d), skf = (double)(s * k * f),
               sd = (double)(s * d);
  for (int64_t b = 1; b <= 4; b *= 2) {
    PsKernel fw, bw;
    double fw_total = 0;
    g_assert_true(find_kernel(ex, m, 1, b, &o, FALSE, "sort, gating, combine", &fw, &fw_total));
    g_assert_true(find_kernel(ex, m, 1, b, &o, TRUE, "sort, gating, combine grad", &bw, NULL));
    double want_fb = eb * (double)b * (se + 3 * skd + 3 * skf + sd);
    double want_ff = (double)b * (8 * se + 5 * skf + 2 * skd);
    double want_bb = eb * (double)b * (2 * se + 3 * skd + 5 * skf + 2 * sd);
    double want_bf = (double)b * (10 * se + 8 * skf + 4 * skd);
    g_test_message("batch %" G_GINT64_FORMAT ": forward %.0f bytes %.0f FLOPs (closed form "
                   "%.0f, %.0f); backward %.0f, %.0f (%.0f, %.0f)",
                   b, fw.bytes, fw.vpu_flops, want_fb, want_ff, bw.bytes, bw.vpu_flops, want_bb,
                   want_bf);
    g_assert_cmpfloat(fabs(fw.bytes - want_fb), <=, 1e-9 * want_fb);
    g_assert_cmpfloat(fabs(fw.vpu_flops - want_ff), <=, 1e-9 * want_ff);
    g_assert_cmpfloat(fabs(bw.bytes - want_bb), <=, 1e-9 * want_bb);
    g_assert_cmpfloat(fabs(bw.vpu_flops - want_bf), <=, 1e-9 * want_bf);
    g_assert_cmpfloat(fw.mxu_flops, ==, 0);
    /* the forward kernels' traffic is the layer's: its per-sequence
     * traffic over the batch, its weights once */
    double layer = eb * ((L->fwd_bytes - (double)L->params) * (double)b + (double)L->params);
    g_assert_cmpfloat(fabs(fw_total - layer), <=, 1e-9 * layer);
  }
  ps_model_free(m);
  PsModel *cap = capacity_block(s, d, e, k, f, "1.25", &error);
  g_assert_no_error(error);
  PsKernel none;
  g_assert_false(find_kernel(ex, cap, 1, 1, &o, FALSE, "sort, gating, combine", &none, NULL));
  g_assert_false(find_kernel(ex, cap, 1, 1, &o, TRUE, "sort, gating, combine grad", &none, NULL));
  ps_model_free(cap);
  /* Qwen3's layer at 16 sequences a device: the fusions wait for HBM, and
   * the forward op takes the products' time plus theirs */
  int l = 0;
  while (ex->model->layers[l].kind != PS_LAYER_MOE)
    l++;
  PsKernel a, p;
  g_assert_true(find_kernel(ex, ex->model, l, 16, &o, FALSE, "sort, gating, combine", &a, NULL));
  g_assert_true(find_kernel(ex, ex->model, l, 16, &o, FALSE, "moe", &p, NULL));
  g_assert_cmpint(a.bound, ==, PS_BOUND_HBM);
  g_assert_cmpint(p.bound, ==, PS_BOUND_MXU);
  PsOpCost c;
  ps_cost_op(ex->topology, ex->model, l, l, 16, &o, FALSE, NULL, &c);
  g_test_message("Qwen3 layer, 16 sequences: products %.3f ms, sort, gating, combine %.3f ms, "
                 "op %.3f ms",
                 p.busy_s * 1e3, a.busy_s * 1e3, ps_time_to_s(c.time) * 1e3);
  g_assert_cmpfloat(ps_time_to_s(c.time), >=, (p.busy_s + a.busy_s) * (1 - 1e-9));
  ps_experiment_free(ex);
}

static void test_group_tiles_errors(void)
{
  static const struct {
    const char *tiles, *cf, *want[2];
  } cases[] = {
      {"'wi_fwd': 256", "1.25", {"group_tiles", "capacity_factor"}},
      {"'wi_bwd': 256", "0", {"group_tiles", "wi_bwd"}},
      {"'wo_drhs': 0", "0", {"group_tiles.wo_drhs", ""}},
  };
  for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
    g_autofree char *text = g_strdup_printf(
        "{'name': 'm', 'input': {'shape': [8], 'classes': 16, 'tokens': true},"
        " 'layers': [{'type': 'embedding', 'name': 'embed', 'vocab': 16, 'dim': 8},"
        " {'type': 'moe', 'name': 'x', 'experts': 4, 'top_k': 2, 'units': 8,"
        " 'capacity_factor': %s, 'group_tiles': {%s}},"
        " {'type': 'dense', 'name': 'head', 'units': 16}, {'type': 'softmax_xent', 'name': "
        "'loss'}]}",
        cases[i].cf, cases[i].tiles);
    GError *error = NULL;
    g_assert_null(model_parse_quoted(text, &error));
    g_assert_true(error->domain == PS_INPUT_ERROR);
    g_test_message("%s", error->message);
    for (int j = 0; j < 2; j++)
      g_assert_nonnull(strstr(error->message, cases[i].want[j]));
    g_error_free(error);
  }
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/moe/closed-form", test_closed_form);
  g_test_add_func("/moe/qwen3", test_qwen3);
  g_test_add_func("/moe/gpt-oss", test_gpt_oss);
  g_test_add_func("/moe/run", test_run);
  g_test_add_func("/moe/remat", test_remat);
  g_test_add_func("/moe/remat/offload", test_remat_offload);
  g_test_add_func("/moe/errors", test_errors);
  g_test_add_func("/moe/advice", test_advice);
  g_test_add_func("/moe/capacity/closed-form", test_capacity_closed_form);
  g_test_add_func("/moe/capacity/mixtral", test_capacity_mixtral);
  g_test_add_func("/moe/capacity/remat", test_capacity_remat);
  g_test_add_func("/moe/capacity/errors", test_capacity_errors);
  g_test_add_func("/moe/group-tiles", test_group_tiles);
  g_test_add_func("/moe/apart", test_apart);
  g_test_add_func("/moe/group-tiles/errors", test_group_tiles_errors);
  return g_test_run();
}
