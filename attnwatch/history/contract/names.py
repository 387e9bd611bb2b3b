"""The characters a name that keys a series may hold: the one rule, applied by reader and writer.

A series is keyed by text: a variant, a shape id, a dtype, a case id (`variant/shape/dtype/causal`,
kernels.cases.case_id). Two strings that look alike but differ (`ѕdpa` with a Cyrillic `ѕ`,
fullwidth `ｓdpa`, `sdpa` followed by a zero-width space U+200B, a right-to-left override
U+202E or a no-break space U+00A0) would be two series that a person reads as one: a
regression hides in the look-alike, or a forged run sits beside the genuine series. Unicode
normalisation (NFKC) folds the fullwidth form but not the Cyrillic one, and removes no
invisible character, so the rule is a plain ASCII alphabet, which is NFKC-stable and has no
invisible, bidirectional or look-alike characters:

  - NAME: 1-128 of `A-Z a-z 0-9 _ . + -`, starting with a letter or digit. Every variant in
    kernels/variants, every shape id in kernels/shapes.py and every dtype fits it.
  - CASE ID: 1-8 NAMEs joined by `/` (the harness writes exactly 4), at most 512 characters.
  - LABEL: a name written by another program that keys a series too: a plain pytest-benchmark
    file's test names, its variant and case id (`test_attn[fp16-1024]`), and the GPU model as
    NVML reports it (`NVIDIA H100 80GB HBM3`): 1-512 printable ASCII characters (U+0021-U+007E,
    and inner spaces), no leading or trailing space.
  - DIGEST: a file's sha256 that names it (a kernel binary), 64 lowercase hex digits.

history.contract.bundle marks the contract's fields with `rule(name=...)` or `rule_metadata(name=...)` (history.contract.checks applies it,
to what a bundle holds and to what history.contract.bundle_writer is about to write); samples.json's
keys and the imported test names are checked through `name_problem` directly.
"""

from __future__ import annotations

import re

# The setting that names the repository (owner/name) a history tracks (history.contract.repository
# reads it); here, beside the other name rules, so the command line's start need not import the
# bundle reader to print its help.
REPO_ENV = "ATTNWATCH_REPO"

NAME = "name"
CASE_ID = "case_id"
LABEL = "label"
DIGEST = "digest"

_NAME = r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}"
_PATTERNS = {
    NAME: re.compile(_NAME),
    CASE_ID: re.compile(rf"(?=.{{1,512}}$){_NAME}(?:/{_NAME}){{0,7}}", re.DOTALL),
    LABEL: re.compile(r"[\x21-\x7e](?:[\x20-\x7e]{0,510}[\x21-\x7e])?"),
    DIGEST: re.compile(r"[0-9a-f]{64}"),
}
_SPOKEN = {
    NAME: "a name is 1-128 of A-Z a-z 0-9 _ . + - (ASCII), starting with a letter or digit",
    CASE_ID: "a case id is names (1-128 of A-Z a-z 0-9 _ . + -, ASCII) joined by /",
    LABEL: "a label is 1-512 printable ASCII characters, no leading or trailing space",
    DIGEST: "a digest is a sha256: 64 lowercase hex digits",
}


def name_problem(value: str, kind: str = NAME) -> str | None:
    """Why `value` cannot be a name of this kind (module docstring), or None when it can.

    The value is quoted with ascii(), so an invisible or look-alike character shows as its
    code point (`'sdpa\\u200b'`) in the one-line error.
    """
    if _PATTERNS[kind].fullmatch(value):
        return None
    return f"{ascii(value[:80])}: {_SPOKEN[kind]}"
