/* test_shard_context.c: the shard strategy's context axis (context
 * parallelism: each example's positions split over the axis, keys and
 * values gathered for attention) against closed forms, on LLaMA-2 7B
 * (experiments/shard-llama2-7b.json: 32 heads of 128, sequences of 4096)
 * on tpu-v5p-64 (32 devices).
 *
 * - /shard/context/compute: fsdp 4 x context 8 at global batch 64 (16
 *   examples a device, 512 of the 4096 positions of each) runs, on each
 *   device, exactly the FLOPs and matmul FLOPs of fsdp 32 at the same
 *   batch (2 whole examples a device): the same tokens, attention's
 *   products included, since C-th of the queries against every key is
 *   C-th of the scores;
 * - /shard/context/kv: each attention layer's keys and values are
 *   all-gathered over the context group (C members differing only in their
 *   context coordinate) before its forward, again before its backward
 *   when rematerialized, and their gradients reduce-scattered after it:
 *   3 collectives a layer (2 without rematerialization), each of
 *   2 x examples x S x kv_heads x head_dim elements;
 * - /shard/context/weights: the weights are sharded over fsdp x context:
 *   their all-gathers and their gradients' reduce-scatters run over F x C
 *   devices of one data row, and the update's shard is 1 / (F x C) of the
 *   parameters (the HBM of weights, gradients and slots as fsdp F x C's);
 * - /shard/context/memory: with the same tokens a device, fsdp 8 x
 *   context 4 keeps fsdp 32's activations plus at most two layers'
 *   gathered keys and values, under full, attention-only and minimal
 *   rematerialization;
 * - /shard/context/pipeline: stages of tensor 4 x context 2 send each
 *   device's activations to the device of the next stage with the same
 *   context and tensor coordinates, every SEND meeting its RECV;
 * - /shard/context/run: a run takes part in those 96 collectives a
 *   device, busy for part of the step; a forward gather of keys and values
 *   starts before the next layer's weights are prefetched, so it does not
 *   queue behind them;
 * - /shard/context/bad-input: a model without token sequences, a context
 *   that does not divide the sequence, a model that pools its positions,
 *   context with the sequence axis,
 *   numerics on, and a mesh_order naming context among four: each a
 *   PS_INPUT_ERROR naming its key; a mesh_order of the four older names
 *   puts context just before tensor;
 * - /shard/context/ring/program: with strategy.context_strategy "ring"
 *   (ring attention) device 0 runs no collective on the context axis; each
 *   attention layer's forward, recomputed forward and backward run as C
 *   parts of 1/C of its work each (the same FLOPs as the all-gather's
 *   plan), with C - 1 transfers between them, each a block of the keys and
 *   values (2 x examples x S / C x kv_heads x head_dim elements, twice that
 *   backward with their gradients), sent to the next device of its context
 *   group and received from the one before;
 * - /shard/context/ring/run: on sequences of 32768 the ring's transfers
 *   hide under the parts (less exposed communication and a shorter step
 *   than the all-gathers', and no higher an HBM peak); with the ICI 1000
 *   times slower they show, as collective time, never as a pipeline bubble;
 * - /shard/context/ring/closed-form: a one-layer decoder of 65536 tokens
 *   and one narrow head, context 4 on four chips in a ring (x wraps), the
 *   ICI at 100 MB/s, no prefetch (each layer's weights gathered after the
 *   ring before it is done, not queued behind its blocks on the links):
 *   every block passes in far longer than its part
 *   computes, and each ring step's wait is the closed form of an
 *   uncontended transfer, max(0, bytes / bandwidth + latency - the part's
 *   time), summed over device 0's steps (forward, recomputed forward and
 *   backward): the run's collective time is that sum plus at most the
 *   weights' fsdp collectives' busy time (under 2% of it);
 * - /shard/context/ring/bad-input: a ring without a context axis, with
 *   collective matmul, and an unknown strategy, each naming
 *   strategy.context_strategy. */
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

/* Device 0's compute: FLOPs and matmul FLOPs of its FWD, BWD and
 * RECOMPUTE ops. */
