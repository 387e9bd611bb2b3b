"""The static code of a kernel binary: its SASS, read with `cuobjdump`, as instructions by kernel.

Why the static code: a one-line change in a pull request (a barrier, a shared-memory round
trip, an unroll factor, a register cap) changes the binary the GPU runs, and the binary says so
exactly, where the noisy counters only hint at it. `cuobjdump -sass` prints every function of a
cubin, an ELF or a fat binary (nvcc cubins, Triton's cached cubins, a CuPy module's cubin) as
`/*0130*/  @!P0 BRA 0x130 ;` lines; `cuobjdump -res-usage` prints each function's registers,
stack, shared and local memory. Both are deterministic for a given binary, so a parsed result
is cached by the binary's sha256 (`SassCache`).

Loops are found from the control flow as the binary shows it: a branch to a lower or equal
address closes a loop whose body runs from the target to the branch (the back edge of a
natural loop, Aho, Lam, Sethi & Ullman, "Compilers", 2nd ed., 9.6.6); an instruction's loop
depth is how many such ranges hold it, so a change inside the main loop is told apart from
one in the prologue or the epilogue.

The tools are found on PATH, else next to the installed Triton (its NVIDIA backend ships
`cuobjdump` and `nvdisasm`), else under $CUDA_HOME/bin; `find_tool` returns None when none
has it, and callers say so rather than guess.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

TOOL_TIMEOUT_S = 120
# `/*0130*/   @!P0 BRA 0x130 ;` (the encoding comment after ';' is dropped)
_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-fA-F]+)\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)\s*([^;]*);")
_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
_RESOURCE_FUNCTION = re.compile(r"^\s*Function\s+(\S+?):\s*$")
_RESOURCE_FIELD = re.compile(r"([A-Z_]+(?:\[\d+\])?):(\d+)")
_BRANCH_TARGET = re.compile(r"(?:^|\s)(?:0x)?([0-9a-fA-F]+)\s*$")

# Opcode (the mnemonic before its first '.') -> class. What a kernel engineer reads a mix by:
# where the data moves (shared, global, local = spills), synchronisation, the tensor cores,
# the other math pipes, and control flow. Anything not listed is "other".
OPCODE_CLASSES: dict[str, tuple[str, ...]] = {
    "shared load": ("LDS", "LDSM"),
    "shared store": ("STS", "STSM"),
    "shared atomic": ("ATOMS",),
    "global load": ("LDG", "LD", "LDGDEPBAR"),
    "global store": ("STG", "ST", "RED", "ATOMG", "ATOM"),
    "async copy": ("LDGSTS", "UBLKCP", "UTMALDG", "UTMASTG", "UTMAPF", "UTMACCTL", "DEPBAR", "ARRIVES"),
    "local (spill)": ("LDL", "STL"),
    "constant load": ("LDC", "ULDC"),
    "barrier": ("BAR", "BARRIER", "SYNCS", "MEMBAR", "FENCE", "ERRBAR", "CCTL"),
    "warp sync/shuffle": ("WARPSYNC", "SHFL", "VOTE", "VOTEU", "MATCH", "REDUX", "ELECT"),
    "tensor": ("HMMA", "IMMA", "DMMA", "HGMMA", "IGMMA", "QGMMA", "BGMMA", "WARPGROUP", "WGMMA"),
    "fp32": (
        "FADD",
        "FMUL",
        "FFMA",
        "FMNMX",
        "FSETP",
        "FSET",
        "FSEL",
        "FCHK",
        "FSWZADD",
        "FADD32I",
        "FMUL32I",
        "FFMA32I",
    ),
    "fp16": ("HADD2", "HMUL2", "HFMA2", "HMNMX2", "HSETP2", "HSET2", "HADD2_32I", "HMUL2_32I", "HFMA2_32I"),
    "fp64": ("DADD", "DMUL", "DFMA", "DSETP", "DMNMX"),
    "special function": ("MUFU",),
    "conversion": ("F2F", "F2I", "I2F", "I2I", "F2FP", "I2FP", "F2IP", "FRND"),
    "integer": (
        "IMAD",
        "IADD3",
        "IADD",
        "LOP3",
        "LOP",
        "LEA",
        "SHF",
        "SHL",
        "SHR",
        "ISETP",
        "IMNMX",
        "IABS",
        "POPC",
        "FLO",
        "BREV",
        "PRMT",
        "SEL",
        "IMUL",
        "IDP",
        "VIADD",
        "VIMNMX",
        "UIMAD",
        "UIADD3",
        "ULOP3",
        "ULEA",
        "USHF",
        "UISETP",
        "USEL",
        "UPRMT",
        "UMOV",
        "UFLO",
        "UPOPC",
        "UBREV",
        "ULOP",
        "USHL",
        "USHR",
    ),
    "move": (
        "MOV",
        "MOV32I",
        "S2R",
        "S2UR",
        "CS2R",
        "R2UR",
        "P2R",
        "R2P",
        "PLOP3",
        "UPLOP3",
        "R2B",
        "B2R",
        "P2UR",
        "UP2UR",
        "NOP",
    ),
    "control": (
        "BRA",
        "BRX",
        "JMP",
        "JMX",
        "EXIT",
        "RET",
        "CALL",
        "BSSY",
        "BSYNC",
        "BREAK",
        "BPT",
        "KILL",
        "YIELD",
        "NANOSLEEP",
        "ACQBULK",
        "ENDCOLLECTIVE",
    ),
}
_CLASS_OF = {op: name for name, ops in OPCODE_CLASSES.items() for op in ops}
BRANCHES = ("BRA", "JMP")


@dataclass(frozen=True)
class Instruction:
    offset: int
    opcode: str  # the mnemonic before its first '.': "BAR" for BAR.SYNC.DEFER_BLOCKING
    mnemonic: str  # with its modifiers
    operands: str
    predicate: str = ""


@dataclass(frozen=True)
class Resources:
    """What `cuobjdump -res-usage` says a function needs (static: fixed by the binary)."""

    registers: int
    stack: int
    shared: int  # static shared memory, bytes
    local: int  # local memory per thread, bytes (spills and local arrays)


@dataclass
class KernelCode:
    name: str
    instructions: list[Instruction] = field(default_factory=list)
    resources: Resources | None = None

    def loops(self) -> list[tuple[int, int]]:
        """(start, end) offsets of each loop: a branch back to `start` from `end` (module doc)."""
        found = set()
        for ins in self.instructions:
            if ins.opcode in BRANCHES:
                target = branch_target(ins.operands)
                if target is not None and target <= ins.offset:
                    found.add((target, ins.offset))
        return sorted(found)

    def loop_depths(self) -> dict[int, int]:
        """offset -> how many loops hold the instruction (0: prologue, epilogue or straight code).
        A branch to itself (`BRA 0x200` after EXIT, the padding trap) is not a loop body."""
        loops = [(a, b) for a, b in self.loops() if a < b]
        return {ins.offset: sum(1 for a, b in loops if a <= ins.offset <= b) for ins in self.instructions}


class SassError(RuntimeError):
    """A tool is missing or failed; the message names the binary and the tool."""


def opcode_class(opcode: str) -> str:
    return _CLASS_OF.get(opcode, "other")


def branch_target(operands: str) -> int | None:
    """The address a BRA/JMP jumps to (`0x130`, or `` `(.L_x_1) `` forms without one: None)."""
    match = _BRANCH_TARGET.search(operands.strip())
    return int(match.group(1), 16) if match else None


def find_tool(name: str) -> str | None:
    """`name` (cuobjdump, nvdisasm) on PATH, else beside the installed Triton, else in $CUDA_HOME/bin."""
    found = shutil.which(name)
    if found:
        return found
    spec = importlib.util.find_spec("triton")
    places = []
    if spec is not None and spec.origin:
        places.append(Path(spec.origin).parent / "backends" / "nvidia" / "bin" / name)
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            places.append(Path(home) / "bin" / name)
    return next((str(p) for p in places if p.is_file() and os.access(p, os.X_OK)), None)


def parse_sass(text: str) -> dict[str, KernelCode]:
    """`cuobjdump -sass` text -> function name -> its instructions, in address order."""
    kernels: dict[str, KernelCode] = {}
    current: KernelCode | None = None
    for line in text.splitlines():
        function = _FUNCTION.match(line)
        if function:
            current = kernels.setdefault(function.group(1), KernelCode(function.group(1)))
            continue
        match = _INSTRUCTION.match(line)
        if match and current is not None:
            offset, predicate, mnemonic, operands = match.groups()
            current.instructions.append(
                Instruction(
                    int(offset, 16), mnemonic.split(".")[0], mnemonic, operands.strip(), (predicate or "").strip()
                )
            )
    return kernels


def parse_resource_usage(text: str) -> dict[str, Resources]:
    """`cuobjdump -res-usage` text -> function name -> its static resources."""
    out, name = {}, None
    for line in text.splitlines():
        function = _RESOURCE_FUNCTION.match(line)
        if function:
            name = function.group(1)
            continue
        if name is not None and "REG:" in line:
            values = {key: int(value) for key, value in _RESOURCE_FIELD.findall(line)}
            out[name] = Resources(
                values.get("REG", 0), values.get("STACK", 0), values.get("SHARED", 0), values.get("LOCAL", 0)
            )
            name = None
    return out


def read_binary(binary: Path, cuobjdump: str | None = None) -> dict[str, KernelCode]:
    """Every function of a cubin/ELF/fat binary with its SASS and resources; raises SassError."""
    tool = cuobjdump or find_tool("cuobjdump")
    if tool is None:
        raise SassError(f"{binary}: cuobjdump not found (not on PATH, not beside Triton, not in $CUDA_HOME/bin)")
    sass = _run(tool, ["-sass", str(binary)], binary)
    kernels = parse_sass(sass)
    if not kernels:
        raise SassError(f"{binary}: cuobjdump -sass printed no function (not a CUDA binary?)")
    for name, resources in parse_resource_usage(_run(tool, ["-res-usage", str(binary)], binary)).items():
        if name in kernels:
            kernels[name].resources = resources
    return kernels


def _run(tool: str, args: list[str], binary: Path) -> str:
    try:
        done = subprocess.run([tool, *args], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SassError(f"{binary}: {Path(tool).name} {args[0]} failed: {exc}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise SassError(f"{binary}: {Path(tool).name} {args[0]} exited {done.returncode}: {last}")
    return done.stdout


def binary_digest(binary: Path) -> str:
    return hashlib.sha256(Path(binary).read_bytes()).hexdigest()


class SassCache:
    """Parsed binaries by sha256: a binary already read is not disassembled again (one JSON per digest)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def read(self, binary: Path) -> dict[str, KernelCode]:
        digest = binary_digest(binary)
        entry = self.root / f"{digest}.json"
        if entry.is_file():
            try:
                return _from_json(json.loads(entry.read_text(encoding="utf-8")))
            except (ValueError, KeyError, TypeError):
                pass  # a damaged entry is a miss, rewritten below
        kernels = read_binary(binary)
        self.root.mkdir(parents=True, exist_ok=True)
        staged = entry.with_suffix(f".{os.getpid()}.tmp")
        staged.write_text(json.dumps({name: asdict(code) for name, code in kernels.items()}), encoding="utf-8")
        staged.replace(entry)
        return kernels


def _from_json(data: dict) -> dict[str, KernelCode]:
    return {
        name: KernelCode(
            name,
            [Instruction(**i) for i in code["instructions"]],
            Resources(**code["resources"]) if code.get("resources") else None,
        )
        for name, code in data.items()
    }
