/* test_shard.c: the shard strategy (strategy/shard*.c) against closed
 * forms: where the mesh lies on the torus, what each layer's sharding
 * costs and which collectives it implies, HBM per device, and every bad
 * input it refuses.
 *
 * - /shard/mesh/tensor-neighbours: on tpu-v4-32 (2x2x4) with tensor 4 x
 *   fsdp 4, tensor takes x and y and fsdp z (JAX's rule); a tensor group's
 *   members differ only in x and y, an fsdp group's only in z, and
 *   consecutive members are torus neighbours;
 * - /shard/collectives/allreduce-closed-form: the one tensor all-reduce
 *   of a column- then row-parallel MLP on a 2x2 ring is exposed for
 *   exactly the ring's alpha-beta time, and fc1's shard does 1/4 of its
 *   FLOPs;
 * - /shard/flops/tensor-split: a column-parallel dense's forward FLOPs on
 *   one device are exactly 1/T of the unsharded op's (no padding at
 *   BERT-large's shapes);
 * - /shard/collectives/megatron: with tensor T, per transformer layer one
 *   activation all-reduce after attention and one after the MLP forward,
 *   two of input gradients backward, each of B S D elements;
 * - /shard/collectives/sequence: with a sequence axis, per layer two
 *   reduce-scatters and two all-gathers forward and their conjugates
 *   backward, no all-reduce;
 * - /shard/fsdp/gathers: fsdp all-gathers per step = 2 x ops with weights,
 *   1 x with regather false;
 * - /shard/memory/static: static HBM per device = sharded weights,
 *   gradients and two Adam slots, (P / (F T) rounded per op) x 16 bytes;
 * - /shard/numerics/data-only: no mesh is data parallelism, with real
 *   numerics those of the replicate strategy up to the order of float sums;
 * - /shard/programs/shared: the devices of a tensor x fsdp mesh share one
 *   program (the distinct programs: one), each slot resolves to an
 *   instance the device is a member of, and the plan times every device's
 *   step exactly as the same plan with a program of its own per device
 *   (instances named directly, no slots);
 * - /shard/bad-input: mesh product, heads, sequence without tensor,
 *   collective matmul or sequence_parallel without tensor, unknown axis, numerics on a bert
 *   (timing-only) model, on a sequence mesh or with collective matmul, a
 *   layout that does not fit (the advice computed: the fsdp that
 *   fits): each a PS_INPUT_ERROR naming the key. */
#include "exec/pod.h"
#include "hw/topology.h"
#include "io/config.h"
#include "model/kernels.h"
#include "program/program.h"
#include "run/experiment.h"
#include "run/run.h"
#include "strategy/kernels.h"
#include "strategy/strategy.h"

#include <glib/gstdio.h>

#include <math.h>
#include <string.h>

static const char *exp_path = "experiments/shard-bert-large.json";

static PsExperiment *load(const char *const *ov, GError **error)
{
  return ps_experiment_load(exp_path, ov, error);
}

static PsPlan *compile(const char *const *ov, PsExperiment **out)
{
  GError *error = NULL;
  PsExperiment *e = load(ov, &error);
  g_assert_no_error(error);
  PsPlan *p = ps_strategy_compile(e, &error);
  g_assert_no_error(error);
  g_assert_true(ps_plan_validate(p, &error));
  *out = e;
  return p;
}

/* The data axis's gradient all-reduces a device starts in a step. */
static int data_all_reduces(const PsPlan *p, int device)
{
  const PsProgram *pr = ps_plan_program(p, device);
  int n = 0;
  for (int i = 0; i < pr->n_ops; i++) {
    if (pr->ops[i].kind != PS_OP_COLL_START)
      continue;
    const PsPlanColl *pc = &p->colls[ps_plan_op_coll(p, device, &pr->ops[i])];
    n += pc->op == PS_COLL_ALL_REDUCE && pc->axis == PS_AXIS_DATA &&
         (pc->buffer == PS_BUFFER_GRADS || pc->buffer == PS_BUFFER_GRAD_SHARDS);
  }
  return n;
}

/* The plan counts the data axis's gradient buckets as replicate's does
 * (the summary's "N buckets", which read 0 for every shard plan): data 16
 * alone the same buckets as replicate over 16 replicas, data 2 x fsdp 8 its
 * device's all-reduces of shards, none without a data axis. */
static void test_buckets_counted(void)
{
  PsExperiment *e;
  const char *data[] = {"strategy.mesh={\"data\": 16}", NULL};
  PsPlan *p = compile(data, &e);
  const char *rep_ov[] = {"strategy={\"kind\": \"replicate\", \"replicas\": 16}", NULL};
  GError *error = NULL;
  PsExperiment *re = ps_experiment_load(exp_path, rep_ov, &error);
  g_assert_no_error(error);
  PsPlan *rp = ps_strategy_compile(re, &error);
  g_assert_no_error(error);
  g_assert_cmpint(rp->n_buckets, >, 1);
  g_assert_cmpint(p->n_buckets, ==, rp->n_buckets);
  g_assert_cmpint(p->n_buckets, ==, data_all_reduces(p, 0));
  ps_plan_free(rp);
  ps_experiment_free(re);
  ps_plan_free(p);
  ps_experiment_free(e);
  const char *mixed[] = {"strategy.mesh={\"data\": 2, \"fsdp\": 8}", NULL};
  p = compile(mixed, &e);
  g_assert_cmpint(p->n_buckets, >, 0);
  g_assert_cmpint(p->n_buckets, ==, data_all_reduces(p, 0));
  ps_plan_free(p);
  ps_experiment_free(e);
  const char *fsdp[] = {"strategy.mesh={\"fsdp\": 16}", NULL};
  p = compile(fsdp, &e);
  g_assert_cmpint(p->n_buckets, ==, 0);
  ps_plan_free(p);
  ps_experiment_free(e);
}

/* A mesh axis given as -1 takes the devices the others leave (MaxText's
 * convention): fsdp -1 x tensor 4 on the 16 devices of tpu-v4-32 is fsdp
 * 4, data 1; two axes at -1, a rest that does not divide, and 0 are
 * errors naming strategy.mesh. */
static void test_mesh_rest(void)
{
  PsExperiment *e;
  const char *rest[] = {"strategy.mesh={\"fsdp\": -1, \"tensor\": 4}", NULL};
  PsPlan *p = compile(rest, &e);
  g_assert_cmpint(ps_plan_axis_size(p, PS_AXIS_FSDP), ==, 4);
  g_assert_cmpint(ps_plan_axis_size(p, PS_AXIS_TENSOR), ==, 4);
  g_assert_cmpint(ps_plan_axis_size(p, PS_AXIS_DATA), ==, 1);
  ps_plan_free(p);
  ps_experiment_free(e);
  const char *with_data[] = {"strategy.mesh={\"data\": 2, \"fsdp\": -1}", NULL};
  p = compile(with_data, &e);
  g_assert_cmpint(ps_plan_axis_size(p, PS_AXIS_FSDP), ==, 8);
  g_assert_cmpint(ps_plan_axis_size(p, PS_AXIS_DATA), ==, 2);
  ps_plan_free(p);
  ps_experiment_free(e);
  const char *two[] = {"strategy.mesh={\"fsdp\": -1, \"tensor\": -1}", NULL};
  const char *odd[] = {"strategy.mesh={\"fsdp\": -1, \"tensor\": 3}", NULL};
  const char *zero[] = {"strategy.mesh={\"fsdp\": 0}", NULL};
  const char *const *cases[] = {two, odd, zero};
  const char *msg[] = {"for one axis only", "does not divide", "0 is not a size"};
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    GError *error = NULL;
    PsExperiment *x = load(cases[i], &error);
    g_assert_null(x);
    g_assert_nonnull(error);
    g_assert_nonnull(strstr(error->message, "strategy.mesh"));
    g_assert_nonnull(strstr(error->message, msg[i]));
    g_clear_error(&error);
  }
}

/* A mesh that does not split into whole torus axes compiles row-major and
 * says so (fsdp 64 x data 2 on tpu-v5p-256's 4x4x8: 64 takes half of the
 * 8); fsdp 128 there, whole axes, says nothing. */
static void test_row_major_warning(void)
{
  const char *path = "experiments/shard-llama2-7b.json";
  const char *bad[] = {"topology=tpu-v5p-256", "strategy.mesh={\"data\": 2, \"fsdp\": 64}",
                       "global_batch=128", NULL};
  const char *good[] = {"topology=tpu-v5p-256", "strategy.mesh={\"fsdp\": 128}",
                        "global_batch=128", NULL};
  for (int k = 0; k < 2; k++) {
    GError *error = NULL;
    PsExperiment *e = ps_experiment_load(path, k ? good : bad, &error);
    g_assert_no_error(error);
    PsPlan *p = ps_strategy_compile(e, &error);
    g_assert_no_error(error);
    if (k)
      g_assert_null(p->warning);
    else {
      g_assert_nonnull(p->warning);
      g_assert_nonnull(strstr(p->warning, "row-major"));
      g_assert_nonnull(strstr(p->warning, "data 2 x fsdp 64"));
    }
    ps_plan_free(p);
    ps_experiment_free(e);
  }
}

/* The same plan without slots: every device a program of its own, its
 * COLL_START/DONE naming instances directly (as plans did before slots). */
static PsPlan *own_programs(const PsPlan *p)
{
  PsPlan *q = ps_plan_new(p->n_devices);
  for (int c = 0; c < p->n_colls; c++)
    ps_plan_add_coll(q, &p->colls[c]);
  for (int d = 0; d < p->n_devices; d++) {
    const PsProgram *pr = ps_plan_program(p, d);
    PsOp *ops = g_memdup2(pr->ops, sizeof(PsOp) * (size_t)pr->n_ops);
    for (int i = 0; i < pr->n_ops; i++)
      ops[i].coll = ps_plan_op_coll(p, d, &pr->ops[i]);
    q->program_of[d] = ps_plan_add_program(q, ops, pr->n_ops);
    g_free(ops);
  }
  return q;
}