static void compute_of(const PsPlan *p, double *flops, double *mxu)
{
  const PsProgram *pr = ps_plan_program(p, 0);
  *flops = *mxu = 0;
  for (int i = 0; i < pr->n_ops; i++) {
    PsOpKind k = pr->ops[i].kind;
    if (k == PS_OP_FWD || k == PS_OP_BWD || k == PS_OP_RECOMPUTE) {
      *flops += pr->ops[i].flops;
      *mxu += pr->ops[i].mxu_flops;
    }
  }
}

/* See the file's comment: equal tokens a device, so equal FLOPs. */
static void test_compute(void)
{
  const char *ctx[] = {"strategy.mesh={\"fsdp\": 4, \"context\": 8}", NULL};
  PsExperiment *ec, *ef;
  PsPlan *pc = compile(ctx, &ec), *pf = compile(NULL, &ef);
  double fc, mc, ff, mf;
  compute_of(pc, &fc, &mc);
  compute_of(pf, &ff, &mf);
  g_test_message("FLOPs: context %.6e fsdp %.6e; matmul %.6e %.6e", fc, ff, mc, mf);
  g_assert_cmpfloat(ff, >, 0);
  g_assert_cmpfloat(fabs(fc - ff), <=, 1e-9 * ff);
  g_assert_cmpfloat(fabs(mc - mf), <=, 1e-9 * mf);
  ps_plan_free(pc);
  ps_plan_free(pf);
  ps_experiment_free(ec);
  ps_experiment_free(ef);
}

/* Device 0's collectives along the context axis: how many, and the first
 * one's op, elements and members. */
static void check_kv(const char *remat, int per_layer)
{
  const char *ov[] = {"strategy.mesh={\"fsdp\": 8, \"context\": 4}", "global_batch=16", remat,
                      NULL};
  PsExperiment *e;
  PsPlan *p = compile(ov, &e);
  const PsModel *m = e->model;
  int heads_layers = 0;
  int64_t kv = 0;
  for (int i = 0; i < m->n_layers; i++)
    if (m->layers[i].heads > 0 && m->layers[i].kind != PS_LAYER_EMBEDDING) {
      heads_layers++;
      int64_t dh = m->layers[i].dim / m->layers[i].heads;
      /* 16 / 8 = 2 examples a device, every position of each */
      kv = 2 * 2 * m->layers[i].in_shape[0] * m->layers[i].kv_heads * dh;
    }
  g_assert_cmpint(heads_layers, ==, 32);
  const PsProgram *pr = ps_plan_program(p, 0);
  int gathers = 0, scatters = 0;
  for (int i = 0; i < pr->n_ops; i++) {
    if (pr->ops[i].kind != PS_OP_COLL_START)
      continue;
    const PsPlanColl *pc = &p->colls[ps_plan_op_coll(p, 0, &pr->ops[i])];
    if (pc->axis != PS_AXIS_CONTEXT)
      continue;
    g_assert_cmpint(pc->count, ==, kv);
    g_assert_cmpint(pc->n_members, ==, 4);
    for (int k = 0; k < pc->n_members; k++) {
      int d = pc->members[k];
      g_assert_cmpint(ps_plan_coord(p, d, PS_AXIS_CONTEXT), ==, k);
      g_assert_cmpint(ps_plan_coord(p, d, PS_AXIS_FSDP), ==, ps_plan_coord(p, 0, PS_AXIS_FSDP));
    }
    gathers += pc->op == PS_COLL_ALL_GATHER && pc->buffer == PS_BUFFER_ACTIVATIONS;
    scatters += pc->op == PS_COLL_REDUCE_SCATTER && pc->buffer == PS_BUFFER_ACT_GRADS;
  }
  g_test_message("%s: %d all-gathers, %d reduce-scatters of %" G_GINT64_FORMAT " elements",
                 remat, gathers, scatters, kv);
  g_assert_cmpint(scatters, ==, heads_layers);
  g_assert_cmpint(gathers + scatters, ==, per_layer * heads_layers);
  ps_plan_free(p);
  ps_experiment_free(e);
}

static void test_kv(void)
{
  check_kv("strategy.rematerialize=full", 3);
  check_kv("strategy.rematerialize=none", 2);
}

