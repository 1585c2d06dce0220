"""Kernels per loop iteration, counted in XLA's optimised HLO text.

The counting rule: docs/performance.md, "How the harness measures".
"""

import json
import re
from collections import Counter
from typing import Any

import jax

NOT_KERNELS = frozenset(
    {
        "parameter",
        "constant",
        "get-tuple-element",
        "tuple",
        "bitcast",
        "after-all",
        "opt-barrier",
        "partition-id",
        "replica-id",
        "add-dependency",
        "domain",
    }
)
"""Opcodes that launch no kernel on XLA:CPU (aliases, bookkeeping)."""

# A computation starts with `[ENTRY] %name (params) -> shape {` and ends with `}`;
# an instruction is `[ROOT] %name = shape opcode(operands), attributes`.
_HEADER = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s([a-z][\w\-]*)\((.*)$"
)
# the computations an instruction runs: fusions, calls, reductions, loops
_CALLEE = re.compile(r"\b(calls|to_apply|body|condition)=%?([\w.\-]+)")
_BRANCHES = re.compile(
    r"\b(?:branch_computations=\{([^}]*)\}|(?:true|false)_computation=%?([\w.\-]+))"
)
# XLA writes a loop's trip count, when it knows it, in the backend config JSON
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_FUSION_KIND = re.compile(r"\bkind=(k\w+)")
# a pseudo-opcode counting what ran inside nested loops; popped before returning
_NESTED = "<in nested loops>"
_BRANCHED = "<in conditional branches>"
_PSEUDO = (_NESTED, _BRANCHED)


class _Instruction:
    __slots__ = ("opcode", "rest")

    def __init__(self, opcode: str, rest: str):
        self.opcode = opcode
        self.rest = rest

    def callee(self, attribute: str) -> str | None:
        for name, value in _CALLEE.findall(self.rest):
            if name == attribute:
                return value
        return None

    def branches(self) -> list[str]:
        out: list[str] = []
        for group, single in _BRANCHES.findall(self.rest):
            if group:
                out += [b.strip().lstrip("%") for b in group.split(",") if b.strip()]
            elif single:
                out.append(single)
        return out


def _computations(text: str) -> dict[str, list[_Instruction]]:
    """Computation name -> its instructions, from an HLO module's text."""
    computations: dict[str, list[_Instruction]] = {}
    current: list[_Instruction] | None = None
    for line in text.splitlines():
        if current is None:
            header = _HEADER.match(line)
            # an `=` before the parameters is an instruction, not a header
            if header and "=" not in line.split("{")[0].split("(")[0]:
                current = computations.setdefault(header.group(1), [])
            continue
        if line.strip() == "}":
            current = None
            continue
        match = _INSTRUCTION.match(line)
        if match:
            current.append(_Instruction(match.group(3), match.group(4)))
    return computations


def _count(
    name: str,
    computations: dict[str, list[_Instruction]],
    counts: Counter[str],
    fusion_kinds: Counter[str],
) -> None:
    for instruction in computations.get(name, []):
        op = instruction.opcode
        if op in NOT_KERNELS:
            continue
        if op == "call":
            # a call launches nothing itself: its callee's kernels run in place
            callee = instruction.callee("to_apply")
            if callee in computations:
                _count(callee, computations, counts, fusion_kinds)
                continue
        if op == "conditional":
            # one branch runs: count the largest, an upper bound per iteration
            best: tuple[dict[str, int], Counter[str], int] = ({}, Counter(), 0)
            for branch in instruction.branches():
                c: Counter[str] = Counter()
                k: Counter[str] = Counter()
                _count(branch, computations, c, k)
                ops = {key: v for key, v in c.items() if key not in _PSEUDO}
                if sum(ops.values()) > sum(best[0].values()):
                    best = (ops, k, c[_NESTED])
            ops, kinds, nested = best
            counts.update(ops)
            fusion_kinds.update(kinds)
            counts[_NESTED] += nested
            counts[_BRANCHED] += sum(ops.values()) - nested
        if op == "while":
            body, condition = (
                instruction.callee("body"),
                instruction.callee("condition"),
            )
            trip = _TRIP.search(instruction.rest)
            inner: Counter[str] = Counter()
            inner_kinds: Counter[str] = Counter()
            for callee in (body, condition):
                if callee is not None:
                    _count(callee, computations, inner, inner_kinds)
            n = int(trip.group(1)) if trip else 1  # unknown: count one trip
            for key, value in inner.items():
                # Inside a nested loop all of it is nested; the opcode counts
                # hold every kernel of the loop (those of loops inside it too),
                # so its own nested and branched tallies are not added again.
                if key in (_BRANCHED, _NESTED):
                    continue
                counts[key] += n * value
                counts[_NESTED] += n * value
            for key, value in inner_kinds.items():
                fusion_kinds[key] += n * value
        if op == "fusion":
            kind = _FUSION_KIND.search(instruction.rest)
            fusion_kinds[kind.group(1) if kind else "unknown"] += 1
        counts[op] += 1