/* When the last device finishes the experiment's steps under plan. */
static double finish_s(const PsExperiment *e, const PsPlan *plan)
{
  GError *error = NULL;
  PsEngine *engine = ps_engine_new();
  PsPodConfig cfg = ps_run_pod_config(e);
  PsPod *pod = ps_pod_new(engine, &cfg, plan, NULL, NULL, &error);
  g_assert_no_error(error);
  ps_pod_start(pod);
  ps_engine_run(engine, PS_TIME_NEVER);
  g_assert_true(ps_pod_check_finished(pod, &error));
  double t = ps_time_to_s(ps_engine_now(engine));
  ps_pod_free(pod);
  ps_engine_free(engine);
  return t;
}

static void test_shared_programs(void)
{
  const char *ov[] = {"strategy.mesh.fsdp=4", "strategy.mesh.tensor=4", "global_batch=16",
                      "steps=2", NULL};
  PsExperiment *e;
  PsPlan *p = compile(ov, &e);
  g_assert_cmpint(p->n_devices, ==, 16);
  g_assert_cmpint(p->n_programs, ==, 1);
  g_assert_cmpint(p->n_slots, >, 0);
  g_assert_cmpint(p->n_colls, >, p->n_slots); /* 4 groups per slot */
  for (int d = 0; d < p->n_devices; d++)
    for (int s = 0; s < p->n_slots; s++) {
      int c = p->coll_of[s * p->n_devices + d];
      g_assert_cmpint(c, >=, 0);
      g_assert_cmpint(ps_plan_coll_member(p, c, d), >=, 0);
    }
  PsPlan *q = own_programs(p);
  GError *error = NULL;
  g_assert_true(ps_plan_validate(q, &error));
  g_assert_cmpint(q->n_programs, ==, 16);
  double shared = finish_s(e, p), own = finish_s(e, q);
  g_assert_cmpfloat(shared, >, 0);
  g_assert_cmpfloat(shared, ==, own);
  ps_plan_free(q);
  ps_plan_free(p);
  ps_experiment_free(e);
}

static void test_mesh_neighbours(void)
{
  const char *ov[] = {"strategy.mesh.fsdp=4", "strategy.mesh.tensor=4", NULL};
  PsExperiment *e;
  PsPlan *p = compile(ov, &e);
  g_autoptr(PsGeometry) g = ps_geometry_new(e->topology);
  int n_tensor = 0;
  for (int c = 0; c < p->n_colls; c++) {
    const PsPlanColl *pc = &p->colls[c];
    if (pc->axis != PS_AXIS_TENSOR && pc->axis != PS_AXIS_FSDP)
      continue;
    n_tensor += pc->axis == PS_AXIS_TENSOR;
    int a[PS_GEOMETRY_MAX_AXES], b[PS_GEOMETRY_MAX_AXES];
    ps_geometry_device_axes(g, pc->members[0], a);
    for (int m = 1; m < pc->n_members; m++) {
      ps_geometry_device_axes(g, pc->members[m], b);
      if (pc->axis == PS_AXIS_TENSOR)
        g_assert_cmpint(a[3], ==, b[3]); /* same z */
      else
        g_assert_true(a[1] == b[1] && a[2] == b[2]); /* same x, y */
    }
    g_assert_cmpint(pc->n_members, ==, 4);
    /* consecutive members (cyclically, for tensor's 2x2 ring) are one hop
     * apart */
    for (int m = 0; m < pc->n_members; m++) {
      if (pc->axis == PS_AXIS_FSDP && m == pc->n_members - 1)
        break; /* z has no wrap on a v4-32: a line */
      ps_geometry_device_axes(g, pc->members[m], a);
      ps_geometry_device_axes(g, pc->members[(m + 1) % pc->n_members], b);
      int hops = 0;
      for (int k = 1; k <= 3; k++)
        hops += ABS(a[k] - b[k]);
      g_assert_cmpint(hops, ==, 1);
    }
  }
  g_assert_cmpint(n_tensor, >, 0);
  ps_plan_free(p);
  ps_experiment_free(e);
}

static double op_flops(const PsPlan *p, const char *prefix)
{
  const PsProgram *pr = ps_plan_program(p, 0);
  for (int i = 0; i < pr->n_ops; i++)
    if (g_str_has_prefix(pr->ops[i].name, prefix))
      return pr->ops[i].flops;
  g_assert_not_reached();
}

/* Device 0's activation bytes live after each op: the peak, and what is
 * left at the end (nothing: every op that keeps bytes has a backward that
 * frees them). */
static int64_t act_peak(const PsPlan *p, int64_t *left)
{
  const PsProgram *pr = ps_plan_program(p, 0);
  int64_t live = 0, peak = 0;
  for (int i = 0; i < pr->n_ops; i++) {
    live += pr->ops[i].act_bytes;
    peak = MAX(peak, live);
  }
  *left = live;
  return peak;
}

/* rematerialize "minimal" (JAX's checkpoint_dots_with_no_batch_dims): its
 * recompute ops run, of the matmuls, exactly attention's products of two
 * activations, 4 S^2 dim FLOPs per example and attention layer over the
 * tensor axis (BERT-large: S 512, dim 1024, 24 layers; tensor 4, at
 * the ops' batch); it keeps less than none and more than full,
 * and every byte it keeps is freed by the step's end. */
static void test_remat_minimal(void)
{
  static const char *const remats[] = {"none", "minimal", "full"};
  int64_t peak[3];
  for (int r = 0; r < 3; r++) {
    g_autofree char *set = g_strdup_printf("strategy.rematerialize=%s", remats[r]);
    const char *ov[] = {set, "steps=1", NULL};
    PsExperiment *e;
    PsPlan *p = compile(ov, &e);
    int64_t left = 0;
    peak[r] = act_peak(p, &left);
    g_assert_cmpint(left, ==, 0);
    if (r == 1) {
      const PsProgram *pr = ps_plan_program(p, 0);
      double recompute = 0;
      int64_t batch = 0;
      for (int i = 0; i < pr->n_ops; i++)
        if (pr->ops[i].kind == PS_OP_RECOMPUTE) {
          recompute += pr->ops[i].mxu_flops;
          batch = pr->ops[i].batch;
        }
      g_assert_cmpint(batch, >, 0);
      double want = 24 * 4.0 * 512 * 512 * 1024 * (double)batch / 4;
      g_assert_cmpfloat(fabs(recompute - want), <, 1e-9 * want);
    }
    ps_plan_free(p);
    ps_experiment_free(e);
  }
  g_assert_cmpint(peak[0], >, peak[1]);
  g_assert_cmpint(peak[1], >, peak[2]);
}

/* Full rematerialization of a decoder (LLaMA-2 7B: 32 repeats of an
 * attention block and a feed-forward block, fsdp 32) keeps one tensor a
 * decoder layer, its input (batch x 4096 x 4096 in bf16), as a scan of
 * rematerialized layers does, not the input of each of its two residual
 * blocks: what is live when the forward's last op ends is exactly that;
 * and every byte comes back by the step's end. */
static void test_remat_units(void)
{
  GError *error = NULL;
  const char *ov[] = {"steps=1", NULL};
  PsExperiment *e = ps_experiment_load("experiments/shard-llama2-7b.json", ov, &error);
  g_assert_no_error(error);
  PsPlan *p = ps_strategy_compile(e, &error);
  g_assert_no_error(error);
  const PsProgram *pr = ps_plan_program(p, 0);
  int last_fwd = -1;
  for (int i = 0; i < pr->n_ops; i++)
    if (pr->ops[i].kind == PS_OP_FWD)
      last_fwd = i;
  int64_t live = 0, batch = 0;
  for (int i = 0; i <= last_fwd; i++) { /* the forward's ops, gathers freed by their op */
    live += pr->ops[i].act_bytes;
    if (pr->ops[i].kind == PS_OP_FWD)
      batch = pr->ops[i].batch;
  }
  g_assert_cmpint(batch, >, 0);
  g_assert_cmpint(live, ==, 32 * batch * 4096 * 4096 * 2);
  int64_t left = 0;
  act_peak(p, &left);
  g_assert_cmpint(left, ==, 0);
  ps_plan_free(p);
  ps_experiment_free(e);
}

/* What "minimal" keeps of one decoder layer with sequence parallelism
 * (LLaMA-2 7B, S 4096, dim 4096, SwiGLU 11008; tensor 2 x sequence 2, a
 * group of M = 4; fsdp 8): the outputs of its weight products, Q, K, V
 * (3 x 4096 / M a token) and the gate and up projections (2 x 11008 / M),
 * the attention projection's sum as its reduce-scattered rows (4096 / M,
 * not the partial sum's 4096), and the layer's input as rows (4096 / M);
 * not the down projection's output, which only feeds the residual sum
 * that is the next layer's kept input.  So the ops of a middle layer's
 * forward leave exactly batch x 4096 x (3 x 4096 + 4096 + 2 x 11008 +
 * 4096) / 4 bytes x 2 live; and every byte comes back by the step's end. */