static void test_weights(void)
{
  const char *ctx[] = {"strategy.mesh={\"fsdp\": 4, \"context\": 8}", NULL};
  PsExperiment *ec, *ef;
  PsPlan *pc = compile(ctx, &ec), *pf = compile(NULL, &ef);
  const PsProgram *pr = ps_plan_program(pc, 0);
  int gathers = 0, scatters = 0;
  for (int i = 0; i < pr->n_ops; i++) {
    if (pr->ops[i].kind != PS_OP_COLL_START)
      continue;
    const PsPlanColl *c = &pc->colls[ps_plan_op_coll(pc, 0, &pr->ops[i])];
    if (c->buffer != PS_BUFFER_PARAMS && c->buffer != PS_BUFFER_GRADS)
      continue;
    g_assert_cmpint(c->n_members, ==, 32);
    for (int k = 0; k < c->n_members; k++)
      g_assert_cmpint(ps_plan_coord(pc, c->members[k], PS_AXIS_DATA), ==, 0);
    gathers += c->op == PS_COLL_ALL_GATHER;
    scatters += c->op == PS_COLL_REDUCE_SCATTER;
  }
  g_assert_cmpint(gathers, >, 0);
  g_assert_cmpint(scatters, >, 0);
  /* weights, gradients and slots as fsdp 32's, to the byte */
  g_test_message("static HBM: context %" G_GINT64_FORMAT ", fsdp %" G_GINT64_FORMAT,
                 pr->hbm_static_bytes, ps_plan_program(pf, 0)->hbm_static_bytes);
  g_assert_cmpint(pr->hbm_static_bytes, ==, ps_plan_program(pf, 0)->hbm_static_bytes);
  ps_plan_free(pc);
  ps_plan_free(pf);
  ps_experiment_free(ec);
  ps_experiment_free(ef);
}

/* fsdp 32 at global batch 32 holds one example a device; fsdp 8 x context
 * 4 at the same batch holds four, a quarter of the positions of each: the
 * same tokens.  Its live activations (the peak over the static bytes) are
 * fsdp 32's plus the gathered keys and values of the layer at the peak:
 * at least fsdp's, and no more than two layers' gathers above (backward's
 * gather of the keys and values, and forward's still held at most). */
static void check_memory(const char *remat)
{
  const char *f[] = {"global_batch=32", remat, NULL};
  const char *c[] = {"global_batch=32", "strategy.mesh={\"fsdp\": 8, \"context\": 4}", remat,
                     NULL};
  PsExperiment *ef, *ec;
  PsPlan *pf = compile(f, &ef), *pc = compile(c, &ec);
  const PsProgram *a = ps_plan_program(pf, 0), *b = ps_plan_program(pc, 0);
  int64_t act_f = a->hbm_peak_bytes - a->hbm_static_bytes,
          act_c = b->hbm_peak_bytes - b->hbm_static_bytes;
  /* one layer's gathered keys and values beyond the device's quarter:
   * 2 (K, V) x 4 examples x 4096 positions x 4096 (32 heads of 128) x
   * 2 bytes x 3 / 4 */
  int64_t extra = INT64_C(2) * 4 * 4096 * 4096 * 2 / 4 * 3;
  g_test_message("%s: activations: fsdp %" G_GINT64_FORMAT ", context %" G_GINT64_FORMAT
                 ", one layer's gathered keys and values %" G_GINT64_FORMAT,
                 remat, act_f, act_c, extra);
  g_assert_cmpint(act_c, >=, act_f);
  g_assert_cmpint(act_c, <=, act_f + 2 * extra);
  ps_plan_free(pf);
  ps_plan_free(pc);
  ps_experiment_free(ef);
  ps_experiment_free(ec);
}

static void test_memory(void)
{
  check_memory("strategy.rematerialize=full");
  check_memory("strategy.rematerialize=attention_only"); /* the scores: S / C rows by S keys */
  check_memory("strategy.rematerialize=minimal");
}

/* Stages with a context axis: every SEND meets its RECV (ps_plan_validate)
 * at the device of the next stage with the same context coordinate. */
