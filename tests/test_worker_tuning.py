"""A compare worker re-tunes its kernels' launch choices every round (ci/engine/rounds.py,
`forget_tuned_choices`), so that a near-tie that an autotuner breaks differently in the two
workers shows as round-to-round noise instead of as a difference between the revisions."""

from __future__ import annotations

import sys
import types

from attnwatch.ci.engine.rounds import forget_tuned_choices


def test_a_round_start_empties_the_triton_tuners_choices():
    from attnwatch.kernels.triton import tuner

    tuner._CACHE[((1, 2, 64, 64), False, "torch.float16", "cuda:0", False)] = "a choice"
    forget_tuned_choices()
    assert tuner._CACHE == {}


def test_the_next_choice_is_tuned_again(monkeypatch):
    import torch

    from attnwatch.kernels.triton import tuner

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    q = torch.zeros(1, 1, 16, 16)
    first = tuner.choose(q, q, q, q, causal=False)
    assert tuner.choose(q, q, q, q, causal=False) is first  # cached within a round
    forget_tuned_choices()
    assert tuner.choose(q, q, q, q, causal=False) is not first  # decided again next round


def test_a_base_revision_whose_tuner_cannot_forget_keeps_its_choices(monkeypatch):
    old = types.ModuleType("attnwatch.kernels.triton.tuner")
    old._CACHE = {"problem": "choice"}
    monkeypatch.setitem(sys.modules, "attnwatch.kernels.triton.tuner", old)
    forget_tuned_choices()  # no error: that revision simply tunes once per process
    assert old._CACHE == {"problem": "choice"}


def test_nothing_is_imported_for_a_side_that_never_used_the_tuner(monkeypatch):
    monkeypatch.delitem(sys.modules, "attnwatch.kernels.triton.tuner", raising=False)
    forget_tuned_choices()
    assert "attnwatch.kernels.triton.tuner" not in sys.modules