static void test_remat_minimal_rows(void)
{
  GError *error = NULL;
  const char *ov[] = {"steps=1", "strategy.rematerialize=minimal", "strategy.mesh.fsdp=8",
                      "strategy.mesh.tensor=2", "strategy.mesh.sequence=2", NULL};
  PsExperiment *e = ps_experiment_load("experiments/shard-llama2-7b.json", ov, &error);
  g_assert_no_error(error);
  PsPlan *p = ps_strategy_compile(e, &error);
  g_assert_no_error(error);
  const PsProgram *pr = ps_plan_program(p, 0);
  int from = -1, to = -1;
  for (int i = 0; i < pr->n_ops; i++)
    if (pr->ops[i].kind == PS_OP_FWD) {
      if (g_str_has_prefix(pr->ops[i].name, "fwd layer4.mlp.add"))
        from = i + 1;
      if (g_str_has_prefix(pr->ops[i].name, "fwd layer5.mlp.add"))
        to = i;
    }
  g_assert_cmpint(from, >, 0);
  g_assert_cmpint(to, >, from);
  int64_t live = 0, batch = pr->ops[to].batch;
  for (int i = from; i <= to; i++)
    live += pr->ops[i].act_bytes;
  g_assert_cmpint(batch, ==, 8);
  g_assert_cmpint(live, ==, batch * 4096 * (3 * 4096 + 4096 + 2 * 11008 + 4096) / 4 * 2);
  int64_t left = 0;
  act_peak(p, &left);
  g_assert_cmpint(left, ==, 0);
  ps_plan_free(p);
  ps_experiment_free(e);
}

/* shard-llama2-7b (tensor 1 x fsdp 32, 2 sequences of 4096 a device)
 * compiled with extra overrides. */
static PsPlan *llama(const char *remat, const char *keep, PsExperiment **e)
{
  GError *error = NULL;
  const char *ov[] = {"steps=1", remat, keep, NULL};
  *e = ps_experiment_load("experiments/shard-llama2-7b.json", ov, &error);
  g_assert_no_error(error);
  PsPlan *p = ps_strategy_compile(*e, &error);
  g_assert_no_error(error);
  return p;
}

/* The op of kind k whose name starts with `name`, or -1. */
static int op_named(const PsProgram *pr, PsOpKind k, const char *name)
{
  for (int i = 0; i < pr->n_ops; i++)
    if (pr->ops[i].kind == k && g_str_has_prefix(pr->ops[i].name, name))
      return i;
  return -1;
}

/* A rematerialized forward leaves out what backward does not read: the
 * down projection of a decoder layer, whose sum with the shortcut is the
 * next layer's kept input.  Full remat reruns the rest of the layer
 * (attention and the gated feed-forward, their FWD's matmul FLOPs);
 * "custom" keeping the query, key and value projections and the context
 * reruns only the output projection of attention (2 s d^2 a sequence) and
 * the feed-forward's input products, and keeps 5 d values a token and
 * layer (the input, Q, K, V, the context). */
static void test_remat_rerun(void)
{
  const int64_t b = 2, s = 4096, d = 4096;
  PsExperiment *e;
  PsPlan *p = llama("strategy.rematerialize=full", NULL, &e);
  const PsProgram *pr = ps_plan_program(p, 0);
  const char *attn = "fwd layer4.attn.body.attn", *down = "fwd layer4.mlp.body.down";
  const char *gate = "fwd layer4.mlp.body.gate_up";
  int fa = op_named(pr, PS_OP_FWD, attn), fg = op_named(pr, PS_OP_FWD, gate);
  int ra = op_named(pr, PS_OP_RECOMPUTE, "recompute layer4.attn.body.attn");
  int rg = op_named(pr, PS_OP_RECOMPUTE, "recompute layer4.mlp.body.gate_up");
  int rd = op_named(pr, PS_OP_RECOMPUTE, "recompute layer4.mlp.body.down");
  g_assert_cmpint(MIN(MIN(fa, fg), MIN(ra, MIN(rg, rd))), >=, 0);
  g_assert_cmpfloat(pr->ops[ra].mxu_flops, ==, pr->ops[fa].mxu_flops);
  g_assert_cmpfloat(pr->ops[rg].mxu_flops, ==, pr->ops[fg].mxu_flops);
  g_assert_cmpfloat(pr->ops[rd].mxu_flops, ==, 0);
  g_assert_cmpfloat(pr->ops[op_named(pr, PS_OP_FWD, down)].mxu_flops, ==,
                    2.0 * b * s * d * 11008);
  double gate_flops = pr->ops[fg].mxu_flops;
  ps_plan_free(p);
  ps_experiment_free(e);

  p = llama("strategy.rematerialize=custom",
            "strategy.remat_keep=[\"query_proj\", \"key_proj\", \"value_proj\", \"context\"]", &e);
  pr = ps_plan_program(p, 0);
  ra = op_named(pr, PS_OP_RECOMPUTE, "recompute layer4.attn.body.attn");
  rg = op_named(pr, PS_OP_RECOMPUTE, "recompute layer4.mlp.body.gate_up");
  g_assert_cmpfloat_with_epsilon(pr->ops[ra].mxu_flops, 2.0 * b * s * d * d, 1e-9 * d * d);
  g_assert_cmpfloat(pr->ops[rg].mxu_flops, ==, gate_flops);
  int from = op_named(pr, PS_OP_FWD, "fwd layer3.mlp.body.down") + 1;
  int to = op_named(pr, PS_OP_FWD, down);
  g_assert_cmpint(from, >, 0);
  g_assert_cmpint(to, >, from);
  int64_t live = 0;
  for (int i = from; i <= to; i++)
    live += pr->ops[i].act_bytes;
  g_assert_cmpint(live, ==, b * s * 5 * d * 2);
  int64_t left = 0;
  act_peak(p, &left);
  g_assert_cmpint(left, ==, 0);
  ps_plan_free(p);
  ps_experiment_free(e);
}

/* Offloading the checkpoints "custom" keeps (remat_offload) runs the same
 * compute ops as keeping the same checkpoints in HBM (remat_keep), with the
 * same live bytes each (what a recompute brings back is what was kept,
 * wherever it was), plus copies: after a group's forward its offloaded
 * outputs go up to the host, and backward brings them down before the
 * group's recompute, each way 5 d values a token and layer (the layer's
 * input, Q, K, V, the context), 32 layers of b x s tokens in 2-byte
 * activations. Each forward copy is waited for only once the window of
 * PS_HOST_COPIES_IN_FLIGHT (24) is full, so at most 24 are in flight and
 * the 25th start comes after exactly one done; the copies' bytes are in HBM
 * only while they run (the plan frees all it holds by the step's end), so
 * the peak is lower than keeping them. */
static void test_remat_offload(void)
{
  const int64_t b = 2, s = 4096, d = 4096, layers = 32;
  const char *names = "[\"decoder_layer_input\", \"query_proj\", \"key_proj\", "
                      "\"value_proj\", \"context\"]";
  g_autofree char *keep = g_strdup_printf("strategy.remat_keep=%s", names);
  g_autofree char *offload = g_strdup_printf("strategy.remat_offload=%s", names);
  PsExperiment *e1, *e2;
  PsPlan *a = llama("strategy.rematerialize=custom", keep, &e1);
  PsPlan *pb = llama("strategy.rematerialize=custom", offload, &e2);
  const PsProgram *pa = ps_plan_program(a, 0), *pr = ps_plan_program(pb, 0);
  double up = 0, down = 0;
  int i = 0, starts = 0, dones = 0, in_flight = 0, most = 0, between = 0;
  gboolean forward = TRUE;
  for (int j = 0; j < pr->n_ops; j++) {
    const PsOp *op = &pr->ops[j];
    if (op->kind == PS_OP_COPY_START) {
      *(op->to_host ? &up : &down) += op->bytes;
      starts++;
      if (op->to_host) {
        in_flight++;
        most = MAX(most, in_flight);
        g_assert_cmpint(between, <=, 1); /* one done makes room for one start */
        between = 0;
      }
      continue;
    }
    if (op->kind == PS_OP_COPY_DONE) {
      dones++;
      if (op->to_host) {
        in_flight--;
        between += forward;
      }
      continue;
    }
    forward &= op->kind != PS_OP_BWD && op->kind != PS_OP_RECOMPUTE;
    g_assert_cmpint(i, <, pa->n_ops);
    g_assert_cmpint(pa->ops[i].kind, ==, op->kind);
    g_assert_cmpstr(pa->ops[i].name, ==, op->name);
    g_assert_cmpint(pa->ops[i].time, ==, op->time);
    if (op->kind == PS_OP_FWD || op->kind == PS_OP_RECOMPUTE || op->kind == PS_OP_BWD)
      g_assert_cmpint(pa->ops[i].act_bytes, ==, op->act_bytes);
    i++;
  }
  g_assert_cmpint(i, ==, pa->n_ops);
  g_assert_cmpint(starts, ==, dones);
  g_assert_cmpint(starts, >=, 2 * layers);
  g_assert_cmpint(most, ==, 24);
  g_assert_cmpint(in_flight, ==, 0);
  g_assert_cmpfloat(up, ==, (double)(layers * 5 * d * b * s * 2));
  g_assert_cmpfloat(down, ==, up);
  int64_t left_a = 0, left_b = 0;
  int64_t peak_a = act_peak(a, &left_a), peak_b = act_peak(pb, &left_b);
  g_assert_cmpint(left_b, ==, 0);
  g_assert_cmpint(peak_b, <, peak_a);
  /* the run reports them, a step's of a device */
  PsSummary sum;
  GError *error = NULL;
  g_assert_true(ps_run(e2, &(PsRunOptions){0}, &sum, &error));
  g_assert_no_error(error);
  g_assert_cmpfloat(sum.copy_up_bytes, ==, up);
  g_assert_cmpfloat(sum.copy_down_bytes, ==, down);
  ps_summary_clear(&sum);
  ps_plan_free(a);
  ps_plan_free(pb);
  ps_experiment_free(e1);
  ps_experiment_free(e2);
}

/* "custom" naming every weight product is "minimal", op for op; naming
 * none reruns in each decoder layer what full reruns (the memory differs:
 * full brings a unit's blocks back together). */