static void test_pipeline(void)
{
  const char *ov[] = {"strategy.mesh={\"fsdp\": 1, \"tensor\": 4, \"context\": 2, "
                      "\"stage\": 4}",
                      NULL};
  GError *error = NULL;
  PsExperiment *e = ps_experiment_load("experiments/shard-pipe-llama2-7b.json", ov, &error);
  g_assert_no_error(error);
  PsPlan *p = ps_strategy_compile(e, &error);
  g_assert_no_error(error);
  g_assert_true(ps_plan_validate(p, &error));
  int sends = 0;
  for (int d = 0; d < p->n_devices; d++) {
    const PsProgram *pr = ps_plan_program(p, d);
    for (int i = 0; i < pr->n_ops; i++)
      if (pr->ops[i].kind == PS_OP_SEND) {
        int q = pr->ops[i].peer;
        g_assert_cmpint(ps_plan_coord(p, q, PS_AXIS_CONTEXT), ==,
                        ps_plan_coord(p, d, PS_AXIS_CONTEXT));
        g_assert_cmpint(ps_plan_coord(p, q, PS_AXIS_TENSOR), ==,
                        ps_plan_coord(p, d, PS_AXIS_TENSOR));
        sends++;
      }
  }
  g_assert_cmpint(sends, >, 0);
  ps_plan_free(p);
  ps_experiment_free(e);
}

/* A run: each device takes part in 3 context collectives a layer (96),
 * busy for some of the step, exposed no longer than the step. */
static void test_run(void)
{
  const char *ov[] = {"strategy.mesh={\"fsdp\": 8, \"context\": 4}", "global_batch=16",
                      "steps=2", "collective.on_core=[]", NULL};
  PsExperiment *e = experiment_load(llama, ov);
  PsSummary s = experiment_run(e);
  g_test_message("step %.6f s; context axis: %.1f collectives a device, busy %.6f s, exposed "
                 "%.6f s", s.step_time_s, s.axis_colls_per_device[PS_AXIS_CONTEXT],
                 s.axis_busy_s[PS_AXIS_CONTEXT], s.axis_exposed_s[PS_AXIS_CONTEXT]);
  g_assert_cmpfloat(s.axis_colls_per_device[PS_AXIS_CONTEXT], ==, 96.0);
  g_assert_cmpfloat(s.axis_busy_s[PS_AXIS_CONTEXT], >, 0);
  g_assert_cmpfloat(s.axis_exposed_s[PS_AXIS_CONTEXT], >=, 0);
  g_assert_cmpfloat(s.axis_exposed_s[PS_AXIS_CONTEXT], <, s.step_time_s);
  /* the keys' forward gathers start before the next layer's weights are
   * prefetched (an all-gather started after that prefetch would queue
   * behind it): no fsdp weight gather starts between the forward op before
   * a keys' gather and the gather */
  GError *error = NULL;
  PsPlan *p = ps_strategy_compile(e, &error);
  g_assert_no_error(error);
  const PsProgram *pr = ps_plan_program(p, 0);
  int weights_since_fwd = 0, kv = 0;
  for (int i = 0; i < pr->n_ops; i++) {
    const PsOp *op = &pr->ops[i];
    if (op->kind == PS_OP_FWD)
      weights_since_fwd = 0;
    if (op->kind != PS_OP_COLL_START)
      continue;
    const PsPlanColl *pc = &p->colls[ps_plan_op_coll(p, 0, op)];
    if (pc->buffer == PS_BUFFER_PARAMS && strstr(op->name, "w fwd"))
      weights_since_fwd++;
    if (pc->axis == PS_AXIS_CONTEXT && strstr(op->name, "k,v fwd")) {
      g_assert_cmpint(weights_since_fwd, ==, 0);
      kv++;
    }
  }
  g_assert_cmpint(kv, ==, 32);
  ps_plan_free(p);
  ps_summary_clear(&s);
  ps_experiment_free(e);
}

static void bad(const char *path, const char *const *ov, const char *key)
{
  GError *error = NULL;
  PsExperiment *e = ps_experiment_load(path, ov, &error);
  if (e) {
    PsPlan *p = ps_strategy_compile(e, &error);
    g_assert_null(p);
    ps_experiment_free(e);
  }
  g_assert_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE);
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, key));
  g_error_free(error);
}

