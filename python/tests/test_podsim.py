"""test_podsim.py: the podsim Python package against the podsim command line
it stands beside: run() is `podsim run --json`, sweep() is `podsim sweep`,
describe() is `podsim describe`, and errors carry the messages the command
line prints, with its exit status.

Everything runs with numerics off and a few steps, so the file takes a
second or two.  The command line is $PODSIM (make test sets it), else the
podsim binary at the root of the tree.

Invariant: each comparison runs the command line and the package in the
same working directory, so the file names in messages are spelt alike.
"""

import contextlib
import csv
import io
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

import podsim  # noqa: E402

PODSIM = os.environ.get("PODSIM") or os.path.join(ROOT, "podsim")
FAST = ["numerics.enabled=false", "steps=20"]
WALL = ("wall_s", "events_per_s")


def cli(*args):
    """podsim ARGS: (exit status, stdout, stderr)."""
    p = subprocess.run([PODSIM, *args], capture_output=True, text=True, cwd=os.getcwd())
    return p.returncode, p.stdout, p.stderr


def cli_json(*args):
    status, out, err = cli(*args)
    assert status == 0, err
    return json.loads(out)


def sets(pairs):
    return [a for p in pairs for a in ("--set", p)]


def without_wall(d):
    return {k: v for k, v in d.items() if k not in WALL}


def test_run_is_the_cli_json():
    got = podsim.run("default", set=FAST)
    want = cli_json("run", "default", "--json", "--no-trace", *sets(FAST))
    assert set(WALL) <= set(got)
    assert without_wall(got) == without_wall(want)


def test_override_moves_the_step_as_the_cli_does():
    base = podsim.run("default", set=FAST)
    slow = podsim.run("default", set=FAST, **{"topology.ici.bandwidth_Bps": 5e9})
    want = cli_json("run", "default", "--json", "--no-trace",
                    *sets(FAST + ["topology.ici.bandwidth_Bps=5e9"]))
    assert slow["step_time_s"] == want["step_time_s"]
    assert slow["step_time_s"] > base["step_time_s"]
    assert slow["breakdown"]["collective"] > base["breakdown"]["collective"]


def test_override_forms_agree():
    as_list = podsim.run("default", set=FAST + ["global_batch=128"])
    as_dict = podsim.run("default", set={"numerics.enabled": False, "steps": 20,
                                         "global_batch": 128})
    as_keywords = podsim.run("default", numerics__enabled=False, steps=20, global_batch=128)
    assert as_list["global_batch"] == 128
    assert without_wall(as_list) == without_wall(as_dict) == without_wall(as_keywords)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def cell_value(text):
    """A CSV cell of `podsim sweep` read back: its JSON value, else the text
    (an empty cell is None)."""
    if text == "":
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def test_sweep_rows_are_the_cli_rows(tmp_path):
    vary = {"global_batch": [32, 64, 7], "topology.ici.bandwidth_Bps": [50e9, 100e9]}
    rows = podsim.sweep("default", vary=vary, set=FAST, frame=False)
    out = tmp_path / "sweep.csv"
    args = ["--vary=global_batch=32,64,7", "--vary=topology.ici.bandwidth_Bps=50e9,100e9"]
    status, _, err = cli("sweep", "default", *args, *sets(FAST), "--out", str(out))
    assert status == 1, err  # batch 7 does not divide over 8 replicas: its rows fail
    want = read_csv(out)
    assert len(rows) == len(want) == 6
    assert list(want[0]) == list(rows[0])  # the same columns, in the same order
    for got, w in zip(rows, want):
        # a list of words (collective_on_core) is written as its words
        assert got == {k: w[k].split() if isinstance(got[k], list) else cell_value(w[k])
                       for k in got}
    assert rows[4]["error"] and rows[4]["global_batch"] == 7
    assert "step_time_s" not in rows[4]


def test_sweep_frame_and_threads():
    pandas = pytest.importorskip("pandas")
    df = podsim.sweep("default", vary={"global_batch": [32, 64, 128]}, set=FAST, jobs=2)
    assert isinstance(df, pandas.DataFrame)
    assert list(df["global_batch"]) == [32, 64, 128]
    one = podsim.run("default", set=FAST, global_batch=128)
    assert df["step_time_s"].iloc[2] == one["step_time_s"]
    assert "wall_s" not in df.columns and df["error"].isna().all()


def test_unknown_key_raises_the_cli_message():
    status, _, err = cli("run", "default", "--json", "--no-trace", "--set", "chip.peak_flops=1e12")
    assert status == 2
    with pytest.raises(podsim.InputError) as e:
        podsim.run("default", **{"chip.peak_flops": 1e12})
    assert e.value.status == 2 and e.value.code == "key"
    assert "podsim: " + e.value.message + "\n" == err
    assert e.value.message.endswith("did you mean --set topology.chip.peak_flops=1e12?")
    with pytest.raises(podsim.InputError):
        podsim.sweep("default", vary={"global_batchh": [32]}, set=FAST)


def test_bad_input_raises_as_the_cli_exits():
    for args, kw in ((["nosuch"], {}), (["default"], {"global_batch": 7}),
                     (["default"], {"global_batch": "many"})):
        status, _, err = cli("run", *args, "--json", "--no-trace", *sets(FAST),
                             *sets(f"{k}={v}" for k, v in kw.items()))
        with pytest.raises(podsim.InputError) as e:
            podsim.run(*args, set=FAST, **kw)
        assert status == 2 and "podsim: " + e.value.message + "\n" == err


def test_describe_is_the_cli_describe():
    assert podsim.describe("experiment", "default", global_batch=128) == \
        cli_json("describe", "experiment", "default", "--set", "global_batch=128")
    topo = podsim.describe("topology", "tpu-v3-8", **{"topology.ici.bandwidth_Bps": 1e9})
    assert topo["ici"]["bandwidth_Bps"] == 1e9 and topo["name"] == "tpu-v3-8"
    status, out, _ = cli("describe", "model", "cnn")
    assert status == 0 and podsim.describe("model", "cnn") == out
    with pytest.raises(podsim.InputError):
        podsim.describe("widget", "cnn")


def doc_cells(path):
    """The ```python blocks of a Markdown page, each with the ```text block
    right after it (its output), or None."""
    blocks = re.findall(r"```(\w+)\n(.*?)```\n(?:\s*\n)*", open(path).read(), re.S)
    cells = []
    for i, (lang, body) in enumerate(blocks):
        if lang == "python":
            after = blocks[i + 1] if i + 1 < len(blocks) else None
            cells.append((body, after[1] if after and after[0] == "text" else None))
    return cells


def test_docs_python_md_runs_as_shown(monkeypatch):
    """Every cell of docs/python.md, in one namespace, from the root of the
    tree as the page says; each printed output as shown under the cell."""
    pytest.importorskip("pandas")
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("PODSIM_DATA_DIR", raising=False)
    cells = doc_cells(os.path.join(ROOT, "docs", "python.md"))
    assert len(cells) >= 5
    namespace = {}
    for code, shown in cells:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "docs/python.md", "exec"), namespace)
        if shown is not None:
            assert out.getvalue() == shown, code
    assert os.path.getsize(os.path.join(ROOT, "build", "ici-sweep.png")) > 10000
