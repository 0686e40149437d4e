/* program.c: plans as plain data: building, checking and printing them
 * (see program.h).  Invariant: plan->program_of[d] < plan->n_programs for
 * every device d. */
#include "program/program.h"

#include <string.h>

PsPlan *ps_plan_new(int n_devices)
{
  g_return_val_if_fail(n_devices >= 1, NULL);
  PsPlan *plan = g_new0(PsPlan, 1);
  plan->n_devices = n_devices;
  plan->program_of = g_new0(int, n_devices);
  plan->mesh.coord = g_new0(int, (size_t)n_devices * PS_N_AXES);
  plan->mesh.n_ranges = g_new0(int, n_devices);
  plan->mesh.ranges = g_new0(PsParamRange *, n_devices);
  plan->micro_batches = 1;
  plan->loss_scale = 1.0f;
  return plan;
}

void ps_plan_free(PsPlan *plan)
{
  if (!plan)
    return;
  for (int i = 0; i < plan->n_programs; i++)
    g_free(plan->programs[i].ops);
  for (int i = 0; i < plan->n_colls; i++) {
    g_free(plan->colls[i].members);
    g_free(plan->colls[i].algo);
  }
  g_free(plan->programs);
  g_free(plan->colls);
  g_free(plan->coll_of);
  g_free(plan->warning);
  g_free(plan->program_of);
  g_free(plan->stage_first);
  g_free(plan->layer_split);
  for (int d = 0; d < plan->n_devices; d++)
    g_free(plan->mesh.ranges[d]);
  g_free(plan->mesh.ranges);
  g_free(plan->mesh.n_ranges);
  g_free(plan->mesh.coord);
  g_free(plan);
}

void ps_plan_set_axis(PsPlan *plan, PsAxis axis, int size)
{
  g_return_if_fail(axis < PS_N_AXES && size >= 1);
  plan->mesh.size[axis] = size;
}

void ps_plan_set_coord(PsPlan *plan, int device, PsAxis axis, int c)
{
  g_return_if_fail(device >= 0 && device < plan->n_devices && axis < PS_N_AXES);
  g_return_if_fail(c >= 0 && c < plan->mesh.size[axis]);
  plan->mesh.coord[(size_t)device * PS_N_AXES + axis] = c;
}

void ps_plan_add_params(PsPlan *plan, int device, int64_t off, int64_t len)
{
  g_return_if_fail(device >= 0 && device < plan->n_devices && off >= 0 && len >= 0);
  PsMesh *m = &plan->mesh;
  m->ranges[device] = g_renew(PsParamRange, m->ranges[device], m->n_ranges[device] + 1);
  m->ranges[device][m->n_ranges[device]++] = (PsParamRange){off, len};
}

gboolean ps_plan_has_axis(const PsPlan *plan, PsAxis axis)
{
  g_return_val_if_fail(axis < PS_N_AXES, FALSE);
  return plan->mesh.size[axis] > 0;
}

int ps_plan_axis_size(const PsPlan *plan, PsAxis axis)
{
  g_return_val_if_fail(axis < PS_N_AXES, 1);
  return MAX(plan->mesh.size[axis], 1);
}

int ps_plan_coord(const PsPlan *plan, int device, PsAxis axis)
{
  g_return_val_if_fail(device >= 0 && device < plan->n_devices && axis < PS_N_AXES, 0);
  return plan->mesh.coord[(size_t)device * PS_N_AXES + axis];
}

const char *ps_buffer_name(PsBufferKind kind)
{
  static const char *const names[] = {"gradients", "parameters", "activations",
                                      "batch-norm statistics", "batch-norm gradient statistics",
                                      "activation gradients", "gradient shards", "norms"};
  g_return_val_if_fail(kind <= PS_BUFFER_NORM, "?");
  return names[kind];
}

const char *ps_axis_name(PsAxis axis)
{
  static const char *const names[PS_N_AXES] = {"data", "stage", "fsdp", "tensor", "sequence",
                                                "context"};
  g_return_val_if_fail(axis < PS_N_AXES, "?");
  return names[axis];
}

const PsProgram *ps_plan_program(const PsPlan *plan, int device)
{
  g_return_val_if_fail(device >= 0 && device < plan->n_devices, NULL);
  return &plan->programs[plan->program_of[device]];
}