static void test_bad_input(void)
{
  const char *resnet[] = {"model=resnet50", "global_batch=64",
                          "strategy.mesh={\"fsdp\": 8, \"context\": 4}", NULL};
  bad(llama, resnet, "strategy.mesh.context");
  const char *pooled[] = {"model=tests/data/good/models/token-pooled.json", "global_batch=32",
                          "strategy.mesh={\"fsdp\": 8, \"context\": 4}", NULL};
  bad(llama, pooled, "layer 'pool'");
  const char *odd[] = {"model.input.shape=[4100]", "strategy.mesh={\"fsdp\": 1, \"context\": 32}",
                       NULL};
  bad(llama, odd, "strategy.mesh.context");
  const char *seq[] = {"strategy.mesh={\"fsdp\": 4, \"tensor\": 2, \"sequence\": 2, "
                       "\"context\": 2}",
                       NULL};
  bad(llama, seq, "strategy.mesh.context");
  const char *num[] = {"strategy.mesh={\"fsdp\": 2, \"context\": 2}", NULL};
  bad("experiments/char-decoder-fsdp2-v4-8.json", num,
      "numerics.enabled: true is not yet supported with a context axis");
  const char *order4[] = {"strategy.mesh_order=[\"data\", \"fsdp\", \"context\", \"tensor\"]",
                          NULL};
  bad(llama, order4, "strategy.mesh_order");

  /* the four older names: context goes just before tensor */
  const char *older[] = {"strategy.mesh_order=[\"fsdp\", \"data\", \"sequence\", \"tensor\"]",
                         NULL};
  PsExperiment *e;
  PsPlan *p = compile(older, &e);
  json_object *s = NULL, *o = NULL;
  g_assert_true(json_object_object_get_ex(e->resolved, "strategy", &s));
  g_assert_true(json_object_object_get_ex(s, "mesh_order", &o));
  g_assert_cmpstr(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN), ==,
                  "[\"fsdp\",\"data\",\"sequence\",\"context\",\"tensor\"]");
  ps_plan_free(p);
  ps_experiment_free(e);
}

static const char *const ring_ov[] = {"strategy.mesh={\"fsdp\": 8, \"context\": 4}",
                                      "global_batch=16", "strategy.rematerialize=full",
                                      "strategy.context_strategy=ring", NULL};

static void test_ring_program(void)
{
  PsExperiment *e, *eg;
  PsPlan *p = compile(ring_ov, &e);
  const char *gather_ov[] = {ring_ov[0], ring_ov[1], ring_ov[2], NULL};
  PsPlan *pg = compile(gather_ov, &eg);
  const PsModel *m = e->model;
  int64_t kv = 0;
  int layers = 0;
  for (int i = 0; i < m->n_layers; i++)
    if (m->layers[i].heads > 0 && m->layers[i].kind != PS_LAYER_EMBEDDING) {
      int64_t dh = m->layers[i].dim / m->layers[i].heads;
      /* 2 examples a device, a quarter of the positions each block */
      kv = 2 * 2 * m->layers[i].in_shape[0] / 4 * m->layers[i].kv_heads * dh;
      layers++;
    }
  const double block = (double)kv * 2; /* bf16 */
  const PsProgram *pr = ps_plan_program(p, 0);
  int sends[3] = {0}, recvs = 0, parts = 0, colls = 0;
  for (int i = 0; i < pr->n_ops; i++) {
    const PsOp *op = &pr->ops[i];
    if (op->kind == PS_OP_COLL_START)
      colls += p->colls[ps_plan_op_coll(p, 0, op)].axis == PS_AXIS_CONTEXT;
    if (op->ctx_ring && (op->kind == PS_OP_FWD || op->kind == PS_OP_BWD ||
                         op->kind == PS_OP_RECOMPUTE)) {
      g_assert_cmpint(op->parts, ==, 4);
      parts++;
    }
    if (op->kind == PS_OP_SEND && op->ctx_ring) {
      /* the next device of device 0's context group: same fsdp
       * coordinate, context coordinate + 1 */
      g_assert_cmpint(ps_plan_coord(p, op->peer, PS_AXIS_CONTEXT), ==,
                      (ps_plan_coord(p, 0, PS_AXIS_CONTEXT) + 1) % 4);
      g_assert_cmpint(ps_plan_coord(p, op->peer, PS_AXIS_FSDP), ==,
                      ps_plan_coord(p, 0, PS_AXIS_FSDP));
      g_assert_cmpfloat(op->bytes, ==, op->ring_bwd ? 2 * block : block);
      sends[op->ring_bwd ? 2 : pr->ops[i + 1].kind == PS_OP_RECOMPUTE ? 1 : 0]++;
    }
    if (op->kind == PS_OP_RECV && op->ctx_ring) {
      g_assert_cmpint(ps_plan_coord(p, op->peer, PS_AXIS_CONTEXT), ==,
                      (ps_plan_coord(p, 0, PS_AXIS_CONTEXT) + 3) % 4);
      recvs++;
    }
  }
  g_test_message("ring: %d context collectives, %d parts, %d + %d + %d sends of %.0f and %.0f "
                 "bytes, %d receives",
                 colls, parts, sends[0], sends[1], sends[2], block, 2 * block, recvs);
  g_assert_cmpint(layers, ==, 32);
  g_assert_cmpint(colls, ==, 0);
  g_assert_cmpint(parts, ==, 3 * 4 * layers);
  g_assert_cmpint(sends[0], ==, 3 * layers);
  g_assert_cmpint(sends[1], ==, 3 * layers);
  g_assert_cmpint(sends[2], ==, 3 * layers);
  g_assert_cmpint(recvs, ==, 9 * layers);
  double fr, mr, fg, mg;
  compute_of(p, &fr, &mr);
  compute_of(pg, &fg, &mg);
  g_assert_cmpfloat(fabs(fr - fg), <=, 1e-9 * fg);
  g_assert_cmpfloat(fabs(mr - mg), <=, 1e-9 * mg);
  ps_plan_free(p);
  ps_plan_free(pg);
  ps_experiment_free(e);
  ps_experiment_free(eg);
}

