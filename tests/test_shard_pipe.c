/* test_shard_pipe.c: the shard strategy's pipeline stage axis
 * (strategy/shard-pipe.c), each stage a mesh, against closed forms.
 *
 * - /shard/pipe/stage-one: strategy.mesh.stage = 1 and micro_batches = 1
 *   given explicitly compile the plan of the mesh without them, op for op
 *   and collective for collective, with no stage axis and no SEND or RECV;
 * - /shard/pipe/bubble: with P equal stages (tests/data/good/models/
 *   uniform-dense.json: eight equal dense layers, two a stage), M
 *   micro-batches and communication made negligible, the summary's
 *   pipeline_bubble is (P - 1) / (M + P - 1) of the step (Huang et al.
 *   2019), gpipe and 1f1b, with and without an fsdp axis in the stage;
 * - /shard/pipe/groups: on BERT-large in 2 stages of fsdp 2 x tensor 4,
 *   every collective's members are of one stage, each stage has its own
 *   fsdp and tensor collectives, and every SEND has its RECV at a device
 *   of the next or previous stage with the same data, fsdp and tensor
 *   coordinates, the same tag and 1/T of a micro-batch's activations,
 *   all-gathered over the receiving stage's tensor group (Megatron-LM's
 *   scatter/gather) (with collective matmul's ring steps too);
 * - /shard/pipe/placement: stages are outermost on the torus: the devices
 *   of a stage are a block of neighbouring chips, and on two slices each
 *   stage is one slice;
 * - /shard/pipe/accumulate: BERT-large on one stage of fsdp 2 x tensor 4
 *   (x data 2) in 4 micro-batches: "sharded" reduce-scatters each
 *   micro-batch's gradients (4 times "whole"'s reduce-scatters of the
 *   gradients), "whole" holds the whole gradients instead, so its HBM peak
 *   is exactly (F - 1) shards of weights' bytes above; the data axis
 *   all-reduces the same buckets once either way; on one stage the
 *   default order is 1f1b (each micro-batch's forward then its backward)
 *   and gpipe when asked;
 * - /shard/pipe/bad-input: stages not dividing the devices with the rest
 *   of the mesh, more stages than the model has cuttable units,
 *   micro-batches not dividing the batch of a data x fsdp row, and
 *   numerics with stages: each a PS_INPUT_ERROR naming the key. */
#include "hw/topology.h"
#include "io/config.h"
#include "program/program.h"
#include "run/experiment.h"
#include "run/run.h"
#include "strategy/strategy.h"
#include "support/experiment.h"

#include <math.h>
#include <string.h>

static const char *bert = "experiments/shard-bert-large.json";
static const char *uniform = "tests/data/good/experiments/shard-pipe-uniform.json";

static PsPlan *compile(const char *path, const char *const *ov, PsExperiment **out)
{
  return experiment_compile(path, ov, out);
}

/* Per device 0: gradient reduce-scatters over fsdp, gradient all-reduces
 * over data. */
static void grad_colls(const PsPlan *p, int *rs, int *ar)
{
  const PsProgram *pr = ps_plan_program(p, 0);
  *rs = *ar = 0;
  for (int i = 0; i < pr->n_ops; i++) {
    if (pr->ops[i].kind != PS_OP_COLL_START)
      continue;
    const PsPlanColl *pc = &p->colls[ps_plan_op_coll(p, 0, &pr->ops[i])];
    *rs += pc->op == PS_COLL_REDUCE_SCATTER && pc->buffer == PS_BUFFER_GRADS &&
           pc->axis == PS_AXIS_FSDP;
    *ar += pc->op == PS_COLL_ALL_REDUCE && pc->axis == PS_AXIS_DATA &&
           (pc->buffer == PS_BUFFER_GRADS || pc->buffer == PS_BUFFER_GRAD_SHARDS);
  }
}

