#!/usr/bin/env python3
"""Formats scenario files the way they are kept: one scenario per block, one step per line.

    python3 crates/conformance/gen/format_scenarios.py crates/conformance/scenarios/*.json
"""
import json
import sys


def fmt(scenarios):
    out = ["["]
    for i, s in enumerate(scenarios):
        head = {k: v for k, v in s.items() if k != "steps"}
        lines = ["  {" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in head.items()) + ","]
        lines.append('   "steps": [')
        steps = s.get("steps", [])
        for j, st in enumerate(steps):
            lines.append("     " + json.dumps(st) + ("," if j + 1 < len(steps) else ""))
        lines.append("   ]}" + ("," if i + 1 < len(scenarios) else ""))
        out.extend(lines)
    out.append("]")
    return "\n".join(out) + "\n"


for path in sys.argv[1:]:
    data = json.load(open(path))
    text = fmt(data)
    assert json.loads(text) == data
    open(path, "w").write(text)