/* The capacity an array of n entries grows to before its next append, or
 * 0 when it has room: 4, then doubling, so n appends copy O(n) entries
 * (realloc by one entry each time copies O(n^2), which a sanitizer build,
 * whose realloc always moves, pays in full). */
static size_t grown(int n)
{
  if (n < 4)
    return n == 0 ? 4 : 0;
  return (n & (n - 1)) == 0 ? 2 * (size_t)n : 0;
}

int ps_plan_add_program(PsPlan *plan, const PsOp *ops, int n_ops)
{
  size_t cap = grown(plan->n_programs);
  if (cap)
    plan->programs = g_renew(PsProgram, plan->programs, cap);
  PsProgram *p = &plan->programs[plan->n_programs];
  memset(p, 0, sizeof *p);
  p->n_ops = n_ops;
  p->ops = g_memdup2(ops, sizeof(PsOp) * (size_t)n_ops);
  return plan->n_programs++;
}

int ps_plan_add_coll(PsPlan *plan, const PsPlanColl *coll)
{
  size_t cap = grown(plan->n_colls);
  if (cap)
    plan->colls = g_renew(PsPlanColl, plan->colls, cap);
  PsPlanColl *c = &plan->colls[plan->n_colls];
  *c = *coll;
  c->members = g_memdup2(coll->members, sizeof(int) * (size_t)coll->n_members);
  c->algo = g_strdup(coll->algo ? coll->algo : "auto");
  return plan->n_colls++;
}

int ps_plan_coll_member(const PsPlan *plan, int c, int device)
{
  g_return_val_if_fail(c >= 0 && c < plan->n_colls, -1);
  const PsPlanColl *pc = &plan->colls[c];
  for (int m = 0; m < pc->n_members; m++)
    if (pc->members[m] == device)
      return m;
  return -1;
}

void ps_plan_use_slots(PsPlan *plan, int n_slots)
{
  g_return_if_fail(n_slots >= 1 && plan->n_slots == 0);
  plan->n_slots = n_slots;
  size_t n = (size_t)plan->n_devices * (size_t)n_slots;
  plan->coll_of = g_new(int, n);
  for (size_t i = 0; i < n; i++)
    plan->coll_of[i] = -1;
}

void ps_plan_set_slot(PsPlan *plan, int device, int slot, int c)
{
  g_return_if_fail(device >= 0 && device < plan->n_devices && slot >= 0 &&
                   slot < plan->n_slots);
  plan->coll_of[(size_t)slot * (size_t)plan->n_devices + (size_t)device] = c;
}

int ps_plan_op_coll(const PsPlan *plan, int device, const PsOp *op)
{
  if (op->coll < 0 || plan->n_slots == 0)
    return op->coll;
  g_return_val_if_fail(device >= 0 && device < plan->n_devices, -1);
  if (op->coll >= plan->n_slots)
    return plan->n_colls; /* out of range: validation names it */
  return plan->coll_of[(size_t)op->coll * (size_t)plan->n_devices + (size_t)device];
}

PsPlanMembers *ps_plan_members_new(const PsPlan *plan)
{
  PsPlanMembers *pm = g_new0(PsPlanMembers, 1);
  int nd = plan->n_devices;
  pm->n_devices = nd;
  pm->start = g_new0(int, nd + 1);
  for (int c = 0; c < plan->n_colls; c++)
    for (int m = 0; m < plan->colls[c].n_members; m++) {
      int d = plan->colls[c].members[m];
      if (d >= 0 && d < nd)
        pm->start[d + 1]++;
    }
  for (int d = 0; d < nd; d++)
    pm->start[d + 1] += pm->start[d];
  int total = pm->start[nd];
  pm->coll = g_new(int, total > 0 ? total : 1);
  pm->member = g_new(int, total > 0 ? total : 1);
  g_autofree int *fill = g_memdup2(pm->start, sizeof(int) * (size_t)nd);
  for (int c = 0; c < plan->n_colls; c++) /* ascending c: each device's run sorted */
    for (int m = 0; m < plan->colls[c].n_members; m++) {
      int d = plan->colls[c].members[m];
      if (d < 0 || d >= nd || (fill[d] > pm->start[d] && pm->coll[fill[d] - 1] == c))
        continue; /* (a device listed twice: its first index) */
      pm->coll[fill[d]] = c;
      pm->member[fill[d]++] = m;
    }
  for (int d = 0; d < nd; d++) /* close up what duplicates left */
    for (int i = fill[d]; i < pm->start[d + 1]; i++)
      pm->coll[i] = -1;
  return pm;
}

