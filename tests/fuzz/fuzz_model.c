/* fuzz_model.c: libFuzzer harness for the model loader.
 *
 * The input is parsed with ps_json_parse and built with ps_model_from_json:
 * layer kinds, "residual" and "repeat" groups, shapes and costs.  Sizes
 * past the loader's limits must be refused by its checks, never allocated.
 * On success the memory estimate is computed, as the experiment loader
 * does.  Invariant: a model comes back with at least one layer, or a
 * GError in PS_INPUT_ERROR. */
#include "fuzz-common.h"

#include "common/json.h"
#include "model/layers.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  ps_fuzz_setup();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  json_object *obj = ps_fuzz_json(data, size, "fuzz-model.json");
  if (!obj)
    return 0;
  GError *err = NULL;
  PsModel *m = ps_model_from_json(obj, "fuzz-model.json", "", &err);
  if (m) {
    g_assert_no_error(err);
    g_assert_cmpint(m->n_layers, >, 0);
    g_assert_cmpint(ps_model_memory_bytes(m, 0, m->n_layers, 1, 2, 4), >=, 0);
    ps_model_free(m);
  } else {
    ps_fuzz_refused(&err);
  }
  json_object_put(obj);
  return 0;
}