static void test_accumulate(void)
{
  const char *mesh = "strategy.mesh={\"data\": 2, \"fsdp\": 2, \"tensor\": 4}";
  const char *sharded[] = {mesh, "strategy.micro_batches=4", NULL};
  const char *whole[] = {mesh, "strategy.micro_batches=4", "strategy.accumulate=whole", NULL};
  PsExperiment *es, *ew;
  PsPlan *s = compile(bert, sharded, &es), *w = compile(bert, whole, &ew);
  int rs_s, ar_s, rs_w, ar_w;
  grad_colls(s, &rs_s, &ar_s);
  grad_colls(w, &rs_w, &ar_w);
  g_test_message("reduce-scatters %d sharded, %d whole; all-reduces %d, %d", rs_s, rs_w, ar_s,
                 ar_w);
  g_assert_cmpint(rs_w, >, 0);
  g_assert_cmpint(rs_s, ==, 4 * rs_w);
  g_assert_cmpint(ar_s, ==, ar_w);
  g_assert_cmpint(ar_s, >, 0);
  /* the held whole gradients: F - 1 = 1 more shard of gradients; the
   * static bytes are a shard's weights, gradients and Adam's two slots, 4
   * float32 arrays of the shard */
  const PsProgram *ps = ps_plan_program(s, 0), *pw = ps_plan_program(w, 0);
  g_assert_cmpint(ps->hbm_static_bytes, ==, pw->hbm_static_bytes);
  g_assert_cmpint(ps->hbm_static_bytes % 4, ==, 0);
  g_assert_cmpint(pw->hbm_peak_bytes - ps->hbm_peak_bytes, ==, (2 - 1) * ps->hbm_static_bytes / 4);
  ps_plan_free(s);
  ps_plan_free(w);
  /* the order on one stage: 1f1b unless asked */
  json_object *st = NULL, *sched = NULL;
  g_assert_true(json_object_object_get_ex(es->resolved, "strategy", &st));
  g_assert_true(json_object_object_get_ex(st, "schedule", &sched));
  g_assert_cmpstr(json_object_get_string(sched), ==, "1f1b");
  ps_experiment_free(es);
  ps_experiment_free(ew);
  const char *gpipe[] = {mesh, "strategy.micro_batches=4", "strategy.schedule=gpipe", NULL};
  PsPlan *g = compile(bert, gpipe, &es);
  g_assert_true(json_object_object_get_ex(es->resolved, "strategy", &st));
  g_assert_true(json_object_object_get_ex(st, "schedule", &sched));
  g_assert_cmpstr(json_object_get_string(sched), ==, "gpipe");
  ps_plan_free(g);
  ps_experiment_free(es);
}

static void test_stage_one(void)
{
  const char *none[] = {NULL};
  const char *one[] = {"strategy.mesh.stage=1", "strategy.micro_batches=1", NULL};
  PsExperiment *ea, *eb;
  PsPlan *a = compile(bert, none, &ea), *b = compile(bert, one, &eb);
  g_assert_false(ps_plan_has_axis(b, PS_AXIS_STAGE));
  g_assert_cmpint(a->n_programs, ==, b->n_programs);
  g_assert_cmpint(a->n_colls, ==, b->n_colls);
  for (int c = 0; c < a->n_colls; c++) {
    g_assert_cmpstr(a->colls[c].name, ==, b->colls[c].name);
    g_assert_cmpint(a->colls[c].count, ==, b->colls[c].count);
    g_assert_cmpmem(a->colls[c].members, sizeof(int) * (size_t)a->colls[c].n_members,
                    b->colls[c].members, sizeof(int) * (size_t)b->colls[c].n_members);
  }
  for (int p = 0; p < a->n_programs; p++) {
    g_assert_cmpint(a->programs[p].n_ops, ==, b->programs[p].n_ops);
    for (int i = 0; i < a->programs[p].n_ops; i++) {
      const PsOp *x = &a->programs[p].ops[i], *y = &b->programs[p].ops[i];
      g_assert_true(x->kind != PS_OP_SEND && x->kind != PS_OP_RECV);
      g_assert_cmpstr(x->name, ==, y->name);
      g_assert_cmpint(x->time, ==, y->time);
    }
  }
  ps_plan_free(a);
  ps_plan_free(b);
  ps_experiment_free(ea);
  ps_experiment_free(eb);
}

