"""`--device auto` (ci.selection.detect_device_kind): NVML first; torch is asked, in a child
process, only where a GPU device file exists, so a CPU machine decides without importing torch."""

from __future__ import annotations

import subprocess

from attnwatch.ci import environment, selection


def _recording_run(calls: list):
    """subprocess.run that also keeps (argv, its CompletedProcess) in `calls`."""
    real = subprocess.run

    def run(argv, *args, **kwargs):
        done = real(argv, *args, **kwargs)
        calls.append((argv, done))
        return done

    return run


def test_without_a_gpu_device_file_the_answer_is_cpu_and_torch_is_not_asked(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(environment, "nvml_gpu", lambda *a, **k: None)
    monkeypatch.setattr(selection, "GPU_DEVICE_FILES", (str(tmp_path / "nvidiactl"),))
    monkeypatch.setattr(selection.subprocess, "run", _recording_run(calls))
    assert selection.detect_device_kind() == "cpu"
    assert calls == []


def test_with_a_gpu_device_file_but_no_nvml_torch_is_asked_in_a_child(tmp_path, monkeypatch):
    """A Jetson has the device file and no NVML: torch, in a child process, decides."""
    calls: list = []
    device = tmp_path / "nvhost-ctrl-gpu"
    device.touch()
    monkeypatch.setattr(environment, "nvml_gpu", lambda *a, **k: None)
    monkeypatch.setattr(selection, "GPU_DEVICE_FILES", (str(tmp_path / "nvidiactl"), str(device)))
    monkeypatch.setattr(selection.subprocess, "run", _recording_run(calls))
    kind = selection.detect_device_kind()
    ((argv, probe),) = calls
    assert "torch.cuda.is_available()" in argv[-1] and probe.returncode == 0, probe.stderr
    assert kind == ("cuda" if probe.stdout.strip() == "True" else "cpu")
