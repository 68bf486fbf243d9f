"""The uncongested comparison on a noisy machine: `bench ddp --cpu --task widemlp` once per LABEL per
round, alternated, so the machine's swings land on every configuration alike. One JSON line a run
(CPU seconds of all ranks, user + system, and the median step), then the summary: per LABEL its
median step and CPU and the paired median of its ratio to the first LABEL's same round (also in
OUT/summary.json; every run in OUT/rounds.jsonl).

  python3 -m bench alternate --rounds 10 gloo= trim="--mode lossless"
  python3 -m bench alternate before="--build /tmp/old --mode lossless" after="--mode lossless\""""

import argparse
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from . import REPO, proc, rounds
from .jsonio import emit, load_json, write_json

METRICS = {"step_p50_ms": "step", "cpu_s": "cpu"}  # each metric and its paired ratio's name in the summary


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python3 -m bench alternate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--steps", type=int, default=160, help="widemlp steps a run")
    p.add_argument("--out", help="results folder (default: a new one under /tmp)")
    p.add_argument("specs", nargs="*", metavar="LABEL=ARGS", help="a configuration: its name and `bench ddp` options")
    a = p.parse_args(argv)
    if bad := [s for s in a.specs if "=" not in s]:
        p.error(f"'{bad[0]}' is not LABEL=ARGS")
    if not a.specs:
        p.error("name at least one LABEL=ARGS")
    if a.rounds < 1 or a.steps < 1:
        p.error(f"--rounds and --steps take positive integers, not {a.rounds} and {a.steps}")
    return a


def main(argv):
    a = parse_args(argv)
    out = Path(a.out or tempfile.mkdtemp(prefix="bench-alternate."))
    out.mkdir(parents=True, exist_ok=True)
    (out / "rounds.jsonl").write_text("")
    specs = dict(s.split("=", 1) for s in a.specs)

    def run(label, r):
        d = out / f"{label}_{r}"
        cmd = [sys.executable, "-m", "bench", "ddp", "--cpu", *shlex.split(specs[label]), "--task", "widemlp",
               "--epochs", "100", "--max-steps", str(a.steps), "--out", str(d)]
        _, cpu_s, _, _ = proc.cpu_run(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        step = (load_json(d / "summary.json") or {}).get("iter_p50_ms")
        if step is None:
            raise RuntimeError(f"no iter_p50_ms (see {d})")
        return {"cpu_s": round(cpu_s, 2), "step_p50_ms": round(step, 2)}

    rows = rounds.alternate(list(specs), a.rounds, run, out / "rounds.jsonl")
    s = rounds.summarize(rows, METRICS)
    # The keys check-gpu's report reads (one number each), then the intervals behind them.
    summary = {"rounds": s["rounds"], "baseline": s["baseline"]}
    for label in specs:
        x = s[label]
        base = label == s["baseline"] and x["ok_rounds"]
        summary[label] = {"ok_rounds": x["ok_rounds"], **{f"{m}_median": x[m]["median"] for m in METRICS},
                          **{f"{n}_paired_ratio": 1.0 if base else x.get(m + "_ratio", {}).get("median")
                             for m, n in METRICS.items()}, "intervals": x}
    write_json(out / "summary.json", summary)
    emit(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