/* The bubble of `sched` at P stages and M micro-batches; `mesh` sets the
 * rest of the stage's mesh.  Tolerance: 2% of the closed form.  What is
 * left of communication (1 PB/s, no latency) is a few microseconds of a
 * step of about half a second; what is not equal between the stages is
 * the last one's loss, memory-bound work of about 0.03 ms a micro-batch
 * against 40 ms of dense layers: gpipe pays it once (0.01% off), 1f1b in
 * each of its M steady cycles (P = 2, M = 16: 0.5 ms of the 0.69 s step,
 * 1.3% of the bubble). */
static void check_bubble(const char *sched, int P, int M, const char *mesh)
{
  g_autofree char *stage = g_strdup_printf("strategy.mesh.stage=%d", P);
  g_autofree char *mb = g_strdup_printf("strategy.micro_batches=%d", M);
  g_autofree char *gb = g_strdup_printf("global_batch=%d", 4096 * M);
  const char *ov[] = {stage, mb, gb, sched, mesh, "topology.ici.bandwidth_Bps=1e15",
                      "topology.ici.latency_s=0", "topology.chip.mxu_efficiency=1", NULL};
  PsExperiment *e = experiment_load(uniform, ov);
  PsSummary s = experiment_run(e);
  double frac = s.breakdown[PS_TIME_PIPELINE_BUBBLE] / s.step_time_s;
  double want = (double)(P - 1) / (M + P - 1);
  if (g_test_verbose())
    g_printerr("%s P=%d M=%d %s: bubble %.5f, closed form %.5f\n", sched, P, M, mesh, frac,
               want);
  g_assert_cmpint(s.stages, ==, P);
  g_assert_cmpfloat(fabs(frac - want), <=, 0.02 * want);
  ps_summary_clear(&s);
  ps_experiment_free(e);
}

static void test_bubble(void)
{
  check_bubble("strategy.schedule=gpipe", 4, 8, "strategy.mesh.tensor=2");
  check_bubble("strategy.schedule=1f1b", 4, 8, "strategy.mesh.tensor=2");
  check_bubble("strategy.schedule=gpipe", 2, 4, "strategy.mesh.fsdp=2");
  check_bubble("strategy.schedule=1f1b", 2, 16, "strategy.mesh.fsdp=2");
}

static int stage_of(const PsPlan *p, int d)
{
  return ps_plan_coord(p, d, PS_AXIS_STAGE);
}

static gboolean same_inner(const PsPlan *p, int a, int b)
{
  static const PsAxis inner[] = {PS_AXIS_DATA, PS_AXIS_FSDP, PS_AXIS_TENSOR, PS_AXIS_SEQUENCE};
  for (int i = 0; i < 4; i++)
    if (ps_plan_coord(p, a, inner[i]) != ps_plan_coord(p, b, inner[i]))
      return FALSE;
  return TRUE;
}