static void test_remat_custom_bounds(void)
{
  PsExperiment *e1, *e2;
  PsPlan *a = llama("strategy.rematerialize=minimal", NULL, &e1);
  PsPlan *b = llama("strategy.rematerialize=custom",
                    "strategy.remat_keep=[\"query_proj\", \"key_proj\", \"value_proj\", "
                    "\"out_proj\", \"mlpwi\", \"mlpwo\"]",
                    &e2);
  const PsProgram *pa = ps_plan_program(a, 0), *pb = ps_plan_program(b, 0);
  g_assert_cmpint(pa->n_ops, ==, pb->n_ops);
  for (int i = 0; i < pa->n_ops; i++) {
    g_assert_cmpstr(pa->ops[i].name, ==, pb->ops[i].name);
    g_assert_cmpint(pa->ops[i].time, ==, pb->ops[i].time);
    g_assert_cmpint(pa->ops[i].act_bytes, ==, pb->ops[i].act_bytes);
  }
  ps_plan_free(a);
  ps_plan_free(b);
  ps_experiment_free(e1);
  ps_experiment_free(e2);
  a = llama("strategy.rematerialize=full", NULL, &e1);
  b = llama("strategy.rematerialize=custom", "strategy.remat_keep=[]", &e2);
  pa = ps_plan_program(a, 0);
  pb = ps_plan_program(b, 0);
  int n = 0;
  for (int i = 0; i < pa->n_ops; i++) {
    if (pa->ops[i].kind != PS_OP_RECOMPUTE ||
        !g_str_has_prefix(pa->ops[i].name, "recompute layer"))
      continue; /* the decoder layers' (outside them custom keeps as minimal) */
    int j = op_named(pb, PS_OP_RECOMPUTE, pa->ops[i].name);
    g_assert_cmpint(j, >=, 0);
    g_assert_cmpint(pa->ops[i].time, ==, pb->ops[j].time);
    n++;
  }
  g_assert_cmpint(n, ==, 32 * 3); /* attention, gate_up, down: 32 layers */
  ps_plan_free(a);
  ps_plan_free(b);
  ps_experiment_free(e1);
  ps_experiment_free(e2);
}

static void test_flops_tensor(void)
{
  const char *one[] = {"strategy.mesh.tensor=1", NULL};
  const char *four[] = {"strategy.mesh.tensor=4", NULL};
  PsExperiment *e1, *e4;
  PsPlan *p1 = compile(one, &e1), *p4 = compile(four, &e4);
  double f1 = op_flops(p1, "fwd layer1.ffn.body.fc1"), f4 = op_flops(p4, "fwd layer1.ffn.body.fc1");
  /* same examples per device: tensor 1 has data 8 x fsdp 2 (batch 2),
   * tensor 4 data 2 x fsdp 2 (batch 8) */
  g_assert_cmpfloat_with_epsilon(f4, f1 * (8.0 / 2.0) / 4.0, 1e-9 * f1);
  ps_plan_free(p1);
  ps_plan_free(p4);
  ps_experiment_free(e1);
  ps_experiment_free(e4);
}

/* BERT's 30522-word vocabulary over tensor 4: padded to 30524 as GSPMD
 * pads an uneven dimension, each device holding 7631 rows, where the table
 * stayed whole before; its 2-way head ("span"), which 4 would leave two devices
 * with nothing, stays whole. */
static void test_vocab_padded(void)
{
  PsExperiment *e;
  PsPlan *p = compile((const char *[]){"strategy.mesh.tensor=4", NULL}, &e);
  const PsProgram *pr = ps_plan_program(p, 0);
  gboolean embed = FALSE, head = FALSE;
  for (int i = 0; i < pr->n_ops; i++) {
    embed |= g_str_has_prefix(pr->ops[i].name, "fwd embed [vocab/4, padded]");
    head |= g_str_has_prefix(pr->ops[i].name, "fwd span") &&
            strstr(pr->ops[i].name, "[") == NULL;
  }
  g_assert_true(embed);
  g_assert_true(head);
  /* the fsdp gather of the table carries each device's padded share:
   * (7631 x 4 rows + 512 positions) x 1024 over the tensor group of 4 */
  int64_t want = (7631 * 4 + 512) * (int64_t)1024 / 4, got = -1;
  for (int c = 0; c < p->n_colls; c++)
    if (strcmp(p->colls[c].name, "fsdp all-gather embed w fwd") == 0)
      got = p->colls[c].count;
  g_assert_cmpint(got, ==, want);
  ps_plan_free(p);
  ps_experiment_free(e);
}

/* An embedding looked up by matmul (llama3.1-8b: 128256 x 4096, "lookup":
 * "matmul") split over tensor 4: each device contracts its 32064 rows of
 * the table, 2 S (V / 4) D FLOPs an example on the MXU, and backward
 * computes the table's gradient alone, as much again; over fsdp alone
 * the whole table, 2 S V D. */
static void test_vocab_matmul_lookup(void)
{
  const double S = 8192, V = 128256, D = 4096;
  const char *ov4[] = {"model=llama3.1-8b", "global_batch=32", "strategy.mesh.fsdp=8",
                       "strategy.mesh.tensor=4", NULL};
  const char *ov1[] = {"model=llama3.1-8b", "global_batch=32", "strategy.mesh.fsdp=32", NULL};
  const char *const saved = exp_path;
  exp_path = "experiments/shard-llama2-7b.json";
  PsExperiment *e4, *e1;
  PsPlan *p4 = compile(ov4, &e4), *p1 = compile(ov1, &e1);
  exp_path = saved;
  const PsProgram *pr = ps_plan_program(p4, 0);
  double fwd = -1, bwd = -1;
  for (int i = 0; i < pr->n_ops; i++) {
    if (g_str_has_prefix(pr->ops[i].name, "fwd embed [vocab/4]"))
      fwd = pr->ops[i].mxu_flops;
    if (g_str_has_prefix(pr->ops[i].name, "bwd embed [vocab/4]"))
      bwd = pr->ops[i].mxu_flops;
  }
  /* 32 sequences over fsdp 8: 4 a device at tensor 4, 1 at fsdp 32 */
  g_assert_cmpfloat(fwd, ==, 4 * 2 * S * (V / 4) * D);
  g_assert_cmpfloat(bwd, ==, fwd);
  double whole = -1;
  pr = ps_plan_program(p1, 0);
  for (int i = 0; i < pr->n_ops; i++)
    if (g_str_has_prefix(pr->ops[i].name, "fwd embed"))
      whole = pr->ops[i].mxu_flops;
  g_assert_cmpfloat(whole, ==, 2 * S * V * D);
  ps_plan_free(p4);
  ps_plan_free(p1);
  ps_experiment_free(e4);
  ps_experiment_free(e1);
}

/* The op of device 0's program whose name starts with prefix. */
static const PsOp *find_op(const PsPlan *p, const char *prefix)
{
  const PsProgram *pr = ps_plan_program(p, 0);
  for (int i = 0; i < pr->n_ops; i++)
    if (g_str_has_prefix(pr->ops[i].name, prefix))
      return &pr->ops[i];
  g_error("no op %s", prefix);
  return NULL;
}

/* A lookup by matmul under rematerialization: its backward reads only the
 * ids and dy, and its output is kept as the first block's input, so a
 * rematerialized forward runs none of its product again ("full") and the
 * memory holds that output once ("minimal": the same live bytes as a
 * gather).  Llama 3.1 8B (matmul) against a copy of it that gathers. */
static void test_lookup_remat(void)
{
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents("models/llama3.1-8b.json", &text, NULL, NULL));
  g_autofree char *dir = g_dir_make_tmp("podsim-shard-XXXXXX", NULL);
  g_autofree char *path = g_build_filename(dir, "gather-8b.json", NULL);
  GString *g = g_string_new(text);
  g_assert_cmpint(g_string_replace(g, "\"lookup\": \"matmul\"", "\"lookup\": \"gather\"", 0),
                  ==, 1);
  g_assert_true(g_file_set_contents(path, g->str, -1, NULL));
  g_string_free(g, TRUE);
  g_autofree char *gm = g_strconcat("model=", path, NULL);
  const double S = 8192, V = 128256, D = 4096, B = 2; /* fsdp 32, global batch 64 */
  const char *const saved = exp_path;
  exp_path = "experiments/shard-llama2-7b.json";
  for (int full = 0; full <= 1; full++) {
    const char *remat = full ? "strategy.rematerialize=full" : "strategy.rematerialize=minimal";
    PsExperiment *em, *eg;
    PsPlan *pm = compile((const char *[]){"model=llama3.1-8b", remat, NULL}, &em);
    PsPlan *pg = compile((const char *[]){gm, remat, NULL}, &eg);
    const PsOp *fm = find_op(pm, "fwd embed"), *fg = find_op(pg, "fwd embed");
    g_assert_cmpfloat(fm->mxu_flops - fg->mxu_flops, ==, 2 * B * S * V * D);
    g_assert_cmpint(fm->act_bytes, ==, fg->act_bytes);
    /* the recompute of the group holding the lookup runs none of it: it
     * costs what the gathering twin's does, the norm after it alone */
    g_assert_cmpfloat(find_op(pm, "recompute embed")->mxu_flops, ==, 0);
    g_assert_cmpint(find_op(pm, "recompute embed")->time, ==,
                    find_op(pg, "recompute embed")->time);
    g_assert_cmpint(ps_plan_program(pm, 0)->hbm_peak_bytes, ==,
                    ps_plan_program(pg, 0)->hbm_peak_bytes);
    ps_plan_free(pm);
    ps_plan_free(pg);
    ps_experiment_free(em);
    ps_experiment_free(eg);
  }
  exp_path = saved;
  g_remove(path);
  g_rmdir(dir);
}

/* describe --kernels lists the kernels the lowering costed: on each
 * device's local shard of the layers (a tensor split's share, a padded
 * vocabulary), a recompute running only what it reruns, an op run as
 * parts listed once, clipping's pass; so the kernels' times add up to the
 * compute ops' (FWD, BWD, RECOMPUTE, UPDATE, CLIP) in the program, where
 * they once were the whole model's. */