static PsSummary run_with(const char *const *ov, const char *extra)
{
  const char *o[10];
  int n = 0;
  for (; ov[n]; n++)
    o[n] = ov[n];
  o[n++] = "steps=2";
  o[n++] = "collective.on_core=[]";
  o[n++] = extra;
  o[n] = NULL;
  PsExperiment *e = experiment_load(llama, o);
  PsSummary s = experiment_run(e);
  ps_experiment_free(e);
  return s;
}

static void test_ring_run(void)
{
  /* sequences of 32768: a block's attention outlasts its transfer */
  const char *long_ov[] = {ring_ov[0], "global_batch=8", ring_ov[2], "model.input.shape=[32768]",
                           ring_ov[3], NULL};
  const char *gather_ov[] = {long_ov[0], long_ov[1], long_ov[2], long_ov[3], NULL};
  PsSummary r = run_with(long_ov, NULL), g = run_with(gather_ov, NULL);
  g_test_message("ring: step %.6f s, collective %.6f s; all-gather: step %.6f s, collective "
                 "%.6f s (context axis exposed %.6f s)",
                 r.step_time_s, r.breakdown[PS_TIME_COLLECTIVE], g.step_time_s,
                 g.breakdown[PS_TIME_COLLECTIVE], g.axis_exposed_s[PS_AXIS_CONTEXT]);
  g_assert_cmpfloat(g.axis_exposed_s[PS_AXIS_CONTEXT], >, 0);
  g_assert_cmpfloat(r.breakdown[PS_TIME_COLLECTIVE], <, g.breakdown[PS_TIME_COLLECTIVE]);
  g_assert_cmpfloat(r.step_time_s, <, g.step_time_s);
  g_assert_cmpfloat(r.axis_colls_per_device[PS_AXIS_CONTEXT], ==, 0);
  /* one block in flight beside the device's own, not the whole group's */
  g_test_message("HBM peak: ring %.1f MiB, all-gather %.1f MiB", r.hbm_peak_bytes / 1048576.0,
                 g.hbm_peak_bytes / 1048576.0);
  g_assert_cmpfloat(r.hbm_peak_bytes, <=, g.hbm_peak_bytes);
  PsSummary slow = run_with(long_ov, "topology.ici.bandwidth_Bps=100MB/s");
  g_test_message("ring on a 1000 times slower ICI: step %.6f s, collective %.6f s, bubble %.6f s",
                 slow.step_time_s, slow.breakdown[PS_TIME_COLLECTIVE],
                 slow.breakdown[PS_TIME_PIPELINE_BUBBLE]);
  g_assert_cmpfloat(slow.breakdown[PS_TIME_COLLECTIVE], >, 10 * r.breakdown[PS_TIME_COLLECTIVE]);
  g_assert_cmpfloat(slow.breakdown[PS_TIME_PIPELINE_BUBBLE], ==, 0);
  ps_summary_clear(&r);
  ps_summary_clear(&g);
  ps_summary_clear(&slow);
}

