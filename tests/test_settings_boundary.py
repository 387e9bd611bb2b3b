"""An argparse namespace never leaves the command line (attnwatch/cli): below it, modules take the
settings records a command builds (attnwatch.cli.settings), read with `ast`.

The rule, for every module of app/, ci/, history/ and kernels/:
  - a function has no parameter annotated as a Namespace, and none named `args` without a
    type (or typed Any) (the way a namespace used to be handed down: `plan_for(args)`);
  - a module that imports argparse parses its own process's command line: the parser is built
    and read in a function `main` of a module run as a program (`if __name__ == "__main__"`),
    and the namespace it returns is read there, field by field, never handed to another call.
Planted modules show that each kind of break is caught.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BELOW_CLI = ("app", "ci", "history", "kernels")


def _is_namespace(annotation: ast.expr | None) -> bool:
    return annotation is not None and "Namespace" in ast.unparse(annotation)


def _runs_as_program(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.If) and "__name__" in ast.unparse(node.test) and "__main__" in ast.unparse(node.test)
        for node in tree.body
    )


def _parsed_names(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Names bound to the result of `….parse_args(…)` in `function`."""
    names = set()
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and node.value.func.attr == "parse_args"
        ):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def breaks(source: str, name: str) -> list[str]:
    """How the module `name` (its text `source`) lets a namespace out of the command line."""
    tree = ast.parse(source, filename=name)
    found = []
    imports_argparse = any(
        isinstance(node, ast.Import)
        and any(a.name == "argparse" for a in node.names)
        or isinstance(node, ast.ImportFrom)
        and node.module == "argparse"
        for node in ast.walk(tree)
    )
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        arguments = node.args
        for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
            if _is_namespace(arg.annotation):
                found.append(f"{name}:{node.lineno}: {node.name}() takes a Namespace ({arg.arg})")
            elif arg.arg == "args" and (arg.annotation is None or ast.unparse(arg.annotation) == "Any"):
                found.append(f"{name}:{node.lineno}: {node.name}() takes `args` without a type (a namespace?)")
        parsed = _parsed_names(node)
        if parsed and (node.name != "main" or not _runs_as_program(tree)):
            found.append(f"{name}:{node.lineno}: {node.name}() parses a command line outside a program's main")
        for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
            handed = [
                a for a in [*call.args, *(k.value for k in call.keywords)] if isinstance(a, ast.Name) and a.id in parsed
            ]
            if handed:
                found.append(
                    f"{name}:{call.lineno}: the parsed namespace `{handed[0].id}` is handed to {ast.unparse(call.func)}()"
                )
    if imports_argparse and not _runs_as_program(tree):
        found.append(f'{name}: imports argparse but is not a program (no `if __name__ == "__main__"`)')
    return found


def test_no_namespace_leaves_the_command_line():
    found = []
    for package in BELOW_CLI:
        for path in sorted((ROOT / package).rglob("*.py")):
            found += breaks(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert not found, "\n".join(found)


def test_the_check_catches_each_way_a_namespace_gets_out():
    assert breaks("def plan_for(args):\n    return args.shapes\n", "m.py")
    assert breaks("from typing import Any\ndef load(args: Any):\n    return args.variant_path\n", "m.py")
    assert breaks("import argparse\ndef f(ns: argparse.Namespace):\n    pass\n", "m.py")
    assert breaks("from argparse import Namespace\ndef f(x: 'Namespace | None'):\n    pass\n", "m.py")
    program = (
        "import argparse\ndef main(argv=None):\n    args = argparse.ArgumentParser().parse_args(argv)\n"
        "    {use}\nif __name__ == '__main__':\n    main()\n"
    )
    assert not breaks(program.format(use="print(args.plan)"), "m.py")
    assert breaks(program.format(use="run(args)"), "m.py")
    assert breaks(program.format(use="run(settings=args)"), "m.py")
    assert breaks(
        program.replace("def main", "def start").replace("    main()", "    start()").format(use="pass"), "m.py"
    )
    assert breaks("import argparse\n", "m.py")  # a library module with a parser of its own
    assert not breaks("def dtype_of(args: tuple) -> str:\n    return str(args[0])\n", "m.py")
