"""Compare two revisions of poolkit on ``bench_pool.py``'s workloads, in one run: the rounds
alternate between them (A B, B A, ...), so that the shared machine's drift falls on both.

    python benchmarks/ab_pool.py BEFORE [AFTER] [--rounds 9] [--cycles 50000]

BEFORE and AFTER are git revisions (AFTER: the working tree if not given); each is checked out in
a temporary worktree and run with its own ``src`` first on the path. Each round runs
``bench_pool.py --repeat 3`` per revision. Printed: the medians of each form's figure against the
minimal pool of the same run (W1: time per cycle / the floor's, lower is better; W2: throughput /
the floor's, higher is better) and AFTER / BEFORE.

Each run makes a random number of objects before ``bench_pool.py`` imports anything (``LAUNCH``):
a process started the same way lands its objects in memory the same way, and that layout moved a
drop-in's speed by up to 1.5x in ``peer_ab.py`` (see its "Layout"); drawn anew per run, it falls
on both revisions alike. ``--same-layout`` turns it off.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent

sys.path.insert(0, str(HERE))  # (run as a script from anywhere)

from layouts import draw  # noqa: E402

#: ``python -c LAUNCH BALLAST SCRIPT ARGS...``: SCRIPT run as ``python SCRIPT ARGS...`` would run
#: it, after BALLAST objects are made (``layouts.ballast``, from this tree: kept for the run);
#: works for any revision's script
LAUNCH = (
    f"import os, runpy, sys; sys.path.insert(0, {str(HERE)!r}); from layouts import ballast; "
    "_ballast = ballast(int(sys.argv.pop(1))); del sys.path[0]; "
    "sys.argv.pop(0); sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0])); "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


def figures(report: dict[str, object]) -> dict[tuple[str, str], list[float]]:
    """Each (workload, form)'s figures against the floor of the same run."""
    out: dict[tuple[str, str], list[float]] = {}
    runs: dict[str, dict[str, list[dict[str, float]]]] = report["runs"]  # type: ignore[assignment]  # (JSON)
    for workload, by_form in runs.items():
        floor = by_form["floor"]
        for form, results in by_form.items():
            if form == "floor":
                continue
            for i, result in enumerate(results):
                if "x_floor" in result:  # W1: time per cycle
                    value = result["x_floor"]
                else:  # W2: throughput
                    value = result["ops_per_s"] / floor[i]["ops_per_s"]
                out.setdefault((workload, form), []).append(value)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after", nargs="?", help="a revision (default: the working tree)")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--cycles", type=int, default=50_000)
    parser.add_argument(
        "--same-layout", dest="layouts", action="store_false", help="no ballast (see above)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="poolkit-ab-") as tmp:
        trees: dict[str, Path] = {}
        for name, rev in (("before", args.before), ("after", args.after)):
            if rev is None:
                trees[f"{name} (working tree)"] = ROOT
                continue
            path = Path(tmp) / name
            subprocess.run(
                ["git", "worktree", "add", "--detach", "-q", str(path), rev], cwd=ROOT, check=True
            )
            trees[f"{name} ({rev})"] = path
        try:
            got: dict[tuple[str, str], dict[str, list[float]]] = {}
            for round_ in range(args.rounds):
                order = list(trees.items())
                if round_ % 2:
                    order.reverse()
                for name, tree in order:
                    out = Path(tmp) / "run.json"
                    env = dict(os.environ, PYTHONPATH=str(tree / "src"))
                    ballast = draw(args.layouts)
                    subprocess.run(
                        [sys.executable, "-c", LAUNCH, str(ballast),
                         str(tree / "benchmarks/bench_pool.py"), "--repeat", "3",
                         "--cycles", str(args.cycles), "--json", str(out)],
                        env=env, cwd=tree, stdout=subprocess.DEVNULL, check=True,
                    )  # fmt: skip
                    for key, values in figures(json.loads(out.read_text())).items():
                        got.setdefault(key, {}).setdefault(name, []).extend(values)
                print(f"round {round_ + 1} of {args.rounds} done", file=sys.stderr, flush=True)
        finally:
            for tree in trees.values():
                if tree != ROOT:
                    subprocess.run(
                        ["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False
                    )
    names = list(trees)
    print("W1: time per cycle / floor (lower is better); W2: throughput / floor (higher is better)")
    print(
        f"{'workload':<12} {'form':<22} " + " ".join(f"{n:>24}" for n in names) + "  after/before"
    )
    for (workload, form), by_name in sorted(got.items()):
        # (a workload one revision's bench_pool.py has and the other's lacks: its figures alone)
        medians = [statistics.median(by_name[n]) if n in by_name else math.nan for n in names]
        cells = " ".join(f"{m:>24.3f}" for m in medians)
        print(f"{workload:<12} {form:<22} {cells}  {medians[1] / medians[0]:>12.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
