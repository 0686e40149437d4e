/* partition.c: pipeline stages from a sequential model (see partition.h). */
#include "strategy/partition.h"

#include "hw/cost.h"
#include "strategy/strategy-private.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

gboolean ps_partition_cut_allowed(const PsModel *m, int layer)
{
  g_return_val_if_fail(layer > 0 && layer < m->n_layers, FALSE);
  for (int j = layer; j < m->n_layers; j++) {
    const PsLayer *l = &m->layers[j];
    if (l->input_from < layer - 1)
      return FALSE;
    if (l->kind == PS_LAYER_ADD && l->shortcut_from < layer - 1)
      return FALSE;
  }
  return TRUE;
}

gboolean ps_partition_seed_units(const double *cost, int n, int k, int *first)
{
  double total = 0;
  for (int i = 0; i < n; i++)
    total += cost[i];
  for (int s = 0; s <= k; s++)
    first[s] = -1;
  first[0] = 0;
  first[k] = n;
  double cum = 0;
  int prev = 0;
  for (int i = 0; i < n; i++) {
    cum += cost[i];
    /* the fraction includes unit i itself, as the seed's cumulative
     * histogram does; without FLOPs, units are spread evenly */
    double c = total > 0 ? cum / total : (double)(i + 1) / n;
    int j = MIN((int)floor(c * k), k - 1);
    j = MAX(j, prev);
    if (j != prev) {
      if (j > prev + 1)
        return FALSE; /* stages prev+1 .. j-1 get nothing */
      first[j] = i;
    }
    prev = j;
  }
  return prev == k - 1;
}

/* Stages the greedy fill needs with each stage at most `limit`. */
static int greedy_count(const double *cost, int n, double limit)
{
  int stages = 1;
  double sum = 0;
  for (int i = 0; i < n; i++) {
    if (sum > 0 && sum + cost[i] > limit) {
      stages++;
      sum = 0;
    }
    sum += cost[i];
  }
  return stages;
}

void ps_partition_optimal_units(const double *cost, int n, int k, int *first)
{
  g_return_if_fail(n >= k && k >= 1);
  double lo = 0, hi = 0;
  for (int i = 0; i < n; i++) {
    lo = MAX(lo, cost[i]);
    hi += cost[i];
  }
  /* the bottleneck lies in [max unit, total]; halve it down to rounding */
  if (greedy_count(cost, n, lo) > k)
    for (int it = 0; it < 200 && hi - lo > 1e-12 * hi; it++) {
      double mid = lo + (hi - lo) / 2;
      if (greedy_count(cost, n, mid) <= k)
        hi = mid;
      else
        lo = mid;
    }
  else
    hi = lo;
  /* fill greedily under hi, but close a stage while as many units remain
   * as stages do, so all k stages get a unit (each still under hi) */
  int s = 0, i = 0;
  first[0] = 0;
  double sum = 0;
  for (; i < n; i++) {
    gboolean full = sum > 0 && sum + cost[i] > hi * (1 + 1e-12);
    gboolean must = i > first[s] && n - i == k - 1 - s;
    if ((full || must) && s < k - 1) {
      first[++s] = i;
      sum = 0;
    }
    sum += cost[i];
  }
  first[k] = n;
  g_assert(s == k - 1);
}

void ps_partition_free(PsPartition *p)
{
  if (!p)
    return;
  g_free(p->first);
  g_free(p->fwd_flops);
  g_free(p->params);
  g_free(p->act_bytes);
  g_free(p->time_s);
  g_free(p);
}

/* Forward plus backward time of layers [first, end) as the fused ops they
 * lower to, on `batch` examples; *act receives the activations they keep. */
static double span_time(const PsExperiment *exp, int first, int end, int64_t batch,
                        int64_t *act)
{
  double t = 0;
  GArray *groups = ps_lower_layer_groups(exp, first, end);
  for (guint g = 0; g + 1 < groups->len; g++) {
    PsOp f = {.kind = PS_OP_FWD, .batch = batch, .first = g_array_index(groups, int, g),
              .last = g_array_index(groups, int, g + 1) - 1};
    PsOp b = f;
    b.kind = PS_OP_BWD;
    ps_lower_compute_op(exp, &f);
    ps_lower_compute_op(exp, &b);
    t += ps_time_to_s(f.time) + ps_time_to_s(b.time);
    if (act)
      *act += f.act_bytes;
  }
  g_array_free(groups, TRUE);
  return t;
}

/* Fills the per-stage figures of p from its boundaries. */
static void stage_figures(PsPartition *p, const PsExperiment *exp)
{
  const PsModel *m = exp->model;
  for (int s = 0; s < p->stages; s++) {
    p->time_s[s] = span_time(exp, p->first[s], p->first[s + 1], p->micro_batch,
                             &p->act_bytes[s]);
    /* what it holds of its received input that no layer of it counts */
    p->act_bytes[s] += ps_model_boundary_elems(m, p->first[s], p->first[s + 1]) *
                       p->micro_batch * ps_cost_act_bytes(exp->numerics.precision);
    for (int l = p->first[s]; l < p->first[s + 1]; l++) {
      p->fwd_flops[s] += m->layers[l].fwd_flops;
      p->params[s] += m->layers[l].params;
    }
  }
}