static void test_kernels_local(void)
{
  const char *cases[][4] = {
      {"strategy.mesh.tensor=4", NULL},
      {"strategy.rematerialize=full", NULL},
      {"strategy.collective_matmul=true", "strategy.rematerialize=minimal", NULL},
      {"optimizer.clip_norm=1", NULL},
  };
  for (guint k = 0; k < G_N_ELEMENTS(cases); k++) {
    PsExperiment *e;
    PsPlan *p = compile(cases[k], &e);
    const PsProgram *pr = ps_plan_program(p, 0);
    double ops = 0;
    for (int i = 0; i < pr->n_ops; i++) {
      PsOpKind kd = pr->ops[i].kind;
      if (kd == PS_OP_FWD || kd == PS_OP_BWD || kd == PS_OP_RECOMPUTE || kd == PS_OP_UPDATE ||
          kd == PS_OP_CLIP)
        ops += ps_time_to_s(pr->ops[i].time);
    }
    GString *out = g_string_new(NULL);
    ps_kernels_describe(e, p, 0, out);
    const char *tot = strstr(out->str, " kernels, ");
    g_assert_nonnull(tot);
    double listed = g_ascii_strtod(tot + strlen(" kernels, "), NULL) / 1e3;
    g_assert_cmpfloat(fabs(listed - ops), <, 2e-6 + 1e-6 * ops);
    g_string_free(out, TRUE);
    ps_plan_free(p);
    ps_experiment_free(e);
  }
}

/* Clipping by global norm (optimizer.clip_norm) on fsdp 2 x tensor 4:
 * before the update a CLIP op reads the device's float32 gradient shard
 * once, its squares summed (2 FLOPs a weight), the shard being the model's
 * weights over the 8 (within the vocabulary's padding); then the scalar
 * sum is all-reduced over the fsdp group and over the tensor group; the
 * step is longer by at least the CLIP op, and the program is otherwise
 * the same. */
static int count_colls(const PsPlan *p, PsAxis axis, PsCollOp op, const char *has);

static void test_clip(void)
{
  PsExperiment *e0, *e1;
  PsPlan *p0 = compile((const char *[]){NULL}, &e0);
  PsPlan *p1 = compile((const char *[]){"optimizer.clip_norm=1", NULL}, &e1);
  const PsProgram *a = ps_plan_program(p0, 0), *b = ps_plan_program(p1, 0);
  const PsOp *clip = NULL;
  int upd = -1;
  for (int i = 0; i < b->n_ops; i++) {
    if (b->ops[i].kind == PS_OP_CLIP)
      clip = &b->ops[i];
    if (b->ops[i].kind == PS_OP_UPDATE)
      upd = i;
  }
  g_assert_nonnull(clip);
  g_assert_cmpint(b->n_ops, ==, a->n_ops + 5); /* CLIP, two START/DONE pairs */
  g_assert_true(b->ops[upd - 5].kind == PS_OP_CLIP);
  double P = (double)clip->param_len, whole = (double)e1->model->params / 8.0;
  g_assert_cmpfloat(P, >=, whole);
  g_assert_cmpfloat(P, <, whole * 1.001);
  g_assert_cmpfloat(clip->hbm_bytes, ==, 4.0 * P);
  g_assert_cmpfloat(clip->flops, ==, 2.0 * P);
  const PsTopology *t = e1->topology;
  double want = 4.0 * P / ps_topology_device_hbm_bandwidth(t) + t->op_overhead_s;
  g_assert_cmpfloat(fabs(ps_time_to_s(clip->time) - want), <, 1e-9);
  g_assert_cmpint(count_colls(p1, PS_AXIS_FSDP, PS_COLL_ALL_REDUCE, "grad norm"), ==, 1);
  g_assert_cmpint(count_colls(p1, PS_AXIS_TENSOR, PS_COLL_ALL_REDUCE, "grad norm"), ==, 1);
  for (int c = 0; c < p1->n_colls; c++)
    if (strstr(p1->colls[c].name, "grad norm"))
      g_assert_cmpint(p1->colls[c].count, ==, 1);
  double t0 = finish_s(e0, p0), t1 = finish_s(e1, p1);
  g_assert_cmpfloat(t1 - t0, >=, ps_time_to_s(clip->time) * e1->steps - 1e-9);
  ps_plan_free(p0);
  ps_plan_free(p1);
  ps_experiment_free(e0);
  ps_experiment_free(e1);
}

/* LARS or LAMB where a device updates a shard of each layer: the update
 * in two passes, between them an all-reduce of two floats an adapted
 * layer (after the clipping norm's float) over the fsdp group and one
 * over the tensor group; Adam's update is one op.  With micro-batches
 * the gradients held until the update are freed once: a step's ops leave
 * nothing live. */
static void test_layerwise_norms(void)
{
  const char *kinds[] = {"optimizer.kind=lamb", "optimizer.kind=lars", "optimizer.kind=adam"};
  for (guint k = 0; k < 2 * G_N_ELEMENTS(kinds); k++) {
    PsExperiment *e;
    const char *mbs = k >= G_N_ELEMENTS(kinds) ? "strategy.micro_batches=2" : NULL;
    PsPlan *p = compile((const char *[]){kinds[k % 3], mbs, NULL}, &e);
    int64_t layers = 0;
    for (int l = 0; l < e->model->n_layers; l++)
      layers += ps_layer_adapted_params(&e->model->layers[l]) > 0;
    const PsProgram *pr = ps_plan_program(p, 0);
    int pass[3] = {-1, -1, -1}, norms[2] = {-1, -1};
    for (int i = 0; i < pr->n_ops; i++) {
      const PsOp *o = &pr->ops[i];
      if (o->kind == PS_OP_UPDATE) {
        g_assert_cmpint(pass[o->update_pass], <, 0);
        pass[o->update_pass] = i;
      }
      if (o->kind != PS_OP_COLL_START || !strstr(p->colls[o->coll].name, "layer norms"))
        continue;
      const PsPlanColl *c = &p->colls[o->coll];
      g_assert_cmpint(c->op, ==, PS_COLL_ALL_REDUCE);
      g_assert_cmpint(c->buffer, ==, PS_BUFFER_NORM);
      g_assert_cmpint(c->count, ==, 2 * layers);
      g_assert_cmpint(c->offset, ==, 1);
      int a = c->axis == PS_AXIS_FSDP ? 0 : 1;
      g_assert_cmpint(norms[a], <, 0);
      norms[a] = i;
    }
    int64_t live = 0;
    for (int i = 0; i < pr->n_ops; i++)
      live += pr->ops[i].act_bytes;
    g_test_message("%s%s: %" G_GINT64_FORMAT " adapted layers; updates at %d / %d, %d; norms' "
                   "all-reduces at %d (fsdp), %d (tensor); %" G_GINT64_FORMAT " bytes left live",
                   kinds[k % 3], mbs ? ", 2 micro-batches" : "", layers, pass[0], pass[1],
                   pass[2], norms[0], norms[1], live);
    g_assert_cmpint(live, ==, 0);
    if (k % 3 < 2) {
      g_assert_cmpint(pass[0], <, 0);
      for (int a = 0; a < 2; a++) {
        g_assert_cmpint(pass[1], <, norms[a]);
        g_assert_cmpint(norms[a], <, pass[2]);
      }
    } else {
      g_assert_cmpint(pass[0], >=, 0);
      g_assert_cmpint(pass[1] + pass[2] + norms[0] + norms[1], ==, -4);
    }
    ps_plan_free(p);
    ps_experiment_free(e);
  }
}

static int count_colls(const PsPlan *p, PsAxis axis, PsCollOp op, const char *has)
{
  const PsProgram *pr = ps_plan_program(p, 0);
  int n = 0;
  for (int i = 0; i < pr->n_ops; i++) {
    const PsOp *o = &pr->ops[i];
    if (o->kind != PS_OP_COLL_START)
      continue;
    const PsPlanColl *c = &p->colls[o->coll];
    n += c->axis == axis && c->op == op && (!has || strstr(c->name, has));
  }
  return n;
}

static void test_megatron(void)
{
  const char *ov[] = {"strategy.mesh.tensor=4", NULL};
  PsExperiment *e;
  PsPlan *p = compile(ov, &e);
  int layers = 24;
  /* two per layer, and the vocab-parallel embedding's partial output
   * (its 30522 rows padded over the 4, test_vocab_padded) */
  g_assert_cmpint(count_colls(p, PS_AXIS_TENSOR, PS_COLL_ALL_REDUCE, " out"), ==, 2 * layers + 1);
  g_assert_cmpint(count_colls(p, PS_AXIS_TENSOR, PS_COLL_ALL_REDUCE, "in-grad"), ==,
                  2 * layers);
  int64_t bsd = e->global_batch / 4 * 512 * 1024;
  for (int c = 0; c < p->n_colls; c++)
    if (p->colls[c].axis == PS_AXIS_TENSOR)
      g_assert_cmpint(p->colls[c].count, ==, bsd);
  ps_plan_free(p);
  ps_experiment_free(e);
}

/* FWD ops of device 0 whose layers hold weights. */
/* Sequence parallelism (tensor 4 x sequence 2): each all-reduce becomes a
 * reduce-scatter onto rows and an all-gather before the next split layer,
 * so per layer 2 of each forward and their conjugates backward, and no
 * tensor all-reduce is left. */
/* The input gradient's collective overlaps the weight gradient: a BWD op
 * whose input gradient a tensor collective completes is followed by that
 * collective's start, then its weight-gradient kernels (a tail, no
 * numerics of its own), then the collective's done.  The tail of the
 * column-parallel fc1 (1024 -> 4096 over tensor 4) is its weight gradient
 * exactly, 2 x batch x 512 x 1024 x 1024 FLOPs; attention's input
 * gradient waits for its whole backward, whose kernels mix its weight and
 * activation products.  Run against the same
 * plan with every tail moved back before its collective (the serial
 * order), the steps end earlier, by no more than the tails' time. */