/* Every SEND of the plan, matched against its peer's RECVs. */
static void check_transfers(const PsPlan *p)
{
  int sends = 0;
  for (int d = 0; d < p->n_devices; d++) {
    const PsProgram *pr = ps_plan_program(p, d);
    for (int i = 0; i < pr->n_ops; i++) {
      const PsOp *o = &pr->ops[i];
      if (o->kind != PS_OP_SEND || !g_str_has_prefix(o->name, "stage "))
        continue; /* (collective matmul's ring steps stay in the stage) */
      sends++;
      g_assert_true(same_inner(p, d, o->peer));
      g_assert_cmpint(abs(stage_of(p, o->peer) - stage_of(p, d)), ==, 1);
      g_assert_cmpint(o->tag, ==, 2 * o->mb + (stage_of(p, o->peer) < stage_of(p, d)));
      g_assert_cmpfloat(o->bytes, >, 0);
      const PsProgram *q = ps_plan_program(p, o->peer);
      int recvs = 0;
      for (int j = 0; j < q->n_ops; j++)
        recvs += q->ops[j].kind == PS_OP_RECV && q->ops[j].peer == d && q->ops[j].tag == o->tag;
      g_assert_cmpint(recvs, ==, 1);
    }
  }
  /* P - 1 boundaries, each M micro-batches both ways, from every device
   * of a stage's mesh */
  int P = ps_plan_axis_size(p, PS_AXIS_STAGE), M = p->micro_batches;
  g_assert_cmpint(sends, ==, 2 * (P - 1) * M * (p->n_devices / P));
}

static void test_groups(void)
{
  const char *ov[] = {"strategy.mesh.stage=2", "strategy.micro_batches=4", NULL};
  PsExperiment *e;
  PsPlan *p = compile(bert, ov, &e);
  g_assert_cmpint(ps_plan_axis_size(p, PS_AXIS_STAGE), ==, 2);
  g_assert_cmpint(ps_plan_axis_size(p, PS_AXIS_DATA), ==, 1);
  int per_stage[2][PS_N_AXES] = {{0}};
  for (int c = 0; c < p->n_colls; c++) {
    const PsPlanColl *k = &p->colls[c];
    int s = stage_of(p, k->members[0]);
    for (int i = 1; i < k->n_members; i++)
      g_assert_cmpint(stage_of(p, k->members[i]), ==, s);
    per_stage[s][k->axis]++;
  }
  for (int s = 0; s < 2; s++) {
    g_assert_cmpint(per_stage[s][PS_AXIS_FSDP], >, 0);
    g_assert_cmpint(per_stage[s][PS_AXIS_TENSOR], >, 0);
  }
  check_transfers(p);
  /* collective matmul's ring steps beside the stage transfers */
  const char *cm[] = {"strategy.mesh.stage=2", "strategy.micro_batches=4",
                      "strategy.collective_matmul=true", "strategy.schedule=1f1b", NULL};
  PsExperiment *e2;
  PsPlan *p2 = compile(bert, cm, &e2);
  check_transfers(p2);
  ps_plan_free(p2);
  ps_experiment_free(e2);
  /* stage 0's first SEND: a quarter of a micro-batch's activations (4
   * sequences of 512 x 1024, bf16, whole on every tensor device: Megatron's
   * scatter) and its labels; the receivers all-gather them over their
   * tensor group, and the gradients back the same way */
  const PsProgram *pr = ps_plan_program(p, 0);
  for (int i = 0; i < pr->n_ops; i++)
    if (pr->ops[i].kind == PS_OP_SEND) {
      g_assert_cmpfloat(pr->ops[i].bytes, ==, 4.0 * 512 * 1024 * 2 / 4 + 4 * 4);
      break;
    }
  int gathers[2] = {0, 0};
  for (int c = 0; c < p->n_colls; c++) {
    const PsPlanColl *k = &p->colls[c];
    if (strstr(k->name, "stage in") || strstr(k->name, "stage out-grad")) {
      g_assert_cmpint(k->op, ==, PS_COLL_ALL_GATHER);
      g_assert_cmpint(k->axis, ==, PS_AXIS_TENSOR);
      g_assert_cmpint(k->count, ==, 4 * 512 * 1024);
      gathers[stage_of(p, k->members[0])] += strstr(k->name, "stage in") ? 1 : 100;
    }
  }
  /* 4 micro-batches x 2 tensor groups: stage 1 gathers the activations,
   * stage 0 the gradients */
  g_assert_cmpint(gathers[0], ==, 800);
  g_assert_cmpint(gathers[1], ==, 8);
  ps_plan_free(p);
  ps_experiment_free(e);
}