/* The layer a stage of the given partition would wrongly start at, or -1. */
static int bad_boundary(const PsModel *m, const int *first, int k)
{
  for (int s = 1; s < k; s++)
    if (!ps_partition_cut_allowed(m, first[s]))
      return first[s];
  return -1;
}

PsPartition *ps_partition_compute(const PsExperiment *exp, int stages, int64_t micro_batch,
                                  PsPartitionKind kind, const int *layers, GError **error)
{
  const PsModel *m = exp->model;
  PsPartition *p = g_new0(PsPartition, 1);
  p->stages = stages;
  p->micro_batch = micro_batch;
  p->first = g_new0(int, stages + 1);
  p->fwd_flops = g_new0(double, stages);
  p->params = g_new0(int64_t, stages);
  p->act_bytes = g_new0(int64_t, stages);
  p->time_s = g_new0(double, stages);

  if (kind == PS_PARTITION_GIVEN) {
    p->first[0] = 0;
    for (int s = 0; s < stages; s++)
      p->first[s + 1] = p->first[s] + layers[s];
    int bad = bad_boundary(m, p->first, stages);
    if (bad >= 0) {
      int s = 1;
      while (p->first[s] != bad)
        s++;
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "%s: strategy.partition: stage %d would start at layer %d '%s', but a later "
                  "layer reads the output of a layer before %d (a residual block's shortcut); "
                  "cut between blocks instead (`podsim describe model %s` lists the layers)",
                  exp->file, s, bad, m->layers[bad].name, bad - 1, m->name);
      ps_partition_free(p);
      return NULL;
    }
    stage_figures(p, exp);
    return p;
  }

  /* units: runs of layers between allowed boundaries, each costed as the
   * fused ops it lowers to */
  GArray *ustart = g_array_new(FALSE, FALSE, sizeof(int));
  GArray *ucost = g_array_new(FALSE, FALSE, sizeof(double));
  for (int first = 0; first < m->n_layers;) {
    int end = first + 1;
    while (end < m->n_layers && !ps_partition_cut_allowed(m, end))
      end++;
    double c = 0;
    if (kind == PS_PARTITION_SEED) {
      for (int l = first; l < end; l++)
        c += m->layers[l].fwd_flops;
    } else {
      c = span_time(exp, first, end, micro_batch, NULL);
    }
    g_array_append_val(ustart, first);
    g_array_append_val(ucost, c);
    first = end;
  }
  int n = (int)ustart->len;
  int *ufirst = g_new(int, stages + 1);
  gboolean ok = TRUE;
  if (n < stages) {
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                "%s: strategy.stages: model '%s' can be cut into at most %d stages (a stage "
                "boundary cannot fall inside a residual block), %d asked; use at most %d "
                "stages",
                exp->file, m->name, n, stages, n);
    ok = FALSE;
  } else if (kind == PS_PARTITION_SEED) {
    ok = ps_partition_seed_units((const double *)(void *)ucost->data, n, stages, ufirst);
    if (!ok)
      g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE,
                  "%s: strategy.partition: the seed's cumulative-cost rule leaves a stage of "
                  "model '%s' empty at %d stages (one part holds more than 1/%d of the FLOPs); "
                  "use \"optimal\", fewer stages, or give the layers per stage",
                  exp->file, m->name, stages, stages);
  } else {
    ps_partition_optimal_units((const double *)(void *)ucost->data, n, stages, ufirst);
  }
  if (ok) {
    for (int s = 0; s < stages; s++)
      p->first[s] = g_array_index(ustart, int, ufirst[s]);
    p->first[stages] = m->n_layers;
    stage_figures(p, exp);
  }
  g_free(ufirst);
  g_array_free(ustart, TRUE);
  g_array_free(ucost, TRUE);
  if (!ok) {
    ps_partition_free(p);
    return NULL;
  }
  return p;
}

void ps_partition_describe(const PsPartition *p, const PsExperiment *exp, GString *out)
{
  const PsModel *m = exp->model;
  double slowest = 0;
  for (int s = 0; s < p->stages; s++)
    slowest = MAX(slowest, p->time_s[s]);
  g_string_append_printf(out, "%d stages of model '%s', micro-batch %" G_GINT64_FORMAT
                         " examples:\n", p->stages, m->name, p->micro_batch);
  g_string_append_printf(out, "%5s  %-44s %10s %10s %11s %11s %6s\n", "stage", "layers",
                         "fwd GFLOP", "weights", "act MiB/mb", "time/mb us", "load");
  for (int s = 0; s < p->stages; s++) {
    int a = p->first[s], b = p->first[s + 1] - 1;
    g_autofree char *layers = g_strdup_printf("%d..%d %s..%s", a, b, m->layers[a].name,
                                              m->layers[b].name);
    if (strlen(layers) > 44)
      layers[44] = '\0';
    g_string_append_printf(out, "%5d  %-44s %10.3f %10" G_GINT64_FORMAT " %11.2f %11.2f %5.0f%%\n",
                           s, layers, p->fwd_flops[s] * (double)p->micro_batch / 1e9,
                           p->params[s], (double)p->act_bytes[s] / 1048576.0,
                           p->time_s[s] * 1e6, slowest > 0 ? 100 * p->time_s[s] / slowest : 0);
  }
}
