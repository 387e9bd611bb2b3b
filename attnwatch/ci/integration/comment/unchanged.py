"""The sticky comment of a pull request in which nothing the GPU runs changed (ci/compare/affected.py).

Posted by the CPU check instead of a GPU compare, under the compare comment's marker, so the
pull request keeps one comment: a later push that changes a kernel replaces it with the A/B
verdict. It says what was compared, so a reader can tell "not measured because identical"
from "not measured at all". Names come from the pull request's code: escaped as elsewhere.
"""

from __future__ import annotations

from attnwatch.ci.compare.affected import Affected
from attnwatch.ci.integration.comment.escape import md_code, md_text
from attnwatch.ci.integration.comment.render import MARKER

TITLE = "nothing the GPU runs changed"


def render_unchanged(result: Affected, run_url: str | None = None) -> str:
    """The comment's markdown, marker first."""
    tools = ", ".join(f"{md_text(k, 40)} {md_text(v, 80)}" for k, v in result.toolchain.items() if v) or "none found"
    names = ", ".join(md_code(n, 80) for n in result.variants[:80])
    more = f" and {len(result.variants) - 80} more" if len(result.variants) > 80 else ""
    lines = [
        MARKER,
        f"### attnwatch: {TITLE}",
        "",
        f"Merge base {md_code(result.base_sha[:12])} and head {md_code(result.head_sha[:12])} have identical source "
        f"fingerprints for all {len(result.variants)} variants (each one's code, data files, CUDA sources and headers, "
        f"declared build flags) and for the {result.harness_files} harness and pipeline files, so no GPU job was "
        "queued: no verdict to give. A scheduled A/A canary compare keeps watching the GPU runners.",
        "",
        f"<details><summary>What was compared</summary>\n\nVariants: {names}{more}.\n\nToolchain: {tools}.\n\n</details>",
    ]
    if run_url:
        lines += ["", f"[The check's run]({run_url})"]
    return "\n".join(lines) + "\n"
