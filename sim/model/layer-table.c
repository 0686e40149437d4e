/* layer-table.c: the table of layer kinds (layer-private.h), one entry per
 * kind, in the order error messages list them.
 * Invariant: every PsLayerKind but PS_LAYER_N_KINDS has exactly one entry,
 * whose `kind` is it. */
#include "model/layer-private.h"

const PsLayerOps *const ps_layer_table[] = {
  &ps_layer_dense,      &ps_layer_conv2d,    &ps_layer_maxpool,   &ps_layer_avgpool,
  &ps_layer_global_avgpool, &ps_layer_batchnorm, &ps_layer_layernorm, &ps_layer_embedding,
  &ps_layer_patch_embedding, &ps_layer_attention, &ps_layer_relu,   &ps_layer_gelu,
  &ps_layer_tanh,       &ps_layer_flatten,   &ps_layer_softmax_xent, &ps_layer_add,
  &ps_layer_rmsnorm,    &ps_layer_swiglu,    &ps_layer_dropout,   &ps_layer_moe,
  NULL,
};

const PsLayerOps *ps_layer_ops(PsLayerKind kind)
{
  for (int i = 0; ps_layer_table[i]; i++)
    if (ps_layer_table[i]->kind == kind)
      return ps_layer_table[i];
  g_return_val_if_reached(NULL);
}

const char *ps_layer_kind_name(PsLayerKind kind)
{
  g_return_val_if_fail(kind >= 0 && kind < PS_LAYER_N_KINDS, "?");
  return ps_layer_ops(kind)->name;
}

const PsLayerLowerInfo *ps_layer_kind_lower(PsLayerKind kind)
{
  g_return_val_if_fail(kind >= 0 && kind < PS_LAYER_N_KINDS, NULL);
  return &ps_layer_ops(kind)->lower;
}
