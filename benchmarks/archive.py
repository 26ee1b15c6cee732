"""Shrink a results folder before committing it: every JSON or JSON-lines file over 64 KB
(a bench run's per-task records) becomes ``NAME.json.gz`` / ``NAME.jsonl.gz``: the same
content, written compactly with floats to 9 significant digits (times in seconds keep
microseconds), gzipped; the original is deleted. Figures (``*.png``) are deleted unless
``--keep-png``: a figure is redrawn from its JSON with ``benchmarks/replot.py``.

    python benchmarks/archive.py benchmarks/results/2026-12-01-my-run/
    zcat benchmarks/results/2026-12-01-my-run/bench.json.gz | python -m json.tool | less

Needs only the standard library. A results folder should stay under ~1 MB (its README says
why when it cannot).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os

LIMIT = 64 * 1024


def rounded(x):
    """Floats to 9 significant digits, everything else as it is.

    >>> rounded({"t": [1.8000451160005468, 2], "ok": True, "lr": 2.5e-07})
    {'t': [1.80004512, 2], 'ok': True, 'lr': 2.5e-07}
    """
    if isinstance(x, float):
        return float(f"{x:.9g}")
    if isinstance(x, list):
        return [rounded(v) for v in x]
    if isinstance(x, dict):
        return {k: rounded(v) for k, v in x.items()}
    return x


def compact(text: str, lines: bool) -> bytes:
    if lines:
        out = [json.dumps(rounded(json.loads(line)), separators=(",", ":"))
               for line in text.splitlines() if line.strip()]
        return ("\n".join(out) + "\n").encode()
    return json.dumps(rounded(json.loads(text)), separators=(",", ":")).encode()


def archive(folder: str, keep_png: bool = False) -> tuple[int, int]:
    before = after = 0
    for here, _, files in os.walk(folder):
        for name in sorted(files):
            path = os.path.join(here, name)
            size = os.path.getsize(path)
            before += size
            if name.endswith((".json", ".jsonl")) and size > LIMIT:
                with open(path) as f:
                    data = compact(f.read(), name.endswith(".jsonl"))
                with open(path + ".gz", "wb") as f:
                    with gzip.GzipFile(filename="", mode="wb", fileobj=f, compresslevel=9,
                                       mtime=0) as gz:
                        gz.write(data)
                os.remove(path)
                after += os.path.getsize(path + ".gz")
                print(f"{path}: {size:,} B -> {path}.gz {os.path.getsize(path + '.gz'):,} B")
            elif name.endswith(".png") and not keep_png:
                os.remove(path)
                print(f"{path}: {size:,} B removed (benchmarks/replot.py redraws it)")
            else:
                after += size
    return before, after


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+")
    p.add_argument("--keep-png", action="store_true")
    a = p.parse_args(argv)
    for folder in a.folders:
        before, after = archive(folder, a.keep_png)
        print(f"{folder}: {before / 1e6:.2f} MB -> {after / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
