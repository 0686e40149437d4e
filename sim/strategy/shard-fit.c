/* shard-fit.c: whether a stage's template of the sharded step fits a
 * device's HBM (its weights, gradients and optimizer slots sharded, and
 * the peak of its ops' live activations), and, when it does not, what to
 * change: the error names strategy.mesh, the stage, and the smallest fsdp
 * that would leave room (ps_lower_fits words it). */
#include "strategy/shard-lower-private.h"

#include "hw/topology.h"
#include "model/layers.h"

/* The bytes of logits a device keeps for its loss without vocabulary
 * tiling (strategy.vocab_tiling 1), 0 with it or without a language-model
 * head. */
static double vocab_logits(const Lower *w)
{
  const int h = w->c->vocab_tiling == 1 ? ps_shard_vocab_head(w->m) : -1;
  if (h < 0 || h + 1 < w->lo || h + 1 >= w->hi)
    return 0;
  return (double)ps_layer_kept_bytes(&w->local.layers[h + 1], w->batch, w->act_b);
}

/* What to change when a device's share does not fit: the smallest fsdp
 * (a power-of-two multiple, data shrinking to keep the devices) whose
 * sharded weights, gradients and slots leave room for the activations. */
static char *advice(const Lower *w, double activations)
{
  int slots = ps_lower_optimizer_slots(w->exp);
  double have = (double)ps_topology_device_hbm_bytes(w->exp->topology);
  double local = (double)w->shard_params * w->Fw;
  for (int f = w->F * 2; f <= w->F * w->D; f *= 2)
    if (w->D * w->F % f == 0 &&
        local / ((double)f * w->C) * ps_lower_weight_bytes(w->exp) * (2 + slots) + activations <=
            have)
      return g_strdup_printf("raise strategy.mesh.fsdp to %d (and lower strategy.mesh.data to "
                             "%d)", f, w->D * w->F / f);
  /* else what applies: fewer activations kept (a fuller rematerialization,
   * micro-batches, a smaller batch) or the weights split further */
  GString *s = g_string_new(NULL);
  if (w->c->remat == PS_REMAT_NONE)
    g_string_append(s, "set strategy.rematerialize=\"minimal\" or \"full\"");
  else if (w->c->remat != PS_REMAT_FULL)
    g_string_append(s, "set strategy.rematerialize=\"full\" (or keep fewer checkpoints, or "
                       "offload them with strategy.remat_offload)");
  gboolean moe = FALSE;
  for (int i = 0; i < w->m->n_layers; i++)
    moe = moe || w->m->layers[i].kind == PS_LAYER_MOE;
  if (!moe)
    g_string_append_printf(s, "%sraise strategy.mesh.tensor", s->len ? ", " : "");
  if (w->m->token_input && w->c->size[PS_AXIS_SEQUENCE] == 1 && !w->c->sequence_parallel)
    g_string_append_printf(s, "%s%s strategy.mesh.context (each sequence split over its "
                              "devices)",
                           s->len ? (moe ? ", raise" : " or") : "", s->len ? "" : "raise");
  double logits = vocab_logits(w);
  if (logits >= activations / 8)
    g_string_append_printf(s, "%stile the logits with strategy.vocab_tiling (%.1f GiB of them "
                              "a device now)",
                           s->len ? ", " : "", logits / (1024.0 * 1024.0 * 1024.0));
  if (w->batch > 1)
    g_string_append_printf(s, "%ssplit each device's %" G_GINT64_FORMAT " examples into "
                              "strategy.micro_batches (gradient accumulation; now %d)",
                           s->len ? ", " : "", w->batch * w->mbs, w->mbs);
  if (w->batch * w->mbs > 1)
    g_string_append(s, s->len ? ", or lower global_batch" : "lower global_batch");
  if (s->len == 0)
    g_string_append(s, "use a topology with more devices or memory");
  return g_string_free(s, FALSE);
}

gboolean ps_shard_template_fits(Lower *w, GError **error)
{
  int64_t live = 0, peak = 0;
  for (guint i = 0; i < w->ops->len; i++) {
    live += g_array_index(w->ops, PsOp, i).act_bytes;
    peak = MAX(peak, live);
  }
  g_autofree char *adv = advice(w, (double)peak);
  g_autofree char *what = ps_shard_stage_what(w);
  PsMemoryNeed need = {.path = "strategy.mesh", .what = what, .batch = w->batch * w->mbs,
                       .params = w->shard_params, .slot_params = w->shard_params,
                       .activations = (double)peak, .advice = adv};
  return ps_lower_fits(w->exp, &need, error);
}