void ps_plan_members_free(PsPlanMembers *pm)
{
  if (!pm)
    return;
  g_free(pm->start);
  g_free(pm->coll);
  g_free(pm->member);
  g_free(pm);
}

int ps_plan_members_find(const PsPlanMembers *pm, int device, int c)
{
  g_return_val_if_fail(device >= 0 && device < pm->n_devices, -1);
  int lo = pm->start[device], hi = pm->start[device + 1];
  while (hi > lo && pm->coll[hi - 1] < 0)
    hi--;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (pm->coll[mid] < c)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < pm->start[device + 1] && pm->coll[lo] == c ? pm->member[lo] : -1;
}

static gboolean invalid(GError **error, int device, int op, const char *fmt, ...)
    G_GNUC_PRINTF(4, 5);

static gboolean invalid(GError **error, int device, int op, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *why = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  if (op >= 0)
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE, "plan: device %d, op %d: %s",
                device, op, why);
  else
    g_set_error(error, PS_INPUT_ERROR, PS_INPUT_ERROR_VALUE, "plan: device %d: %s", device, why);
  return FALSE;
}

/* What validation keeps while it walks the programs. */
typedef struct {
  const PsPlan *plan;
  PsPlanMembers *pm;  /* each device's collectives */
  int *open, *starts; /* per collective, for the device being walked */
  GHashTable *flow;   /* (src, dst, tag) -> SENDs minus RECVs per step */
  GArray *keys;       /* the flow's keys, in the order they appeared */
  gboolean *copies_checked; /* per program: its copies checked */
} Check;

static gboolean check_colls(const PsPlan *plan, GError **error)
{
  const int nd = plan->n_devices;
  for (int c = 0; c < plan->n_colls; c++) {
    const PsPlanColl *pc = &plan->colls[c];
    if (pc->n_members < 1 || pc->count < 0 || pc->elem_bytes < 1)
      return invalid(error, -1, -1, "collective %d (%s) has %d members, %" G_GINT64_FORMAT
                     " elements of %d bytes", c, pc->name, pc->n_members, pc->count,
                     pc->elem_bytes);
    for (int m = 0; m < pc->n_members; m++)
      if (pc->members[m] < 0 || pc->members[m] >= nd)
        return invalid(error, pc->members[m], -1, "member %d of collective %d (%s) is not a "
                       "device of the plan (0..%d)", m, c, pc->name, nd - 1);
  }
  return TRUE;
}

static gboolean check_coll_op(Check *ck, int d, int i, const PsOp *op, GError **error)
{
  const PsPlan *plan = ck->plan;
  const int nc = plan->n_colls;
  int c = ps_plan_op_coll(plan, d, op);
  if (c < 0 || c >= nc)
    return invalid(error, d, i, "%s of collective %d%s, but the plan has %d",
                   ps_op_kind_name(op->kind), c,
                   plan->n_slots ? " (through its slot table)" : "", nc);
  const PsPlanColl *pc = &plan->colls[c];
  int at = pc->axis < PS_N_AXES && plan->mesh.coord ? ps_plan_coord(plan, d, pc->axis) : -1;
  /* a sharded plan lists members by coordinate: no search */
  if ((at < 0 || at >= pc->n_members || pc->members[at] != d) &&
      ps_plan_members_find(ck->pm, d, c) < 0)
    return invalid(error, d, i, "%s of collective %d (%s), of which it is not a member",
                   ps_op_kind_name(op->kind), c, plan->colls[c].name);
  gboolean ok = TRUE;
  if (op->kind == PS_OP_COLL_START) {
    if (ck->open[c] || ck->starts[c])
      ok = invalid(error, d, i, "collective %d (%s) started twice in one step", c,
                   plan->colls[c].name);
    ck->open[c] = 1;
    ck->starts[c]++;
  } else {
    if (!ck->open[c])
      ok = invalid(error, d, i, "COLL_DONE of collective %d (%s) that is not started", c,
                   plan->colls[c].name);
    ck->open[c] = 0;
  }
  return ok;
}

