"""The drop-in contract's matrix (issue 15): case x strategy, from a pytest JUnit XML report of
``tests/strategies/test_compat.py::test_compatibility``.

Each cell says what the test recorded: ``pass`` (the case trained and did what it checks),
``refused`` (the strategy refused it before training with its one-line refusal), ``FAIL``
(with the first line of the failure) or ``skipped``. Cells come only from the report: a case
the run did not reach is left empty, not counted as a pass.

    PYTEST_ADDOPTS="--junitxml=runs/junit.xml" make test        # or any pytest run of the module
    .venv/bin/python benchmarks/contract_matrix.py runs/junit.xml > runs/contract.md

>>> xml = '''<testsuites><testsuite>
... <testcase classname="tests.test_strategies_compat_inprocess"
...   name="test_compatibility[tutorial-bsp]">
...   <properties><property name="cell" value="pass"/></properties></testcase>
... <testcase classname="tests.test_strategies_compat_inprocess"
...   name="test_compatibility[steps_per_execution-hpspipe]">
...   <properties><property name="cell" value="refused"/></properties></testcase>
... <testcase classname="tests.test_strategies_compat_inprocess"
...   name="test_compatibility[tutorial-hpspipe]@inprocess-compat">
...   <failure message="AssertionError: weights moved&#10;more">...</failure></testcase>
... </testsuite></testsuites>'''
>>> print(matrix(cells(xml)))
| case | bsp | hpspipe |
|---|---|---|
| tutorial | pass | FAIL: AssertionError: weights moved |
| steps_per_execution |  | refused |
<BLANKLINE>
cells: 3 (pass 1, refused 1, FAIL 1)
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET

#: A cell's test name; under ``make test`` (pytest-xdist, ``--dist loadgroup``) the report
#: appends the test's group: ``test_compatibility[tutorial-bsp]@inprocess-compat``.
_NAME = re.compile(r"^test_compatibility\[(?P<case>[^-\]]+)-(?P<strategy>[^\]]+)\](@[^\s]+)?$")


def cells(xml_text: str) -> dict:
    """{(case, strategy): outcome} of every ``test_compatibility`` case in the report."""
    out = {}
    for case in ET.fromstring(xml_text).iter("testcase"):
        m = _NAME.match(case.get("name", ""))
        if not m:
            continue
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        if failure is not None:
            first = (failure.get("message") or "").strip().splitlines() or ["(no message)"]
            outcome = "FAIL: " + first[0][:120]
        elif case.find("skipped") is not None:
            outcome = "skipped"
        else:
            recorded = {p.get("name"): p.get("value") for p in case.iter("property")}
            outcome = recorded.get("cell", "FAIL: passed without recording its cell")
        out[(m["case"], m["strategy"])] = outcome
    return out


def matrix(found: dict) -> str:
    """Markdown: rows are the cases, columns the strategies (in the report's order)."""
    cases = list(dict.fromkeys(c for c, _ in found))
    strategies = list(dict.fromkeys(s for _, s in found))
    lines = ["| case | " + " | ".join(strategies) + " |",
             "|---|" + "---|" * len(strategies)]
    for c in cases:
        lines.append(f"| {c} | " + " | ".join(found.get((c, s), "") for s in strategies) + " |")
    kinds = [v.split(":")[0] for v in found.values()]
    counts = ", ".join(f"{k} {kinds.count(k)}" for k in ("pass", "refused", "FAIL", "skipped")
                       if kinds.count(k))
    return "\n".join(lines) + f"\n\ncells: {len(found)} ({counts})"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: contract_matrix.py JUNIT.xml (from pytest --junitxml)", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        found = cells(f.read())
    if not found:
        print(f"{argv[0]}: no test_compatibility case in this report. Fix: run "
              "tests/strategies/test_compat.py with --junitxml.", file=sys.stderr)
        return 2
    print(matrix(found))
    return 1 if any(v.startswith("FAIL") for v in found.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