/* The planes along z (geometry axis 3) the devices of stage s span. */
static int stage_planes(const PsPlan *p, const PsGeometry *g, int s)
{
  int lo = G_MAXINT, hi = -1;
  for (int d = 0; d < p->n_devices; d++)
    if (stage_of(p, d) == s) {
      int pos[PS_GEOMETRY_MAX_AXES];
      ps_geometry_device_axes(g, d, pos);
      lo = MIN(lo, pos[3]);
      hi = MAX(hi, pos[3]);
    }
  return hi - lo + 1;
}

static void test_placement(void)
{
  /* tpu-v4-32: 2x2x4 chips; tensor 4 takes x and y, fsdp the inner half
   * of z, the stages its outer half: each stage a 2x2x2 block */
  const char *ov[] = {"strategy.mesh.stage=2", "strategy.micro_batches=2", NULL};
  PsExperiment *e;
  PsPlan *p = compile(bert, ov, &e);
  g_autoptr(PsGeometry) g = ps_geometry_new(e->topology);
  for (int s = 0; s < 2; s++)
    g_assert_cmpint(stage_planes(p, g, s), ==, 2);
  check_transfers(p);
  ps_plan_free(p);
  ps_experiment_free(e);
  /* two slices of tpu-v5e-16: a stage on each, the transfers over the DCN */
  const char *two[] = {"topology=tpu-v5e-16", "topology.slices=2", "strategy.mesh.stage=2",
                       "strategy.mesh.fsdp=4", "strategy.mesh.tensor=4",
                       "strategy.micro_batches=2", NULL};
  p = compile(bert, two, &e);
  int per_slice = p->n_devices / 2;
  for (int d = 0; d < p->n_devices; d++)
    g_assert_cmpint(stage_of(p, d), ==, d / per_slice);
  check_transfers(p);
  ps_plan_free(p);
  ps_experiment_free(e);
}

static void bad(const char *const *ov, const char *key)
{
  GError *error = NULL;
  PsExperiment *e = ps_experiment_load(bert, ov, &error);
  g_assert_null(e);
  g_assert_error(error, PS_INPUT_ERROR, error->code);
  if (!strstr(error->message, key))
    g_error("'%s' does not name %s", error->message, key);
  if (g_test_verbose())
    g_printerr("%s\n", error->message);
  g_clear_error(&error);
}

static void test_bad_input(void)
{
  const char *divide[] = {"strategy.mesh.stage=3", NULL};
  bad(divide, "strategy.mesh.stage");
  const char *units[] = {"model=tests/data/good/models/uniform-dense.json",
                         "strategy.mesh.stage=16", "strategy.mesh.fsdp=1",
                         "strategy.mesh.tensor=1", NULL};
  bad(units, "at most 9");
  const char *mb[] = {"strategy.mesh.stage=2", "strategy.micro_batches=3", NULL};
  bad(mb, "strategy.micro_batches");
#define TEXT "input={\"source\": \"text\", \"file\": \"/usr/share/games/fortunes\"}"
  const char *num[] = {"model=char-decoder", "numerics.enabled=true", TEXT,
                       "strategy.mesh.stage=2", "strategy.mesh.fsdp=2",
                       "strategy.mesh.tensor=2", "strategy.micro_batches=2", NULL};
  bad(num, "strategy.mesh.stage");
#undef TEXT
  const char *sched[] = {"strategy.mesh.stage=2", "strategy.schedule=zigzag", NULL};
  bad(sched, "strategy.schedule");
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/shard/pipe/stage-one", test_stage_one);
  g_test_add_func("/shard/pipe/bubble", test_bubble);
  g_test_add_func("/shard/pipe/groups", test_groups);
  g_test_add_func("/shard/pipe/placement", test_placement);
  g_test_add_func("/shard/pipe/accumulate", test_accumulate);
  g_test_add_func("/shard/pipe/bad-input", test_bad_input);
  return g_test_run();
}