static gboolean check_message_op(Check *ck, int d, int i, const PsOp *op, GError **error)
{
  const int nd = ck->plan->n_devices;
  if (op->peer < 0 || op->peer >= nd || op->peer == d || op->tag < 0 || op->tag >= (1 << 20))
    return invalid(error, d, i, "%s with peer %d and tag %d (peers are the other devices "
                   "0..%d, tags 0..2^20-1)", ps_op_kind_name(op->kind), op->peer, op->tag,
                   nd - 1);
  int src = op->kind == PS_OP_SEND ? d : op->peer;
  int dst = op->kind == PS_OP_SEND ? op->peer : d;
  gint64 key = ((gint64)src << 42) | ((gint64)dst << 20) | op->tag;
  gint64 *slot = g_hash_table_lookup(ck->flow, &key);
  if (!slot) {
    g_array_append_val(ck->keys, key);
    slot = g_new0(gint64, 2);
    slot[0] = key;
    g_hash_table_insert(ck->flow, slot, slot);
  }
  slot[1] += op->kind == PS_OP_SEND ? 1 : -1;
  return TRUE;
}

/* A program's copies: each tag started once and done once after its
 * start, with bytes >= 0 and the same direction at both ends. */
static gboolean check_copies(const PsProgram *p, int d, GError **error)
{
  g_autoptr(GHashTable) open = g_hash_table_new(g_direct_hash, g_direct_equal);
  g_autoptr(GHashTable) seen = g_hash_table_new(g_direct_hash, g_direct_equal);
  for (int i = 0; i < p->n_ops; i++) {
    const PsOp *op = &p->ops[i];
    if (op->kind != PS_OP_COPY_START && op->kind != PS_OP_COPY_DONE)
      continue;
    if (op->tag < 0 || op->tag >= (1 << 20))
      return invalid(error, d, i, "%s with tag %d (tags 0..2^20-1)", ps_op_kind_name(op->kind),
                     op->tag);
    gpointer key = GINT_TO_POINTER(op->tag + 1);
    if (op->kind == PS_OP_COPY_START) {
      if (g_hash_table_contains(seen, key))
        return invalid(error, d, i, "COPY_START of copy %d started twice in one step", op->tag);
      if (!(op->bytes >= 0))
        return invalid(error, d, i, "COPY_START of copy %d with %g bytes", op->tag, op->bytes);
      g_hash_table_add(seen, key);
      g_hash_table_insert(open, key, GINT_TO_POINTER(op->to_host ? 2 : 1));
    } else {
      int dir = GPOINTER_TO_INT(g_hash_table_lookup(open, key));
      if (dir == 0)
        return invalid(error, d, i, "COPY_DONE of copy %d that is not started", op->tag);
      if (dir != (op->to_host ? 2 : 1))
        return invalid(error, d, i, "COPY_DONE of copy %d in the other direction", op->tag);
      g_hash_table_remove(open, key);
    }
  }
  if (g_hash_table_size(open) > 0)
    return invalid(error, d, -1, "has a copy to or from its host that is started but never "
                   "done");
  return TRUE;
}

/* One device's program: its ops, then its collectives all done and all
 * started.  Only its own collectives' counters are touched (an op of
 * another's fails first), so they are cleared through its membership. */
