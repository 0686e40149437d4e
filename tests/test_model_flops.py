#!/usr/bin/env python3
"""test_model_flops.py: podsim's model FLOPs against the figures the runs
themselves print.

MaxText logs each step's "TFLOP/s/device" from its own count of a model's
FLOPs (maxtext_utils.py, calculate_tflops_training_per_device: the weight
products and the embedding's output product 3 times, causal attention's
score and context products halved), and Google's recipes publish it, or
the MFU it gives, beside the step time.  podsim's `mfu_causal` and
`model_flops_causal_per_step` (podsim run --json) count the same way from
the model files, so the published figure over the published step is an
independent check of each model file's shapes (heads, head_dim, the
sliding windows, the vocabulary, latent attention's) and of the count, with no timing in it:
podsim's causal count over the point's measured step must give the
published figure.  A point on several slices runs as one of its slices
(topology.slices 1, its global batch over the slices): each device holds
the same share of the same model, so its count per device is the same, at
a fraction of the simulated events.

Checks, one TAP test a point: for each point below (a file of
tests/measured, the figure read off the source that file cites), podsim
runs the point's experiment for one step with its `podsim` settings; its
causal count per step, over the measured step, over the chips' bf16 peak
(MFU) or over the devices (TFLOP/s/device), is within 0.5% of the
published figure.

Usage: test_model_flops.py [ARGS...]; arguments (prove's --tap, -m
thorough) are ignored.  Run from the project root or with PODSIM_DATA_DIR
set to it; $PODSIM names the binary (default: the root's podsim).

Invariant: writes nothing.
"""
import json
import os
import subprocess
import sys

ROOT = os.environ.get("PODSIM_DATA_DIR") or os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))
PODSIM = os.environ.get("PODSIM") or os.path.join(ROOT, "podsim")
TOLERANCE = 0.005

# (point, kind, published figure, where the point's source gives it)
POINTS = [
    ("tpu-recipes-tpu7x-llama3.1-8b-64k-tpu7x-128", "mfu", 0.517,
     "the recipe README's 'Other sequence lengths' table, 65536 row: MFU 51.7%"),
    ("tpu-recipes-tpu7x-llama3.1-8b-256k-tpu7x-128", "mfu", 0.507,
     "the same table, 262144 row: MFU 50.7%"),
    ("tpu-recipes-tpu7x-llama3.1-8b-4m-tpu7x-128", "mfu", 0.5093,
     "'Verified benchmark performance', 4194304 row: MFU 50.93% with p-state 7"),
    ("tpu-recipes-v6e-gemma3-12b-2x-tpu-v6e-256", "tflops", 328.139,
     "the README's example log: 'TFLOP/s/device: 328.139'"),
    ("tpu-recipes-v6e-gemma3-12b-4x-tpu-v6e-256", "tflops", 304.788,
     "the README's example log: 'TFLOP/s/device: 304.788'"),
    ("tpu-recipes-tpu7x-gpt-oss-120b-tpu7x-128", "tflops", 330.25 / 2,
     "the Ironwood table's 330.25 TFLOP/s a chip, two devices a chip"),
    ("tpu-recipes-tpu7x-deepseek3-671b-tpu7x-256", "tflops", 607.53 / 2,
     "the Ironwood table's 607.53 TFLOP/s a chip, two devices a chip"),
]


def run_point(name):
    with open(os.path.join(ROOT, "tests", "measured", name + ".json")) as f:
        point = json.load(f)
    experiment = os.path.join(ROOT, "experiments", point.get("experiment", "default") + ".json")
    args = [PODSIM, "run", experiment, "--steps", "1", "--no-trace", "--quiet", "--json"]
    settings = dict(point["podsim"])
    slices = int(settings.get("topology.slices", 1))
    if slices > 1:
        settings["topology.slices"] = 1
        settings["global_batch"] = int(settings["global_batch"]) // slices
    for key, value in settings.items():
        text = value if isinstance(value, str) else json.dumps(value)
        args += ["--set", "%s=%s" % (key, text)]
    out = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError("podsim run %s: exit %d: %s" % (name, out.returncode,
                                                           out.stderr.strip()[:300]))
    return point, json.loads(out.stdout)


def main():
    print("1..%d" % len(POINTS))
    failed = 0
    for i, (name, kind, published, where) in enumerate(POINTS, 1):
        try:
            point, s = run_point(name)
        except (RuntimeError, ValueError, OSError) as e:
            print("not ok %d - %s\n# %s" % (i, name, e))
            failed += 1
            continue
        measured = point["measured_step_s"]
        # the run's own peak and devices, from its figures: MFU = FLOPs /
        # (step x chips x peak), TFLOP/s/device = FLOPs / step / devices
        chip_peak_s = s["model_flops_causal_per_step"] / s["mfu_causal"]
        devices_s = s["model_flops_causal_per_step"] / s["tflops_per_device"] / 1e12
        if kind == "mfu":
            got = s["model_flops_causal_per_step"] / (chip_peak_s / s["step_time_s"] * measured)
        else:
            got = s["model_flops_causal_per_step"] / (devices_s / s["step_time_s"] * measured) / 1e12
        ok = abs(got - published) <= TOLERANCE * published
        failed += not ok
        print("%s %d - %s: %s %.5g from podsim's count over the measured %.3f s, published %.5g"
              " (%s)" % ("ok" if ok else "not ok", i, name, kind, got, measured, published,
                         where))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
