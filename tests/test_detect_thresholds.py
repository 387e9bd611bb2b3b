"""history/analysis/thresholds.toml: per-GPU values, every one with a reason; bad files fail clearly."""

from __future__ import annotations

import pytest

from attnwatch.history.analysis.thresholds import REPO_THRESHOLDS, ThresholdsError, load_thresholds


def test_repository_file_has_h200_and_default():
    h200 = load_thresholds("NVIDIA H200")
    other = load_thresholds("Some Future GPU")
    assert h200.min_effect == 0.02 and other.min_effect == 0.03
    assert h200.confidence == other.confidence == 0.95
    assert h200.min_persist == other.min_persist  # inherited from [default]


def test_every_setting_in_the_repository_file_has_a_reason():
    import tomllib

    data = tomllib.loads(REPO_THRESHOLDS.read_text())
    sections = [data["default"], *data["gpu"].values()]
    for section in sections:
        for key in section:
            if not key.endswith("_reason"):
                assert len(section[f"{key}_reason"]) > 20, key


def _write(tmp_path, text):
    path = tmp_path / "t.toml"
    path.write_text(text)
    return path


GOOD_DEFAULT = "\n".join(
    f'{k} = {v}\n{k}_reason = "because"'
    for k, v in dict(
        min_effect=0.03,
        confidence=0.95,
        min_persist=3,
        penalty_scale=2.0,
        sigma_floor=0.0005,
        min_series=6,
        resolve_after=3,
    ).items()
)


def test_missing_reason_is_refused_naming_the_key(tmp_path):
    path = _write(tmp_path, "[default]\n" + GOOD_DEFAULT + '\n[gpu."X"]\nmin_effect = 0.01\n')
    with pytest.raises(ThresholdsError, match=r'gpu\."X"\]\.min_effect_reason'):
        load_thresholds("X", path)


@pytest.mark.parametrize(
    "line, message",
    [
        ("min_effect = -0.1", "outside"),
        ("min_effect = nan", "finite"),
        ('min_effect = "2%"', "finite number"),
        ("min_persist = 2.5", "integer"),
        ("bogus = 1", "unknown setting"),
    ],
)
def test_bad_values_are_refused(tmp_path, line, message):
    key = line.split(" ")[0]
    path = _write(tmp_path, "[default]\n" + GOOD_DEFAULT + f'\n[gpu."X"]\n{line}\n{key}_reason = "r"\n')
    with pytest.raises(ThresholdsError, match=message):
        load_thresholds("X", path)


def test_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(ThresholdsError, match="not found"):
        load_thresholds(None, tmp_path / "nope.toml")
    with pytest.raises(ThresholdsError, match="not valid TOML"):
        load_thresholds(None, _write(tmp_path, "[default\n"))
    with pytest.raises(ThresholdsError, match="missing"):
        load_thresholds(None, _write(tmp_path, '[default]\nmin_effect = 0.1\nmin_effect_reason = "r"\n'))