def loop_body_kernels(compiled_text: str | None, trip_count: int | None = None) -> dict:
    """Kernels per iteration of the lifetime loop in optimised HLO text.

    Arguments:
        compiled_text: `jax.jit(f).lower(*args).compile().as_text()`.
        trip_count: pick the `while` with this known trip count (default: the
            largest; the whole rule is in docs/performance.md).

    Returns:
        `{"total", "top_level", "in_nested_loops", "in_branches",
        "by_opcode": {opcode: n},
        "by_fusion_kind": {kind: n}, "condition", "trip_count", "loops"}`
        where `loops` is how many `while` instructions the module holds. Raises
        `ValueError` if there is no (matching) loop.

    Example:
        >>> text = jax.jit(f).lower(x).compile().as_text()
        >>> loop_body_kernels(text)["total"]
    """
    if compiled_text is None:  # `Compiled.as_text()` where a backend has none
        raise ValueError("no HLO text: the backend gave none")
    computations = _computations(compiled_text)
    loops: list[tuple[int | None, int, str, str | None]] = []
    for instructions in computations.values():
        for instruction in instructions:
            if instruction.opcode != "while":
                continue
            body = instruction.callee("body")
            if body is None:
                continue
            trip = _TRIP.search(instruction.rest)
            n = int(trip.group(1)) if trip else None
            loops.append(
                (
                    n,
                    len(computations.get(body, [])),
                    body,
                    instruction.callee("condition"),
                )
            )
    num_loops = len(loops)
    if trip_count is not None:
        loops = [loop for loop in loops if loop[0] == trip_count]
    if not loops:
        wanted = "" if trip_count is None else f" with known trip count {trip_count}"
        raise ValueError(f"no while loop{wanted} in the HLO text")
    n, _, body, condition = max(loops, key=lambda loop: (loop[0] or -1, loop[1]))
    counts: Counter[str] = Counter()
    fusion_kinds: Counter[str] = Counter()
    _count(body, computations, counts, fusion_kinds)
    nested = counts.pop(_NESTED, 0)
    branched = counts.pop(_BRANCHED, 0)
    top_level = sum(i.opcode not in NOT_KERNELS for i in computations.get(body, []))
    condition_counts: Counter[str] = Counter()
    if condition is not None:
        _count(condition, computations, condition_counts, Counter())
    return {
        "total": counts.total(),
        "top_level": top_level,
        "in_nested_loops": nested,
        "in_branches": branched,
        "by_opcode": dict(sorted(counts.items())),
        "by_fusion_kind": dict(sorted(fusion_kinds.items())),
        "condition": condition_counts.total(),
        "trip_count": n,
        "loops": num_loops,
    }


def compiled_text(fn: Any, *args: Any) -> str | None:
    """`jax.jit(fn).lower(*args).compile().as_text()`: the optimised HLO."""
    return jax.jit(fn).lower(*args).compile().as_text()


def kernels_summary(counts: dict) -> str:
    """`counts["by_opcode"]` as one short string, for a table cell."""
    return json.dumps(counts["by_opcode"], separators=(",", ":"))


__all__ = ["NOT_KERNELS", "compiled_text", "kernels_summary", "loop_body_kernels"]