static void test_wgrad_overlap(void)
{
  /* asynchronous collectives (offloaded), under which the tail can run */
  const char *ov[] = {"strategy.mesh.tensor=4", "strategy.mesh.fsdp=1", "global_batch=16",
                      "steps=2", "collective.on_core=[]", NULL};
  PsExperiment *e;
  PsPlan *p = compile(ov, &e);
  PsPlan *q = own_programs(p);
  int tails = 0;
  double tail_s = 0;
  for (int d = 0; d < q->n_devices; d++) {
    PsProgram *pr = &q->programs[q->program_of[d]];
    for (int t = 0; t < pr->n_ops; t++) {
      if (!pr->ops[t].tail)
        continue;
      int h = t - 1;
      while (h >= 0 && pr->ops[h].kind == PS_OP_COLL_START) {
        const PsPlanColl *c = &q->colls[pr->ops[h].coll];
        g_assert_cmpint(c->buffer, ==, PS_BUFFER_ACT_GRADS);
        h--;
      }
      g_assert_cmpint(h, <, t - 1); /* at least one collective in flight */
      g_assert_cmpint(pr->ops[h].kind, ==, PS_OP_BWD);
      g_assert_false(pr->ops[h].tail);
      g_assert_cmpint(pr->ops[h].first, ==, pr->ops[t].first);
      g_assert_cmpint(pr->ops[t + 1].kind, ==, PS_OP_COLL_DONE);
      g_assert_cmpint(pr->ops[t + 1].coll, ==, pr->ops[h + 1].coll);
      if (d == 0) {
        tails++;
        tail_s += ps_time_to_s(pr->ops[t].time);
        if (strstr(pr->ops[t].name, "fc1"))
          g_assert_cmpfloat(pr->ops[t].mxu_flops, ==,
                            2.0 * (double)pr->ops[t].batch * 512 * 1024 * 1024);
      }
      PsOp tail = pr->ops[t]; /* the serial order: tail before the starts */
      memmove(&pr->ops[h + 2], &pr->ops[h + 1], sizeof(PsOp) * (size_t)(t - h - 1));
      pr->ops[h + 1] = tail;
    }
  }
  g_assert_cmpint(tails, ==, 24); /* fc1 of each layer (not attention: below) */
  double overlapped = finish_s(e, p), serial = finish_s(e, q);
  g_assert_cmpfloat(overlapped, <, serial);
  g_assert_cmpfloat(serial - overlapped, <=, 2 * tail_s * (1 + 1e-9));
  ps_plan_free(q);
  ps_plan_free(p);
  ps_experiment_free(e);
}

/* sequence_parallel: the tensor group of 4 splits the rows itself
 * (Megatron-LM's --sequence-parallel; MaxText's tensor axis, which shards
 * the activations' embedding): the plan of tensor 2 x sequence 2, a group
 * of 4 too, collective for collective (op, members, elements) and op for
 * op (FLOPs, HBM bytes, activation bytes), where tensor 4 alone
 * all-reduces the partial sums and keeps whole activations, more of
 * them. */
static void test_sequence_parallel(void)
{
  const char *sp[] = {"strategy.mesh.tensor=4", "strategy.sequence_parallel=true",
                      "strategy.mesh.fsdp=1", NULL};
  const char *ts[] = {"strategy.mesh.tensor=2", "strategy.mesh.sequence=2",
                      "strategy.mesh.fsdp=1", NULL};
  const char *t4[] = {"strategy.mesh.tensor=4", "strategy.mesh.fsdp=1", NULL};
  PsExperiment *ea, *eb, *ec;
  PsPlan *a = compile(sp, &ea), *b = compile(ts, &eb), *c = compile(t4, &ec);
  const PsProgram *pa = ps_plan_program(a, 0), *pb = ps_plan_program(b, 0);
  g_assert_cmpint(pa->n_ops, ==, pb->n_ops);
  g_assert_cmpint(count_colls(a, PS_AXIS_SEQUENCE, PS_COLL_REDUCE_SCATTER, NULL), >, 0);
  g_assert_cmpint(count_colls(a, PS_AXIS_SEQUENCE, PS_COLL_REDUCE_SCATTER, NULL), ==,
                  count_colls(b, PS_AXIS_SEQUENCE, PS_COLL_REDUCE_SCATTER, NULL));
  g_assert_cmpint(count_colls(c, PS_AXIS_SEQUENCE, PS_COLL_REDUCE_SCATTER, NULL), ==, 0);
  for (int i = 0; i < pa->n_ops; i++) {
    const PsOp *x = &pa->ops[i], *y = &pb->ops[i];
    g_assert_cmpint(x->kind, ==, y->kind);
    g_assert_cmpfloat(x->flops, ==, y->flops);
    g_assert_cmpfloat(x->hbm_bytes, ==, y->hbm_bytes);
    g_assert_cmpint(x->act_bytes, ==, y->act_bytes);
    if (x->kind == PS_OP_COLL_START) {
      const PsPlanColl *u = &a->colls[ps_plan_op_coll(a, 0, x)];
      const PsPlanColl *v = &b->colls[ps_plan_op_coll(b, 0, y)];
      g_assert_cmpint(u->op, ==, v->op);
      g_assert_cmpint(u->n_members, ==, v->n_members);
      g_assert_cmpint(u->count, ==, v->count);
    }
  }
  int64_t left = 0;
  g_assert_cmpint(act_peak(a, &left), <, act_peak(c, &left));
  ps_plan_free(a);
  ps_plan_free(b);
  ps_plan_free(c);
  ps_experiment_free(ea);
  ps_experiment_free(eb);
  ps_experiment_free(ec);
}

static void test_sequence(void)
{
  const char *ov[] = {"strategy.mesh.sequence=2", "strategy.mesh.fsdp=1", NULL};
  PsExperiment *e;
  PsPlan *p = compile(ov, &e);
  int layers = 24;
  /* plus the span head (2 units, left whole): its input gathered, the
   * gradient scattered back; and the vocab-parallel embedding (30522 rows
   * padded over the 4): its partial output scattered onto rows, the
   * gradient gathered back */
  g_assert_cmpint(count_colls(p, PS_AXIS_SEQUENCE, PS_COLL_REDUCE_SCATTER, NULL), ==,
                  4 * layers + 2);
  g_assert_cmpint(count_colls(p, PS_AXIS_SEQUENCE, PS_COLL_ALL_GATHER, NULL), ==,
                  4 * layers + 2);
  g_assert_cmpint(count_colls(p, PS_AXIS_TENSOR, PS_COLL_ALL_REDUCE, NULL), ==, 0);
  /* each device normalizes its own rows: every layernorm's gradients
   * (2 per layer, the embedding's) are all-reduced over the group of
   * tensor 4 x sequence 2, whole (its gains are not split), and done
   * before the data buckets or the update read them */
  const PsProgram *pr = ps_plan_program(p, 0);
  int norms = 0, open = 0;
  for (int i = 0; i < pr->n_ops; i++) {
    const PsOp *o = &pr->ops[i];
    gboolean is_coll = o->kind == PS_OP_COLL_START || o->kind == PS_OP_COLL_DONE;
    const PsPlanColl *c = &p->colls[is_coll ? ps_plan_op_coll(p, 0, o) : 0];
    gboolean norm = is_coll && c->axis == PS_AXIS_SEQUENCE && c->op == PS_COLL_ALL_REDUCE;
    if (norm && o->kind == PS_OP_COLL_START) {
      g_assert_cmpint(c->buffer, ==, PS_BUFFER_GRADS);
      g_assert_cmpint(c->n_members, ==, 8);
      g_assert_cmpint(c->count, ==, e->model->layers[c->layer].params);
      g_assert_cmpint(ps_layer_kind_lower(e->model->layers[c->layer].kind)->tensor, ==,
                      PS_TP_NORM);
      norms++;
      open++;
    } else if (norm) {
      open--;
    } else if (o->kind == PS_OP_UPDATE ||
               (o->kind == PS_OP_COLL_START && c->axis == PS_AXIS_DATA)) {
      g_assert_cmpint(open, ==, 0);
    }
  }
  g_assert_cmpint(norms, ==, 2 * layers + 1);
  ps_plan_free(p);
  ps_experiment_free(e);
}

static int ops_with_weights(const PsPlan *p, const PsModel *m)
{
  const PsProgram *pr = ps_plan_program(p, 0);
  int n = 0;
  for (int i = 0; i < pr->n_ops; i++) {
    const PsOp *o = &pr->ops[i];
    int64_t w = 0;
    for (int l = o->first; o->kind == PS_OP_FWD && l <= o->last; l++)
      w += m->layers[l].params;
    n += w > 0;
  }
  return n;
}

static void test_fsdp_gathers(void)
{
  const char *ov[] = {"strategy.mesh.tensor=1", "strategy.mesh.fsdp=16", NULL};
  const char *keep[] = {"strategy.mesh.tensor=1", "strategy.mesh.fsdp=16",
                        "strategy.regather=false", NULL};
  PsExperiment *e, *k;
  PsPlan *p = compile(ov, &e), *q = compile(keep, &k);
  int w = ops_with_weights(p, e->model);
  g_assert_cmpint(w, >=, 24 * 3); /* attention, fc1, fc2 (norms fused) per layer */
  g_assert_cmpint(count_colls(p, PS_AXIS_FSDP, PS_COLL_ALL_GATHER, NULL), ==, 2 * w);
  g_assert_cmpint(count_colls(q, PS_AXIS_FSDP, PS_COLL_ALL_GATHER, NULL), ==, w);
  g_assert_cmpint(count_colls(p, PS_AXIS_FSDP, PS_COLL_REDUCE_SCATTER, NULL), ==, w);
  /* static HBM: weights, gradients and 2 Adam slots of each op's shard */
  int64_t shard = 0;
  for (int c = 0; c < p->n_colls; c++)
    if (p->colls[c].op == PS_COLL_REDUCE_SCATTER)
      shard += (p->colls[c].count + 15) / 16;
  g_assert_cmpint(ps_plan_program(p, 0)->hbm_static_bytes, ==, shard * 16);
  ps_plan_free(p);
  ps_plan_free(q);
  ps_experiment_free(e);
  ps_experiment_free(k);
}

