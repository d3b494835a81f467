"""SASS instruction mix of the innermost HGMMA loops of one kernel variant (sm_90a, no GPU needed).

    python scripts/sass_loop_mix.py bwd|fwd --head-dim 128 [--causal] [--columns C] [--gqa]
                                    [--deterministic] [--json PATH]
    python scripts/sass_loop_mix.py cubin --cubin FILE [--json PATH]    # any sm_90a cubin
    ... [--all-loops]    # also list every loop of the kernel (producer, dQ writer, retry stubs)

Compiles one of our kernel variants for sm_90a on the CPU (configs from ``interface``, i.e. what
the host API runs), disassembles it with ``nvdisasm -c`` and finds the innermost loops that contain
HGMMA: a conditional or unconditional branch back to an earlier ``.L_x_N`` label whose range holds
no unpredicated ``EXIT`` and no unpredicated jump out of the range (that rules out the out-of-line
mbarrier retry stubs ptxas puts after the function's end, which branch back into the loop). For
each loop it prints the static instruction count, the opcode histogram (base opcode, e.g.
``HGMMA.64x128x16.F32.BF16`` -> ``HGMMA``) and every forward branch inside the loop with the
instructions it can skip, so the runtime path length is visible (e.g. full attention skips the
element-mask block: path = loop length - that block). Static counts: one pass of the loop body
per warp, nothing is weighted by trip counts. ``--all-loops`` also lists every loop of the kernel
with its size and key opcodes (e.g. the dQ writer's per-lane ``ELECT`` / ``R2UR`` / ``UBLKRED``
waterfall, an 8-instruction loop run once per lane).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

_INSTR = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)([.A-Za-z0-9_]*)(.*?);")
_LABEL = re.compile(r"^(\.L_x_\d+):")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")
_FUNC = re.compile(r"^\s*\.text\.(\S+):")
_BRANCHES = ("BRA", "BRX", "JMP")


@dataclass
class Instr:
    index: int  # position in the function (instructions only)
    addr: int
    guarded: bool  # has a predicate guard (@P0, @!UP1, ...)
    opcode: str  # base opcode
    text: str
    target: Optional[str] = None  # branch target label


@dataclass
class SkipBlock:
    branch_addr: str
    guard: str
    first_addr: str
    last_addr: str
    instructions: int
    mix: dict[str, int]


@dataclass
class Loop:
    kernel: str
    header_label: str
    first_addr: str
    backedge_addr: str
    instructions: int
    histogram: dict[str, int]
    skip_blocks: list[SkipBlock] = field(default_factory=list)
    exits: list[str] = field(default_factory=list)  # branches leaving the loop (addr -> label)
    sequence: list[str] = field(default_factory=list)  # the body's instructions, in order


def parse_functions(sass: str) -> dict[str, tuple[list[Instr], dict[str, int]]]:
    """kernel -> (instructions, label -> index of the instruction that follows the label)."""
    out: dict[str, tuple[list[Instr], dict[str, int]]] = {}
    instrs: list[Instr] = []
    labels: dict[str, int] = {}
    for line in sass.splitlines():
        func = _FUNC.match(line)
        if func:
            instrs, labels = [], {}
            out[func.group(1)] = (instrs, labels)
            continue
        label = _LABEL.match(line)
        if label:
            labels[label.group(1)] = len(instrs)
            continue
        m = _INSTR.match(line)
        if m:
            target = _TARGET.search(line) if m.group(3) in _BRANCHES else None
            instrs.append(Instr(len(instrs), int(m.group(1), 16), bool(m.group(2)), m.group(3),
                                line.strip(), target.group(1) if target else None))
    return out


def _leaves(instrs: list[Instr], labels: dict[str, int], lo: int, hi: int) -> bool:
    """True when [lo, hi] is not a loop body: an unpredicated EXIT or jump out of the range."""
    for ins in instrs[lo:hi]:
        if ins.guarded:
            continue
        if ins.opcode == "EXIT":
            return True
        if ins.opcode in _BRANCHES and ins.target is not None:
            t = labels.get(ins.target, -1)
            if not lo <= t <= hi:
                return True
    return False


def _addr(instrs: list[Instr], i: int) -> str:
    return f"{instrs[i].addr:#06x}"


def hgmma_loops(kernel: str, instrs: list[Instr], labels: dict[str, int]) -> list[Loop]:
    """The innermost loops holding HGMMA, each with its histogram and forward-branch blocks."""
    spans: dict[int, int] = {}  # header index -> furthest back edge
    for ins in instrs:
        if ins.opcode == "BRA" and ins.target in labels and labels[ins.target] <= ins.index:
            lo = labels[ins.target]
            if not _leaves(instrs, labels, lo, ins.index):
                spans[lo] = max(spans.get(lo, -1), ins.index)
    with_mma = {lo: hi for lo, hi in spans.items()
                if any(i.opcode == "HGMMA" for i in instrs[lo:hi + 1])}
    innermost = [(lo, hi) for lo, hi in with_mma.items()
                 if not any((lo, hi) != (a, b) and lo <= a and b <= hi for a, b in with_mma.items())]
    names = {v: k for k, v in labels.items()}
    loops = []
    for lo, hi in sorted(innermost):
        body = instrs[lo:hi + 1]
        loop = Loop(kernel, names.get(lo, "?"), _addr(instrs, lo), _addr(instrs, hi), len(body),
                    dict(Counter(i.opcode for i in body).most_common()),
                    sequence=[i.text for i in body])
        for ins in body:
            if ins.opcode not in _BRANCHES or ins.target not in labels or ins.index == hi:
                continue
            t = labels[ins.target]
            if ins.index < t <= hi + 1:  # forward branch inside the loop: a skippable block
                skipped = instrs[ins.index + 1:t]
                guard = ins.text.split()[1] if ins.guarded else "always"
                loop.skip_blocks.append(SkipBlock(
                    _addr(instrs, ins.index), guard, _addr(instrs, ins.index + 1),
                    _addr(instrs, t - 1), len(skipped),
                    dict(Counter(i.opcode for i in skipped).most_common(8))))
            elif not lo <= t <= hi:
                loop.exits.append(f"{_addr(instrs, ins.index)} -> {ins.target}")
        loops.append(loop)
    return loops


_KEY_OPCODES = ("HGMMA", "UTMALDG", "UTMAREDG", "UBLKCP", "UBLKRED", "ELECT", "R2UR", "LDG", "STG",
                "LDS", "STS", "BAR", "SYNCS")


def all_loops(kernel: str, instrs: list[Instr], labels: dict[str, int]) -> list[str]:
    """One line per loop (any backward branch that passes ``_leaves``), innermost first."""
    names = {v: k for k, v in labels.items()}
    rows = []
    for ins in instrs:
        if ins.opcode == "BRA" and ins.target in labels and labels[ins.target] <= ins.index:
            lo = labels[ins.target]
            if _leaves(instrs, labels, lo, ins.index):
                continue
            mix = Counter(i.opcode for i in instrs[lo:ins.index + 1])
            key = " ".join(f"{op}={mix[op]}" for op in _KEY_OPCODES if mix[op])
            rows.append((ins.index - lo, f"  {names.get(lo, '?')} [{_addr(instrs, lo)}.."
                         f"{_addr(instrs, ins.index)}] {ins.index - lo + 1} instr  {key}"))
    return [row for _, row in sorted(rows)]


def compile_ours(kind: str, head_dim: int, causal: bool, columns: Optional[int], gqa: bool,
                 deterministic: bool) -> bytes:
    """Compile one of our variants for sm_90a and return its cubin (DSL env set before import)."""
    if "cutlass" in sys.modules:  # the DSL reads its settings when it is first imported
        raise RuntimeError("compile_ours must run before anything imports the CuTe DSL")
    dump = tempfile.mkdtemp(prefix="pfm-sass-loop-")
    os.environ.update(CUTE_DSL_ARCH="sm_90a", CUTE_DSL_KEEP="cubin", CUTE_DSL_DUMP_DIR=dump,
                      CUTE_DSL_DISABLE_FILE_CACHING="1", PADDLE_FLASHMASK_CACHE="0")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from paddle_flashmask.ops.cute import compile_check, interface

    if kind == "bwd":
        config: Any = interface.backward_config("bfloat16", head_dim, causal, columns, gqa=gqa,
                                                deterministic=deterministic)
    else:
        config = interface.forward_config("bfloat16", head_dim, causal, columns, False)
    cubin = compile_check._build(kind, config).__cubin__
    if isinstance(cubin, str) and os.path.isfile(cubin):
        cubin = Path(cubin).read_bytes()
    if not isinstance(cubin, (bytes, bytearray)):
        raise RuntimeError(f"the DSL kept no cubin (got {type(cubin).__name__})")
    return bytes(cubin)


def analyze(cubin: bytes, nvdisasm: str, every_loop: Optional[list[str]] = None) -> list[Loop]:
    """The innermost HGMMA loops of every kernel; ``every_loop`` collects ``all_loops`` lines."""
    from paddle_flashmask.ops.cute.compile_check import disassemble

    loops: list[Loop] = []
    for kernel, (instrs, labels) in parse_functions(disassemble(cubin, nvdisasm)).items():
        loops += hgmma_loops(kernel, instrs, labels)
        if every_loop is not None:
            every_loop.append(f"{kernel[:90]}: all loops")
            every_loop += all_loops(kernel, instrs, labels)
    return loops


def format_loop(loop: Loop) -> str:
    name = re.sub(r"^kernel_cutlass_kernel_", "", loop.kernel)[:70]
    lines = [f"{name}: loop {loop.header_label} [{loop.first_addr}..{loop.backedge_addr}] "
             f"{loop.instructions} instructions",
             "  " + " ".join(f"{op}={n}" for op, n in loop.histogram.items())]
    for b in loop.skip_blocks:
        top = " ".join(f"{op}={n}" for op, n in b.mix.items())
        lines.append(f"  skip {b.branch_addr} ({b.guard}) -> {b.first_addr}..{b.last_addr}: "
                     f"{b.instructions} instr  [{top}]")
    if loop.exits:
        lines.append("  exits: " + ", ".join(loop.exits))
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=("bwd", "fwd", "cubin"))
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--columns", type=int, default=None, help="C of startend_row_indices")
    p.add_argument("--gqa", action="store_true")
    p.add_argument("--deterministic", action="store_true")
    p.add_argument("--cubin", help="analyse this cubin instead of compiling (kind 'cubin')")
    p.add_argument("--all-loops", action="store_true", help="also list every loop of the kernel")
    p.add_argument("--json", metavar="PATH", help="also write the loops as JSON")
    args = p.parse_args(argv)

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    if args.kind == "cubin":
        if not args.cubin:
            p.error("kind 'cubin' needs --cubin FILE")
        cubin = Path(args.cubin).read_bytes()
    else:
        cubin = compile_ours(args.kind, args.head_dim, args.causal, args.columns, args.gqa,
                             args.deterministic)
    from paddle_flashmask.ops.cute.compile_check import find_nvdisasm

    nvdisasm = find_nvdisasm()
    if nvdisasm is None:
        print("sass_loop_mix: nvdisasm not found (pip install nvidia-cuda-nvdisasm)", file=sys.stderr)
        return 2
    every: Optional[list[str]] = [] if args.all_loops else None
    loops = analyze(cubin, nvdisasm, every)
    print("\n\n".join(format_loop(loop) for loop in loops) or "no HGMMA loop found")
    if every:
        print("\n" + "\n".join(every))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(loop) for loop in loops], indent=1))
    return 0 if loops else 1


if __name__ == "__main__":
    sys.exit(main())
