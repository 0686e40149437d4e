#!/usr/bin/env python3
"""test_fidelity.py: docs/fidelity.md names every constant of the cost and
network model with the value the topology files give it, and the
calibration points are what the files and `podsim validate` say they are.

Checks, one TAP test each:
  - for every generation's base topology (topologies/*.json with a
    "generation" and no "extends"), every key of its chip, host, ici and
    dcn sections has a row `topology.SECTION.KEY` in a table of
    docs/fidelity.md whose column headed by the file's generation holds
    the file's value: numbers compared as numbers (45e12 = 4.5e13), true
    and false as words, strings ("16GiB") as written; a key the file
    lacks is `-` in that column;
  - every key the loader accepts in those sections (the *_keys lists of
    sim/io/topology.c) and in an experiment's "collective"
    (sim/io/config.c) is named in docs/fidelity.md, so a new knob cannot
    go in undocumented;
  - every numeric #define of the cost, layer-cost, bucket and DCN-default
    code (FILES_WITH_CONSTANTS) is named in docs/fidelity.md;
  - calibration: each base file's source that says "calibration:" names a
    point of tests/measured that exists and is marked "calibration": true;
    every point so marked is cited by the base file of its topology's
    generation; no generation has more than one; docs/fidelity.md names
    each; and `podsim validate --only NAME` prints its row with `*`;
  - every row of a table with a `default` column (the collective and
    bucket keys) gives the value `podsim describe` resolves for an
    experiment that sets none of them.

Usage: test_fidelity.py [ARGS...]; arguments (prove's --tap, -m thorough)
are ignored.  Run from the project root or with PODSIM_DATA_DIR set to it;
$PODSIM names the binary (default: the root's podsim).

Invariant: writes nothing but one scratch experiment in a temporary
directory, removed when the check ends.
"""
import glob
import json
import math
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.environ.get("PODSIM_DATA_DIR") or os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "fidelity.md")
SECTIONS = ("chip", "host", "ici", "dcn")
# Files whose numeric #defines are constants of the cost or network model.
FILES_WITH_CONSTANTS = ("sim/hw/cost.c", "sim/hw/cost.h", "sim/model/layer-private.h",
                        "sim/model/layer-glu.c", "sim/model/layer-norm.c",
                        "sim/strategy/strategy-private.h", "sim/io/topology.c")

results = []


def check(ok, name, why=""):
    results.append((ok, name, why))


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def doc_rows(text):
    """{key: {column header: cell}} for every table row whose first cell
    is a backquoted dotted key, under the header of its table."""
    rows, header = {}, None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        c = cells(line)
        if header is None:
            header = c
            continue
        m = re.fullmatch(r"`([A-Za-z_0-9.]+)`", c[0])
        if m:
            rows[m.group(1)] = dict(zip(header, c))
    return rows


def same_value(cell, value):
    cell = cell.strip("`")
    if isinstance(value, bool):
        return cell == ("true" if value else "false")
    if isinstance(value, (int, float)):
        try:
            return math.isclose(float(cell), float(value), rel_tol=1e-12)
        except ValueError:
            return False
    if isinstance(value, str):
        return cell == value
    if isinstance(value, list):
        try:
            return json.loads(cell) == value
        except ValueError:
            return False
    return False


def base_topologies():
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "topologies", "*.json"))):
        with open(path, encoding="utf-8") as f:
            t = json.load(f)
        if "generation" in t and "extends" not in t:
            out.append((os.path.basename(path), t))
    return out


def check_values(doc, rows, bases):
    for fname, t in bases:
        gen = t["generation"]
        bad = []
        keys = set()
        for sec in SECTIONS:
            keys |= {f"topology.{sec}.{k}" for k in t.get(sec, {})}
        documented = {k for k in rows if k.startswith("topology.")
                      and k.split(".")[1] in SECTIONS}
        for key in sorted(keys | documented):
            sec, name = key.split(".")[1:3]
            row = rows.get(key)
            if row is None:
                bad.append(f"{key}: no row")
                continue
            if gen not in row:
                bad.append(f"{key}: no column '{gen}'")
                continue
            have = t.get(sec, {}).get(name)
            cell = row[gen]
            if have is None:
                if cell != "-":
                    bad.append(f"{key}: '{cell}' but {fname} has no such key (write -)")
            elif not same_value(cell, have):
                bad.append(f"{key}: '{cell}' but {fname} says {json.dumps(have)}")
        check(not bad, f"fidelity.md gives {fname}'s chip, host, ici and dcn values",
              "; ".join(bad))


def loader_keys():
    topo = read("sim/io/topology.c")
    conf = read("sim/io/config.c")
    keys = []
    for sec in SECTIONS:
        m = re.search(r"%s_keys\[\]\s*=\s*\{(.*?)\};" % sec, topo, re.S)
        keys += [f"topology.{sec}.{k}" for k in re.findall(r'"([A-Za-z_0-9]+)"', m.group(1))] \
            if m else [f"topology.{sec}.<list not found in sim/io/topology.c>"]
    m = re.search(r"collective_keys\[\]\s*=\s*\{(.*?)\};", conf, re.S)
    keys += [f"collective.{k}" for k in re.findall(r'"([A-Za-z_0-9]+)"', m.group(1))] \
        if m else ["collective.<list not found in sim/io/config.c>"]
    return keys