/* collective.on_core: BERT-large fsdp 4 x tensor 4 with every collective
 * on the TensorCore (the default) exposes all of each axis's collective time (exposed
 * equals busy on every axis), its step is the sum of its breakdown and
 * longer than with the same collectives asynchronous, which hide some. */
static void test_on_core(void)
{
  const char *async[] = {"strategy.mesh.fsdp=4", "strategy.mesh.tensor=4", "steps=2",
                         "collective.on_core=[]", NULL};
  const char *core[] = {"strategy.mesh.fsdp=4", "strategy.mesh.tensor=4", "steps=2", NULL};
  PsSummary s[2];
  for (int k = 0; k < 2; k++) {
    GError *error = NULL;
    PsExperiment *e = load(k ? core : async, &error);
    g_assert_no_error(error);
    PsRunOptions opt = {0};
    g_assert_true(ps_run(e, &opt, &s[k], &error));
    g_assert_no_error(error);
    ps_experiment_free(e);
  }
  double hidden = 0;
  for (int a = 0; a < PS_N_AXES; a++) {
    hidden += s[0].axis_busy_s[a] - s[0].axis_exposed_s[a];
    g_assert_cmpfloat_with_epsilon(s[1].axis_exposed_s[a], s[1].axis_busy_s[a],
                                   1e-9 * s[1].step_time_s);
  }
  g_assert_cmpfloat(s[1].axis_busy_s[PS_AXIS_FSDP], >, 0);
  g_assert_cmpfloat(s[1].axis_busy_s[PS_AXIS_TENSOR], >, 0);
  g_assert_cmpfloat(hidden, >, 0.01 * s[0].step_time_s);
  g_assert_cmpfloat(s[1].step_time_s, >, s[0].step_time_s + 0.5 * hidden);
  double sum = 0;
  for (int c = 0; c < PS_TIME_N_CATEGORIES; c++)
    sum += s[1].breakdown[c];
  g_assert_cmpfloat_with_epsilon(sum, s[1].step_time_s, 1e-9 * s[1].step_time_s);
  ps_summary_clear(&s[0]);
  ps_summary_clear(&s[1]);
}

/* tests/data/good/experiments/shard-mlp-v4-8.json: tensor 4 on a 2x2
 * ring, one all-reduce of the row-parallel fc2's B x 8192 partial sums a
 * step, nothing else to share the links: the step's exposed collective
 * time is the ring's alpha-beta closed form, 2 (n - 1) steps of
 * alpha + (m / n) / B. */
static void test_allreduce_closed_form(void)
{
  GError *error = NULL;
  PsExperiment *e =
      ps_experiment_load("tests/data/good/experiments/shard-mlp-v4-8.json", NULL, &error);
  g_assert_no_error(error);
  PsPlan *p = ps_strategy_compile(e, &error);
  g_assert_no_error(error);
  g_assert_cmpint(p->n_colls, ==, 1); /* one group of 4 */
  double m = (double)e->global_batch * 8192 * 2, n = 4;
  double alpha = e->topology->ici_latency_s, bw = e->topology->ici_bandwidth_Bps;
  double want = 2 * (n - 1) * (alpha + m / n / bw);
  PsRunOptions opt = {0};
  PsSummary s;
  g_assert_true(ps_run(e, &opt, &s, &error));
  g_assert_no_error(error);
  g_assert_cmpfloat_with_epsilon(s.breakdown[PS_TIME_COLLECTIVE], want, want * 1e-3);
  /* fc1's shard: a quarter of the whole layer's forward FLOPs (4096 / 4 =
   * 1024 columns, a multiple of the MXU's 128: no padding) */
  const PsProgram *pr = ps_plan_program(p, 0);
  const PsModel *mod = e->model;
  double whole = (mod->layers[0].fwd_flops + mod->layers[1].fwd_flops) * (double)e->global_batch;
  g_assert_cmpfloat_with_epsilon(pr->ops[1].flops, whole / 4, whole * 1e-12);
  ps_summary_clear(&s);
  ps_plan_free(p);
  ps_experiment_free(e);
}

/* Without a mesh, shard is data parallelism over every device: with real
 * numerics (the MLP on Fashion-MNIST, 6 steps) it matches the replicate
 * strategy: the same step time, weights and loss. */
static void test_data_only_numerics(void)
{
  const char *path = "tests/data/good/experiments/mlp-v3-8.json";
  const char *rep[] = {"steps=6", NULL};
  const char *sh[] = {"steps=6", "strategy={\"kind\": \"shard\"}", NULL};
  PsSummary s[2];
  for (int k = 0; k < 2; k++) {
    GError *error = NULL;
    PsExperiment *e = ps_experiment_load(path, k ? sh : rep, &error);
    g_assert_no_error(error);
    g_assert_true(e->numerics.enabled);
    PsRunOptions opt = {.keep_params = TRUE};
    g_assert_true(ps_run(e, &opt, &s[k], &error));
    g_assert_no_error(error);
    ps_experiment_free(e);
  }
  g_assert_cmpfloat(s[0].step_time_s, ==, s[1].step_time_s);
  /* the mesh numbers replicas in torus order, not device order, so the
   * gradients are summed in another order: equal up to float reordering
   * (6 steps of lr-scaled sums of 8 terms: far inside 1e-5) */
  g_assert_cmpfloat_with_epsilon(s[0].loss_last, s[1].loss_last, 1e-5 * s[0].loss_last);
  g_assert_cmpuint(s[0].n_params, ==, s[1].n_params);
  double worst = 0;
  for (size_t i = 0; i < s[0].n_params; i++)
    worst = MAX(worst, fabs((double)s[0].params[i] - s[1].params[i]) /
                           (1e-3 + fabs((double)s[0].params[i])));
  g_assert_cmpfloat(worst, <, 1e-5);
  ps_summary_clear(&s[0]);
  ps_summary_clear(&s[1]);
}

/* Weights stored in bf16 (numerics.weight_precision): LLaMA-2 7B over
 * fsdp 32 holds exactly half the static HBM (weights, gradients, Adam's
 * two slots: 2 x 4 bytes a weight's share against 4 x 4), its
 * gradients' reduce-scatters carry 2-byte elements (bf16 gradients are
 * reduced in bf16, reduce_precision "f32" or not), its weight all-gathers
 * 2-byte elements either way (a float32 weight is converted to the bf16
 * step's compute type on its shard, before the gather; 4 bytes in a
 * float32 step),
 * its update reads and writes half the bytes, and the compute ops (the
 * ops but the collectives', whose buckets now hold twice the weights) are
 * unchanged; with numerics on (the char
 * decoder over fsdp 2, 3 steps) every weight the run ends with is a bf16
 * value and the loss falls as it does in f32. */
static void test_weight_precision(void)
{
  PsExperiment *e32, *e16;
  PsPlan *a = llama("strategy.rematerialize=full", NULL, &e32);
  PsPlan *b = llama("strategy.rematerialize=full", "numerics.weight_precision=bf16", &e16);
  PsExperiment *e4;
  PsPlan *f = llama("strategy.rematerialize=full", "numerics.precision=f32", &e4);
  int gathers4 = 0;
  for (int c = 0; c < f->n_colls; c++)
    if (f->colls[c].buffer == PS_BUFFER_PARAMS && f->colls[c].op == PS_COLL_ALL_GATHER) {
      g_assert_cmpint(f->colls[c].elem_bytes, ==, 4);
      gathers4++;
    }
  g_assert_cmpint(gathers4, >, 0);
  ps_plan_free(f);
  ps_experiment_free(e4);
  const PsProgram *pa = ps_plan_program(a, 0), *pb = ps_plan_program(b, 0);
  g_assert_cmpint(pa->hbm_static_bytes, ==, 2 * pb->hbm_static_bytes);
  g_assert_cmpint(pa->hbm_static_bytes, ==, (int64_t)ceil(e32->model->params / 32.0) * 4 * 4);
  int ia = 0, ib = 0, compute = 0;
  for (;; ia++, ib++) {
    while (ia < pa->n_ops &&
           (pa->ops[ia].kind == PS_OP_COLL_START || pa->ops[ia].kind == PS_OP_COLL_DONE))
      ia++;
    while (ib < pb->n_ops &&
           (pb->ops[ib].kind == PS_OP_COLL_START || pb->ops[ib].kind == PS_OP_COLL_DONE))
      ib++;
    g_assert_cmpint(ia < pa->n_ops, ==, ib < pb->n_ops);
    if (ia == pa->n_ops)
      break;
    const PsOp *x = &pa->ops[ia], *y = &pb->ops[ib];
    g_assert_cmpint(x->kind, ==, y->kind);
    if (x->kind == PS_OP_UPDATE)
      g_assert_cmpfloat(x->hbm_bytes, ==, 2 * y->hbm_bytes);
    else
      g_assert_cmpint(x->time, ==, y->time);
    compute++;
  }
  g_assert_cmpint(compute, >, 0);
  int gathers = 0, scatters = 0;
  for (int k = 0; k < 2; k++) {
    const PsPlan *p = k ? b : a;
    for (int c = 0; c < p->n_colls; c++) {
      const PsPlanColl *pc = &p->colls[c];
      if (pc->buffer == PS_BUFFER_PARAMS && pc->op == PS_COLL_ALL_GATHER) {
        g_assert_cmpint(pc->elem_bytes, ==, 2);
        gathers++;
      } else if (pc->buffer == PS_BUFFER_GRADS && pc->op == PS_COLL_REDUCE_SCATTER) {
        g_assert_cmpint(pc->elem_bytes, ==, k ? 2 : 4);
        scatters++;
      }
    }
  }
  g_assert_cmpint(gathers, >, 0);
  g_assert_cmpint(scatters, >, 0);
  ps_plan_free(a);
  ps_plan_free(b);
  ps_experiment_free(e32);
  ps_experiment_free(e16);
  PsSummary sum[2];
  for (int k = 0; k < 2; k++) {
    const char *ov[] = {"steps=3", "steps_per_run=1", "numerics.evaluate=false",
                        "strategy={\"kind\": \"shard\", \"mesh\": {\"fsdp\": 2}}",
                        k ? "numerics.weight_precision=bf16" : NULL, NULL};
    GError *error = NULL;
    PsExperiment *e = ps_experiment_load("experiments/char-decoder-v4-8.json", ov, &error);
    g_assert_no_error(error);
    PsRunOptions opt = {.keep_params = TRUE};
    g_assert_true(ps_run(e, &opt, &sum[k], &error));
    g_assert_no_error(error);
    ps_experiment_free(e);
  }
  for (size_t i = 0; i < sum[1].n_params; i++)
    g_assert_cmpfloat(sum[1].params[i], ==, ps_bf16_round(sum[1].params[i]));
  int moved = 0;
  for (size_t i = 0; i < sum[0].n_params; i++)
    moved += sum[0].params[i] != ps_bf16_round(sum[0].params[i]);
  g_assert_cmpint(moved, >, 0); /* the f32 run's are not */
  for (int k = 0; k < 2; k++) {
    g_assert_true(isfinite(sum[k].loss_last));
    g_assert_cmpfloat(sum[k].loss_last, <, sum[k].loss_first);
  }
  g_assert_cmpfloat(fabs(sum[1].loss_first - sum[0].loss_first), <, 0.01 * sum[0].loss_first);
  ps_summary_clear(&sum[0]);
  ps_summary_clear(&sum[1]);
}