static void test_ring_closed_form(void)
{
  const double bw = 1e8, lat = 1e-6;
  const char *ov[] = {"model=tests/data/good/models/ring-attention.json",
                      "topology=tpu-v5p-8",
                      "topology.torus.dims=[4,1,1]",
                      "topology.torus.wrap=[true,false,false]",
                      "topology.ici.bandwidth_Bps=100MB/s",
                      "global_batch=1",
                      "strategy.mesh={\"context\": 4}",
                      "strategy.rematerialize=full",
                      "strategy.context_strategy=ring",
                      "strategy.prefetch=false",
                      "collective.on_core=[]",
                      "steps=2",
                      NULL};
  PsExperiment *e = experiment_load(llama, ov);
  g_assert_cmpfloat(e->topology->ici_latency_s, ==, lat);
  g_assert_cmpfloat(e->topology->ici_bandwidth_Bps, ==, bw);
  GError *error = NULL;
  PsPlan *p = ps_strategy_compile(e, &error);
  g_assert_no_error(error);
  const PsProgram *pr = ps_plan_program(p, 0);
  double want = 0, bytes = 0, part = 0;
  int steps = 0;
  for (int i = 0; i < pr->n_ops; i++) {
    const PsOp *op = &pr->ops[i];
    if (!op->ctx_ring)
      continue;
    if (op->kind == PS_OP_SEND)
      bytes = op->bytes;
    else if (op->kind == PS_OP_RECV) {
      want += MAX(0.0, bytes / bw + lat - part);
      steps++;
    } else {
      part = ps_time_to_s(op->time);
    }
  }
  PsSummary s = experiment_run(e);
  /* the weights' fsdp collectives (over the same group) take the rest of
   * the collective time, at most their busy time */
  double busy = 0;
  for (int a = 0; a < PS_N_AXES; a++)
    busy += s.axis_busy_s[a];
  double coll = s.breakdown[PS_TIME_COLLECTIVE];
  g_test_message("%d ring steps: closed form %.6f s; collective %.6f s, the axes' collectives "
                 "busy %.6f s; step %.6f s",
                 steps, want, coll, busy, s.step_time_s);
  g_assert_cmpint(steps, ==, 9);
  g_assert_cmpfloat(busy, <, 0.02 * want);
  g_assert_cmpfloat(coll, >=, want * (1 - 1e-3));
  g_assert_cmpfloat(coll, <=, (want + busy) * (1 + 1e-3));
  ps_summary_clear(&s);
  ps_plan_free(p);
  ps_experiment_free(e);
}

static void test_ring_bad_input(void)
{
  const char *no_ctx[] = {"strategy.mesh={\"fsdp\": 32}", "strategy.context_strategy=ring",
                          NULL};
  bad(llama, no_ctx, "strategy.context_strategy: \"ring\" passes keys and values");
  const char *cm[] = {"strategy.mesh={\"fsdp\": 4, \"tensor\": 2, \"context\": 4}",
                      "strategy.collective_matmul=true", "strategy.context_strategy=ring", NULL};
  bad(llama, cm, "strategy.context_strategy");
  const char *word[] = {"strategy.mesh={\"fsdp\": 8, \"context\": 4}",
                        "strategy.context_strategy=rings", NULL};
  bad(llama, word, "strategy.context_strategy");
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/shard/context/compute", test_compute);
  g_test_add_func("/shard/context/kv", test_kv);
  g_test_add_func("/shard/context/weights", test_weights);
  g_test_add_func("/shard/context/memory", test_memory);
  g_test_add_func("/shard/context/pipeline", test_pipeline);
  g_test_add_func("/shard/context/run", test_run);
  g_test_add_func("/shard/context/bad-input", test_bad_input);
  g_test_add_func("/shard/context/ring/program", test_ring_program);
  g_test_add_func("/shard/context/ring/run", test_ring_run);
  g_test_add_func("/shard/context/ring/closed-form", test_ring_closed_form);
  g_test_add_func("/shard/context/ring/bad-input", test_ring_bad_input);
  return g_test_run();
}