def hard_coded():
    names = []
    for path in FILES_WITH_CONSTANTS:
        for m in re.finditer(r"^#define\s+([A-Z][A-Z0-9_]*)\s+(?:U?INT64_C)?[(]*[0-9.]", read(path), re.M):
            if not m.group(1).startswith("MAX_"):
                names.append((path, m.group(1)))
    return names


def calibration(doc, bases):
    bad, points = [], {}
    for path in sorted(glob.glob(os.path.join(ROOT, "tests", "measured", "*.json"))):
        with open(path, encoding="utf-8") as f:
            p = json.load(f)
        points[p["name"]] = p
    gen_of = {}
    for path in glob.glob(os.path.join(ROOT, "topologies", "*.json")):
        with open(path, encoding="utf-8") as f:
            t = json.load(f)
        name, seen = t.get("name"), t
        while "generation" not in seen and "extends" in seen:
            with open(os.path.join(ROOT, "topologies", seen["extends"] + ".json"),
                      encoding="utf-8") as f:
                seen = json.load(f)
        gen_of[name] = seen.get("generation")
    cited = {}
    for fname, t in bases:
        for key, text in t.get("sources", {}).items():
            if not text.startswith("calibration:"):
                continue
            named = re.findall(r"tests/measured/([A-Za-z0-9_.-]+)\.json", text)
            if not named:
                bad.append(f"{fname} {key}: a calibration that names no tests/measured point")
            for n in named:
                cited.setdefault(t["generation"], set()).add(n)
                if n not in points:
                    bad.append(f"{fname} {key}: cites {n}, not in tests/measured")
                elif not points[n].get("calibration"):
                    bad.append(f"{fname} {key}: cites {n}, which is not marked calibration")
    marked = sorted(n for n, p in points.items() if p.get("calibration"))
    per_gen = {}
    for n in marked:
        g = gen_of.get(points[n]["topology"])
        per_gen.setdefault(g, []).append(n)
        if n not in cited.get(g, set()):
            bad.append(f"{n} is marked calibration but the {g} base topology does not cite it")
        if n not in doc:
            bad.append(f"docs/fidelity.md does not name the calibration point {n}")
    for g, ns in per_gen.items():
        if len(ns) > 1:
            bad.append(f"generation {g} has {len(ns)} calibration points: {', '.join(ns)}")
    check(not bad, "calibration points: cited, marked, at most one per generation, documented",
          "; ".join(bad))
    return marked


def validate_marks(names):
    podsim = os.environ.get("PODSIM") or os.path.join(ROOT, "podsim")
    for n in names:
        r = subprocess.run([podsim, "validate", "--dir", os.path.join(ROOT, "tests", "measured"),
                            "--only", n], capture_output=True, text=True, cwd=ROOT)
        row = [ln for ln in r.stdout.splitlines() if ln.startswith(n + " ")]
        check(bool(row) and row[0].split()[1] == "*",
              f"podsim validate marks {n} with *",
              f"exit {r.returncode}, row {row!r}, stderr {r.stderr.strip()[:300]!r}")


def experiment_defaults(rows):
    """Rows with a `default` column against `podsim describe` of an
    experiment that sets none of their keys."""
    podsim = os.environ.get("PODSIM") or os.path.join(ROOT, "podsim")
    exp = {"name": "defaults", "topology": "tpu-v3-8", "model": "resnet50", "global_batch": 8,
           "strategy": {"kind": "replicate"}}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "defaults.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(exp, f)
        r = subprocess.run([podsim, "describe", path], capture_output=True, text=True,
                           env=dict(os.environ, PODSIM_DATA_DIR=ROOT))
    try:
        resolved = json.loads(r.stdout)
    except ValueError:
        check(False, "podsim describe resolves an experiment's defaults", r.stderr[:300])
        return
    bad, n = [], 0
    for key, row in rows.items():
        if "default" not in row:
            continue
        n += 1
        node = resolved
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        cell = row["default"].split()[0] if row["default"] else ""
        if node is None or not same_value(cell, node):
            bad.append(f"{key}: '{cell}' but podsim describe gives {json.dumps(node)}")
    check(n > 0 and not bad, f"fidelity.md's {n} experiment defaults are podsim's",
          "; ".join(bad) or "no row with a default column")


def main():
    try:
        doc = read("docs/fidelity.md")
    except OSError as e:
        print("1..1\nnot ok 1 - docs/fidelity.md is readable\n# " + str(e))
        return 1
    rows = doc_rows(doc)
    bases = base_topologies()
    check(len(bases) > 0, "the generations' base topology files are found")
    check_values(doc, rows, bases)
    missing = [k for k in loader_keys() if f"`{k}`" not in doc]
    check(not missing, "fidelity.md names every key the topology and collective loaders accept",
          "missing: " + ", ".join(missing))
    missing = [f"{n} ({p})" for p, n in hard_coded() if f"`{n}`" not in doc]
    check(not missing, "fidelity.md names every numeric #define of the cost and network code",
          "missing: " + ", ".join(missing))
    validate_marks(calibration(doc, bases))
    experiment_defaults(rows)
    print(f"1..{len(results)}")
    failed = 0
    for i, (ok, name, why) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}")
        if not ok:
            failed += 1
            for line in why.split("; "):
                print(f"#   {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
