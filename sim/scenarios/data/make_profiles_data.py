#!/usr/bin/env python3
"""Writes the CSV loads of sim/scenarios/profiles.toml (fixed seed: the same files every run).

  python3 sim/scenarios/data/make_profiles_data.py   # from the repository root
"""
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))


def write(name, header, comment, rows):
    with open(os.path.join(HERE, name), "w") as f:
        f.write("# " + comment + "\n")
        f.write(",".join(header) + "\n")
        for row in rows:
            f.write(",".join(fmt(v) for v in row) + "\n")


def fmt(v):
    return str(int(v)) if float(v).is_integer() else f"{v:.1f}"


def clamp(v, lo=0.0, hi=100.0):
    return max(lo, min(hi, v))


def training(rng, t, period, busy, high, low, fb_base, fb_peak):
    """One step of a training loop: `busy` s of compute near `high`%, with activations growing
    from fb_base to fb_peak MiB, then the rest of the period at `low`% (all-reduce, optimizer
    step, data loading) with the activations freed."""
    phase = t % period
    if phase < busy:
        util = clamp(rng.gauss(high, 1.5))
        fb = fb_base + (fb_peak - fb_base) * phase / busy
    else:
        util = clamp(rng.gauss(low, 1.5))
        fb = fb_base
    return util, round(fb)


def main():
    rng = random.Random(16)
    # GPU 0: 12 s iterations (9 s compute, 3 s dip), 20 iterations, looped.
    rows = []
    t = 0.0
    while t <= 240.0 + 1e-9:
        util, fb = training(rng, t, 12.0, 9.0, 95.0, 8.0, 58000, 71000)
        rows.append((t, util, fb))
        t += 0.5
    rows[-1] = (240.0, rows[0][1], rows[0][2])  # the loop point meets the start
    write("profiles-training.csv", ["t_s", "util", "fb_mib"],
          "profiles.toml GPU 0: training, 12 s iterations (9 s compute ~95%, 3 s dip ~8%); "
          "FB used grows with the activations and drops in the dip", rows)

    # GPU 1: an inference server, steady ~62% with noise (sd 4), 10 minutes looped.
    rows = [(float(s), round(clamp(rng.gauss(62.0, 4.0))), 0) for s in range(0, 601)]
    rows = [(t, u) for t, u, _ in rows]
    rows[-1] = (600.0, rows[0][1])
    write("profiles-inference.csv", ["t_s", "util"],
          "profiles.toml GPU 1: an inference server, steady ~62% with noise", rows)

    # GPU 3: training with 8 s iterations (6 s compute, 2 s dip) until 60 s, then evaluation:
    # a steady ~45% (sd 3) with the activations of a smaller batch, until 600 s (held after).
    rows = []
    t = 0.0
    while t < 60.0 - 1e-9:
        util, fb = training(rng, t, 8.0, 6.0, 92.0, 6.0, 40000, 52000)
        rows.append((t, util, fb))
        t += 0.5
    t = 60.0
    while t <= 600.0 + 1e-9:
        rows.append((t, clamp(round(rng.gauss(45.0, 3.0))), 44000))
        t += 1.0
    write("profiles-train-eval.csv", ["t_s", "util", "fb_mib"],
          "profiles.toml GPU 3: training (8 s iterations) until 60 s, then a steady evaluation "
          "pass ~45%", rows)


if __name__ == "__main__":
    main()
