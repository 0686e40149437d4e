/* fuzz_topology.c: libFuzzer harness for the topology loader.
 *
 * The input is parsed with ps_json_parse (the strict parser every file goes
 * through) and, when it is JSON, built with ps_topology_from_json as an
 * inline topology would be: "extends" resolves names in topologies/ of the
 * repository, every section is checked.  The derived counts (chips, hosts,
 * devices) are computed on success, as every caller does.  Invariant: a
 * topology comes back with positive counts, or a GError in PS_INPUT_ERROR. */
#include "fuzz-common.h"

#include "common/json.h"
#include "io/config.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  ps_fuzz_setup();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  json_object *obj = ps_fuzz_json(data, size, "fuzz-topology.json");
  if (!obj)
    return 0;
  GError *err = NULL;
  PsTopology *t = ps_topology_from_json(obj, "fuzz-topology.json", "", &err);
  if (t) {
    g_assert_no_error(err);
    g_assert_cmpint(ps_topology_chips(t), >, 0);
    g_assert_cmpint(ps_topology_hosts(t), >, 0);
    g_assert_cmpint(ps_topology_devices(t), >, 0);
    /* hbm_bytes is > 0 per chip; split over many cores it may round to 0
     * per device, which the experiment's memory check then refuses */
    g_assert_cmpint(ps_topology_device_hbm_bytes(t), >=, 0);
    ps_topology_free(t);
  } else {
    ps_fuzz_refused(&err);
  }
  json_object_put(obj);
  return 0;
}