static gboolean check_program(Check *ck, int d, GError **error)
{
  const PsPlan *plan = ck->plan;
  const int nc = plan->n_colls;
  const PsProgram *p = ps_plan_program(plan, d);
  if (p->n_ops < 1)
    return invalid(error, d, -1, "has an empty program (a device that takes part runs at "
                   "least one op per step)");
  const PsPlanMembers *pm = ck->pm;
  gboolean ok = TRUE;
  if (!ck->copies_checked[plan->program_of[d]]) {
    ck->copies_checked[plan->program_of[d]] = TRUE;
    ok = check_copies(p, d, error);
  }
  for (int i = 0; i < p->n_ops && ok; i++) {
    const PsOp *op = &p->ops[i];
    if (op->kind == PS_OP_COLL_START || op->kind == PS_OP_COLL_DONE)
      ok = check_coll_op(ck, d, i, op, error);
    else if (op->kind == PS_OP_SEND || op->kind == PS_OP_RECV)
      ok = check_message_op(ck, d, i, op, error);
    else if (op->kind == PS_OP_UPDATE && ps_plan_op_coll(plan, d, op) >= nc)
      ok = invalid(error, d, i, "UPDATE of the block of collective %d, but the plan has %d",
                   ps_plan_op_coll(plan, d, op), nc);
  }
  for (int j = pm->start[d]; j < pm->start[d + 1] && ok; j++) {
    int c = pm->coll[j];
    if (c < 0)
      continue;
    if (ck->open[c])
      ok = invalid(error, d, -1, "collective %d (%s) is started but never done", c,
                   plan->colls[c].name);
    else if (!ck->starts[c])
      ok = invalid(error, d, -1, "is a member of collective %d (%s) but never starts it", c,
                   plan->colls[c].name);
  }
  for (int j = pm->start[d]; j < pm->start[d + 1]; j++)
    if (pm->coll[j] >= 0)
      ck->open[pm->coll[j]] = ck->starts[pm->coll[j]] = 0;
  return ok;
}

static gboolean check_slots(const PsPlan *plan, GError **error)
{
  if (plan->n_slots > 0 && !plan->coll_of)
    return invalid(error, -1, -1, "has %d slots but no table of them", plan->n_slots);
  return TRUE;
}

gboolean ps_plan_validate(const PsPlan *plan, GError **error)
{
  const int nc = plan->n_colls, nd = plan->n_devices;
  if (!check_colls(plan, error) || !check_slots(plan, error))
    return FALSE;
  PsPlanMembers *pm = ps_plan_members_new(plan);
  g_autofree int *open = g_new0(int, nc > 0 ? nc : 1);
  g_autofree int *starts = g_new0(int, nc > 0 ? nc : 1);
  g_autoptr(GArray) keys = g_array_new(FALSE, FALSE, sizeof(gint64));
  g_autofree gboolean *copies_checked = g_new0(gboolean, MAX(plan->n_programs, 1));
  Check ck = {.plan = plan, .pm = pm, .open = open, .starts = starts,
              .flow = g_hash_table_new(g_int64_hash, g_int64_equal), .keys = keys,
              .copies_checked = copies_checked};
  gboolean ok = TRUE;
  for (int d = 0; d < nd && ok; d++)
    ok = check_program(&ck, d, error);
  for (guint k = 0; k < keys->len && ok; k++) {
    gint64 key = g_array_index(keys, gint64, k);
    gint64 *slot = g_hash_table_lookup(ck.flow, &key);
    if (slot[1] != 0)
      ok = invalid(error, (int)(key >> 42), -1, "%" G_GINT64_FORMAT " %s to device %d with tag "
                   "%d per step than device %d has RECVs from it", ABS(slot[1]),
                   slot[1] > 0 ? "more SENDs" : "fewer SENDs", (int)((key >> 20) & 0x3fffff),
                   (int)(key & 0xfffff), (int)((key >> 20) & 0x3fffff));
  }
  GHashTableIter it;
  gpointer kp;
  g_hash_table_iter_init(&it, ck.flow);
  while (g_hash_table_iter_next(&it, &kp, NULL))
    g_free(kp);
  g_hash_table_destroy(ck.flow);
  ps_plan_members_free(pm);
  return ok;
}

const char *ps_op_kind_name(PsOpKind kind)
{
  static const char *const names[PS_OP_N_KINDS] = {
      "INFEED", "FWD",  "BWD",    "RECOMPUTE", "COLL_START", "COLL_DONE",
      "SEND",   "RECV", "UPDATE", "HOST_CALL", "OUTFEED", "CLIP", "COPY_START", "COPY_DONE"};
  g_return_val_if_fail(kind < PS_OP_N_KINDS, "?");
  return names[kind];
}

