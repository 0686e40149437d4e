"""podsim from Python: run, sweep and describe experiments of the podsim
TPU pod simulator through libpodsim (ctypes; nothing to compile).

    import podsim
    s = podsim.run("default", **{"numerics.enabled": False, "global_batch": 128})
    s["step_time_s"], s["breakdown"]["collective"]

    rows = podsim.sweep("default", vary={"global_batch": [32, 64, 128]},
                        set={"numerics.enabled": False})

Overrides are the keys `podsim run --set` takes, in any of three forms,
applied in this order:
  set={"numerics.enabled": False}           a dict (dotted keys as they are)
  set=["numerics.enabled=false"]            --set strings, as typed at the CLI
  **{"numerics.enabled": False}, global_batch=128, numerics__enabled=False
                                            keywords ("__" stands for ".")
A value is written as --set takes it: True/False as true/false, None as
null, lists and dicts as JSON, strings as they are ("50GB/s", "tpu-v4-32").

Invariant: run() returns the object `podsim run --json --no-trace` prints
(the same keys and numbers; wall_s and events_per_s measure this machine),
and sweep()'s rows hold the columns `podsim sweep` writes, in its order.
"""

import itertools
import json
from concurrent.futures import ThreadPoolExecutor

from ._lib import InputError, InternalError, PodsimError, library_path, version
from . import _lib

__all__ = ["run", "sweep", "describe", "overrides", "PodsimError", "InputError",
           "InternalError", "library_path", "version"]

# summary fields that measure the machine running the simulator, which a
# sweep's rows leave out (as `podsim sweep` does) so that they repeat
WALL_CLOCK_KEYS = ("wall_s", "events_per_s")


def _value_text(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(v)
    if isinstance(v, float):  # the shortest that reads back: 5e10, not 50000000000.0
        return next(t for t in (f"{v:.{p}g}" for p in range(1, 18)) if float(t) == v) \
            .replace("e+", "e")
    return str(v)


def overrides(set=None, **keywords):
    """The --set strings ("KEY=VALUE") that set= and keywords stand for,
    in the order they apply."""
    out = []
    if isinstance(set, dict):
        out += [f"{k}={_value_text(v)}" for k, v in set.items()]
    elif isinstance(set, str):
        out.append(set)
    elif set is not None:
        out += [str(s) for s in set]
    out += [f"{k.replace('__', '.')}={_value_text(v)}" for k, v in keywords.items()]
    return out


def run(experiment, set=None, **keywords):
    """Runs an experiment (a name from experiments/ or a path) with no trace
    and returns its summary, the dict `podsim run EXPERIMENT --json` prints.
    Raises InputError (exit status 2 at the CLI) or InternalError with the
    message the CLI prints."""
    return json.loads(_lib.run_json(str(experiment), overrides(set, **keywords)))


def _flatten(dst, prefix, src, varied):
    for k, v in src.items():
        name = f"{prefix}.{k}" if prefix else k
        if (not prefix and k in WALL_CLOCK_KEYS) or name in varied:
            continue
        if isinstance(v, dict):
            _flatten(dst, name, v, varied)
        else:
            dst[name] = v


def _row(experiment, point, sets):
    row = dict(point)
    try:
        summary = run(experiment, set=sets + overrides(point))
    except InputError as e:
        if e.code == "key":  # the same at every point: the call's error
            raise
        summary, row["error"] = None, e.message
    except InternalError as e:
        summary, row["error"] = None, e.message
    if summary is not None:
        _flatten(row, "", summary, point)
        row["error"] = None
    return row


def sweep(experiment, vary, set=None, jobs=1, frame=None, **keywords):
    """Runs experiment at every point of the product of vary's lists
    ({"global_batch": [32, 64], "topology.ici.bandwidth_Bps": [50e9, 100e9]}),
    points in the order of nested loops, the last key innermost, as
    `podsim sweep` does.  set= and keywords apply at every point, before
    the varied values.  Each row: the varied keys, the summary flattened
    ("breakdown.collective"; no wall-clock fields), and "error" (None, or
    why that point failed).  An unknown key raises InputError.  jobs > 1
    runs points on that many threads.  A pandas DataFrame when pandas is
    importable (frame=None) or frame=True; else a list of dicts."""
    keys = list(vary)
    grids = [list(vary[k]) if isinstance(vary[k], (list, tuple, range)) else [vary[k]]
             for k in keys]
    points = [dict(zip(keys, values)) for values in itertools.product(*grids)]
    sets = overrides(set, **keywords)
    if jobs > 1:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            rows = list(pool.map(lambda p: _row(experiment, p, sets), points))
    else:
        rows = [_row(experiment, p, sets) for p in points]
    if frame is False:
        return rows
    try:
        import pandas
    except ImportError:
        if frame:
            raise
        return rows
    return pandas.DataFrame(rows)


def describe(kind, name, set=None, **keywords):
    """What `podsim describe KIND NAME` shows: for "experiment" its resolved
    tree (every default filled in) and for "topology" the topology, as a
    dict; for "model" the layer table, as text.  Overrides as for run()
    (a topology's with or without the "topology." prefix)."""
    text = _lib.describe_text(str(kind), str(name), overrides(set, **keywords))
    return text if kind == "model" else json.loads(text)
