"""make conformance: PyTorch's distributed suite on trim against gloo, and the verdict.

    python tests/conformance/run.py [--world 2 3] [--out DIR] [--only-file F]

For each world size, runs dist_suite.py on gloo, then on trim the tests gloo did not skip (one
after the other: both spawn their ranks on this machine), and compares: every test that passes on gloo must pass on trim, or
be listed in exclusions.txt with its reason. Writes DIR/{gloo,trim}-w<N>.jsonl and
DIR/summary.json, prints one line per world size, and exits 1 on any test that passes on gloo
and fails (or is skipped) on trim without an exclusion. Tests gloo does not pass are reported,
not judged.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def exclusions(path: Path = HERE / "exclusions.txt") -> dict:
    """test name -> reason, from lines "test_name  # reason"."""
    out = {}
    for line in path.read_text().splitlines():
        name, _, reason = line.partition("#")
        if name.strip():
            out[name.strip()] = reason.strip()
    return out


def run_suite(backend: str, world: int, out: Path, only_file=None) -> list:
    path = out / f"{backend}-w{world}.jsonl"
    cmd = [sys.executable, str(HERE / "dist_suite.py"), "--backend", backend, "--world", str(world), "--out", str(path)]
    if only_file:
        cmd += ["--only-file", str(only_file)]
    env = {k: v for k, v in os.environ.items() if k != "TEMP_DIR"}  # each run makes its own
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def verdict(gloo: list, trim: list, excluded: dict) -> dict:
    """The comparison of one world size's two runs."""
    g = {r["test"]: r["outcome"] for r in gloo}
    t = {r["test"]: r for r in trim}
    passed_on_gloo = sorted(n for n, o in g.items() if o == "pass")
    failed = [n for n in passed_on_gloo if t.get(n, {}).get("outcome") != "pass" and n not in excluded]
    return {
        "gloo_pass": len(passed_on_gloo),
        "trim_pass": sum(t.get(n, {}).get("outcome") == "pass" for n in passed_on_gloo),
        "excluded": sorted(n for n in passed_on_gloo if n in excluded and t.get(n, {}).get("outcome") != "pass"),
        "failed": failed,
        "failed_why": {n: t.get(n, {}).get("why", "not run")[-300:] for n in failed},
        "skipped_by_the_suite": sum(o == "skip" for o in g.values()),
        "gloo_fails": sorted(n for n, o in g.items() if o == "fail"),
        "trim_only_pass": sorted(n for n, r in t.items() if r["outcome"] == "pass" and g.get(n) != "pass"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--out", default="build/conformance")
    ap.add_argument("--only-file", help="run only these tests (dist_suite.py --only-file)")
    opts = ap.parse_args()
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    excluded = exclusions()
    summary, bad = {}, 0
    for world in opts.world:
        gloo = run_suite("gloo", world, out, opts.only_file)
        # trim runs what gloo did not skip: the skips are the suite's gates on BACKEND=gloo, CUDA,
        # world size and MPI/NCCL-only ops, the same for both (this halves the run).
        ran = out / f"gloo-w{world}.ran"
        ran.write_text("".join(r["test"] + "\n" for r in gloo if r["outcome"] != "skip"))
        trim = run_suite("trim", world, out, ran)
        v = verdict(gloo, trim, excluded)
        summary[f"world{world}"] = v
        bad += len(v["failed"])
        print(json.dumps({"world": world, "tests": len(trim), "gloo_pass": v["gloo_pass"], "trim_pass": v["trim_pass"],
                          "excluded": len(v["excluded"]), "failed": v["failed"]}), flush=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