static void describe_op(const PsPlan *plan, int device, int i, const PsOp *op, GString *out)
{
  int c = ps_plan_op_coll(plan, device, op);
  g_string_append_printf(out, "  %4d  %-10s ", i, ps_op_kind_name(op->kind));
  switch (op->kind) {
  case PS_OP_COLL_START:
  case PS_OP_COLL_DONE:
    g_string_append_printf(out, "c%-3d %-8s %s", c, ps_axis_name(plan->colls[c].axis),
                           plan->colls[c].name);
    break;
  case PS_OP_SEND:
    g_string_append_printf(out, "to %d tag %d  %s  (%.0f bytes)", op->peer, op->tag, op->name,
                           op->bytes);
    break;
  case PS_OP_RECV:
    g_string_append_printf(out, "from %d tag %d  %s", op->peer, op->tag, op->name);
    break;
  case PS_OP_COPY_START:
  case PS_OP_COPY_DONE:
    g_string_append_printf(out, "copy %d %s host  %s", op->tag, op->to_host ? "to" : "from",
                           op->name);
    if (op->kind == PS_OP_COPY_START)
      g_string_append_printf(out, "  (%.0f bytes)", op->bytes);
    break;
  case PS_OP_UPDATE:
  case PS_OP_CLIP:
    if (op->kind == PS_OP_CLIP && op->clip_shards)
      g_string_append_printf(out, "its shards, %" G_GINT64_FORMAT " params %s", op->param_len,
                             op->name);
    else
      g_string_append_printf(out, "params [%" G_GINT64_FORMAT ", +%" G_GINT64_FORMAT ")%s %s",
                             op->param_off, op->param_len,
                             c >= 0 ? " (this device's shard)" : "", op->name);
    if (op->time > 0)
      g_string_append_printf(out, "  %.3f us%s", ps_time_to_s(op->time) * 1e6,
                             op->memory_bound ? " (HBM-bound)" : " (MXU-bound)");
    break;
  default:
    g_string_append_printf(out, "mb %-3d batch %-6" G_GINT64_FORMAT " %s", op->mb, op->batch,
                           op->name);
    if (op->time > 0)
      g_string_append_printf(out, "  %.3f us%s", ps_time_to_s(op->time) * 1e6,
                             op->kind == PS_OP_INFEED || op->kind == PS_OP_OUTFEED ? ""
                             : op->memory_bound ? " (HBM-bound)" : " (MXU-bound)");
    if (op->bytes > 0)
      g_string_append_printf(out, "  (%.0f bytes)", op->bytes);
    break;
  }
  g_string_append_c(out, '\n');
}

void ps_plan_describe_device(const PsPlan *plan, int device, GString *out)
{
  const PsProgram *p = ps_plan_program(plan, device);
  if (ps_plan_axis_size(plan, PS_AXIS_STAGE) > 1)
    g_string_append_printf(out, "stage %d of %d, replica %d of %d: ",
                           ps_plan_coord(plan, device, PS_AXIS_STAGE),
                           ps_plan_axis_size(plan, PS_AXIS_STAGE),
                           ps_plan_coord(plan, device, PS_AXIS_DATA),
                           ps_plan_axis_size(plan, PS_AXIS_DATA));
  g_string_append_printf(out, "device %d (program %d of %d): %d ops per step, HBM %.2f MiB "
                         "static, %.2f MiB peak\n", device, plan->program_of[device],
                         plan->n_programs, p->n_ops, p->hbm_static_bytes / 1048576.0,
                         p->hbm_peak_bytes / 1048576.0);
  for (int i = 0; i < p->n_ops; i++)
    describe_op(plan, device, i, &p->ops[i], out);
  gboolean any = FALSE;
  for (int c = 0; c < plan->n_colls; c++) {
    int m = ps_plan_coll_member(plan, c, device);
    if (m < 0)
      continue;
    const PsPlanColl *pc = &plan->colls[c];
    if (!any)
      g_string_append(out, "collectives:\n");
    any = TRUE;
    g_string_append_printf(out, "  c%-3d %-13s %-5s member %d of %d along %s, %" G_GINT64_FORMAT
                           " x %d bytes of %s [%" G_GINT64_FORMAT ", +%" G_GINT64_FORMAT
                           ")  %s\n", c, ps_coll_op_name(pc->op), pc->algo, m, pc->n_members,
                           ps_axis_name(pc->axis), pc->count, pc->elem_bytes,
                           ps_buffer_name(pc->buffer),
                           pc->offset, pc->count, pc->name);
  }
}
