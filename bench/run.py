"""`make bench`: run every benchmark module ``bench/bench_*.py`` and write its JSON result to
``bench/results/<name>.json``. Each module defines ``run() -> dict``. Benchmarks compare against a
peer measured in the same run and report the ratio; these machines are noisy."""

from __future__ import annotations

import importlib.util
import json
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks reuse test fixtures (tests/prima/bundles.py)


def main(argv: list[str]) -> int:
    only = set(argv)
    results_dir = HERE / "results"
    results_dir.mkdir(exist_ok=True)
    failed = 0
    for path in sorted(HERE.glob("bench_*.py")):
        name = path.stem.removeprefix("bench_")
        if only and name not in only:
            continue
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        print(f"== bench {name}", flush=True)
        t0 = time.time()
        try:
            result = module.run()
        except Exception as exc:  # one failed benchmark must not hide the others
            print(f"   failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            failed += 1
            continue
        result.setdefault("machine", {"python": platform.python_version(), "cpus": _cpus()})
        result["wall_seconds"] = round(time.time() - t0, 2)
        out = results_dir / f"{name}.json"
        out.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2))
        print(f"   -> {out.relative_to(HERE.parent)}")
    return 1 if failed else 0


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