static void bad(const char *const *ov, const char *key)
{
  GError *error = NULL;
  PsExperiment *e = load(ov, &error);
  g_assert_null(e);
  g_assert_error(error, PS_INPUT_ERROR, error->code);
  if (!strstr(error->message, key))
    g_error("'%s' does not name %s", error->message, key);
  g_clear_error(&error);
}

static void test_bad_input(void)
{
  const char *product[] = {"strategy.mesh.data=3", NULL};
  bad(product, "has 16");
  const char *h2[] = {"topology=tpu-v4-64", "strategy.mesh.fsdp=1", "strategy.mesh.tensor=32",
                      NULL};
  bad(h2, "heads");
  const char *seq[] = {"strategy.mesh.tensor=1", "strategy.mesh.sequence=2", NULL};
  bad(seq, "strategy.mesh.sequence");
  const char *cm[] = {"strategy.mesh.tensor=1", "strategy.collective_matmul=true", NULL};
  bad(cm, "strategy.collective_matmul");
  const char *sp[] = {"strategy.mesh.tensor=1", "strategy.sequence_parallel=true", NULL};
  bad(sp, "strategy.sequence_parallel");
  const char *axis[] = {"strategy.mesh.model=2", NULL};
  bad(axis, "model");
  /* clipping: of the reduced gradient only, without stages, timing only */
  const char *clip[] = {"optimizer.clip_norm=1", "optimizer.clip_before_reduce=true", NULL};
  bad(clip, "optimizer.clip_before_reduce: a sharded step clips the reduced gradient");
  const char *clipst[] = {"optimizer.clip_norm=1", "strategy.mesh.stage=2",
                          "strategy.mesh.data=2", "strategy.mesh.tensor=2", NULL};
  bad(clipst, "optimizer.clip_norm: clipping by global norm is modelled without pipeline stages");
  const char *num[] = {"numerics.enabled=true", NULL}; /* bert-large */
  bad(num, "numerics.enabled=false");
  /* a model with numerics: what the shard strategy itself refuses */
#define TEXT "input={\"source\": \"text\", \"file\": \"/usr/share/games/fortunes\"}"
  /* tiny-decoder's 2 key/value heads do not split over tensor 2 x sequence 2 */
  const char *numseq[] = {"model=tiny-decoder", "numerics.enabled=true", TEXT,
                          "strategy.mesh.fsdp=1", "strategy.mesh.tensor=2",
                          "strategy.mesh.sequence=2", "strategy.mesh.data=4", NULL};
  bad(numseq, "strategy.mesh.tensor x sequence");
  const char *numlamb[] = {"model=char-decoder", "numerics.enabled=true", TEXT,
                           "strategy.mesh.fsdp=2", "strategy.mesh.tensor=2",
                           "strategy.mesh.data=4", "strategy.collective_matmul=true",
                           "optimizer.kind=lamb", NULL};
  bad(numlamb, "layer-wise optimizer");
  /* tensor x fsdp: its packed shards carry no layer's norms */
  const char *numlars[] = {"model=char-decoder", "numerics.enabled=true", TEXT,
                           "strategy.mesh.fsdp=2", "strategy.mesh.tensor=2",
                           "strategy.mesh.data=4", "optimizer.kind=lars", NULL};
  bad(numlars, "numerics.enabled: true is not yet supported with a layer-wise optimizer "
               "(optimizer.kind lars or lamb) on a tensor x fsdp mesh");
#undef TEXT
  const char *batch[] = {"global_batch=10", NULL};
  bad(batch, "global_batch");
  const char *keep[] = {"strategy.rematerialize=custom", "strategy.remat_keep=[\"mlpwq\"]", NULL};
  bad(keep, "strategy.remat_keep: names what a decoder layer does not have: \"mlpwq\"");
  const char *twice[] = {"strategy.rematerialize=custom",
                         "strategy.remat_keep=[\"context\", \"context\"]", NULL};
  bad(twice, "names a checkpoint twice");
  const char *policy[] = {"strategy.rematerialize=minimal", "strategy.remat_keep=[\"context\"]",
                          NULL};
  bad(policy, "read only with strategy.rematerialize \"custom\"");
  const char *both[] = {"strategy.rematerialize=custom", "strategy.remat_keep=[\"context\"]",
                        "strategy.remat_offload=[\"context\"]", NULL};
  bad(both, "strategy.remat_offload: names \"context\", which strategy.remat_keep names too");
  /* data 16 on 4 GiB devices: 2.5 GiB of weights and gradients, 2.5 GiB of
   * Adam slots and 1.1 GiB of activations; fsdp 2 halves the first two */
  const char *fit[] = {"strategy.mesh.tensor=1", "strategy.mesh.fsdp=1",
                       "topology.chip.hbm_bytes=4GiB", NULL};
  bad(fit, "4.0 GiB per device; raise strategy.mesh.fsdp to 2 (and lower strategy.mesh.data "
           "to 8)");
  /* fsdp over every device and still too big: what applies instead (no
   * fsdp to raise; full rematerialization, micro-batches, a smaller batch) */
  const char *whole[] = {"strategy.mesh={\"fsdp\": 16}", "strategy.rematerialize=minimal",
                         "global_batch=64", "topology.chip.hbm_bytes=1GiB", NULL};
  bad(whole, "per device; set strategy.rematerialize=\"full\"");
  bad(whole, "split each device's 4 examples into strategy.micro_batches");
  bad(whole, "or lower global_batch");
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/shard/mesh/tensor-neighbours", test_mesh_neighbours);
  g_test_add_func("/shard/buckets-counted", test_buckets_counted);
  g_test_add_func("/shard/row-major-warning", test_row_major_warning);
  g_test_add_func("/shard/mesh/rest", test_mesh_rest);
  g_test_add_func("/shard/flops/tensor-split", test_flops_tensor);
  g_test_add_func("/shard/remat/minimal", test_remat_minimal);
  g_test_add_func("/shard/remat/units", test_remat_units);
  g_test_add_func("/shard/remat/minimal-rows", test_remat_minimal_rows);
  g_test_add_func("/shard/remat/rerun", test_remat_rerun);
  g_test_add_func("/shard/remat/custom-bounds", test_remat_custom_bounds);
  g_test_add_func("/shard/remat/offload", test_remat_offload);
  g_test_add_func("/shard/weight-precision", test_weight_precision);
  g_test_add_func("/shard/vocab/padded", test_vocab_padded);
  g_test_add_func("/shard/vocab/matmul-lookup", test_vocab_matmul_lookup);
  g_test_add_func("/shard/clip", test_clip);
  g_test_add_func("/shard/layerwise-norms", test_layerwise_norms);
  g_test_add_func("/shard/kernels/local", test_kernels_local);
  g_test_add_func("/shard/vocab/lookup-remat", test_lookup_remat);
  g_test_add_func("/shard/collectives/megatron", test_megatron);
  g_test_add_func("/shard/fsdp/gathers", test_fsdp_gathers);
  g_test_add_func("/shard/collectives/sequence", test_sequence);
  g_test_add_func("/shard/collectives/sequence-parallel", test_sequence_parallel);
  g_test_add_func("/shard/collectives/wgrad-overlap", test_wgrad_overlap);
  g_test_add_func("/shard/collectives/on-core", test_on_core);
  g_test_add_func("/shard/bad-input", test_bad_input);
  g_test_add_func("/shard/programs/shared", test_shared_programs);
  g_test_add_func("/shard/numerics/data-only", test_data_only_numerics);
  g_test_add_func("/shard/collectives/allreduce-closed-form", test_allreduce_closed_form);
  return g_test_run();
}
