"""Measured energy per step: which counter is chosen, its arithmetic (units, wrap-around), and
joules per step in metrics.jsonl and the summary, all with fake counters (no GPU here)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers.monitoring import drive

from langadapt.planning.models import ModelDims
from langadapt.planning.plan import StagePlanInput, build_plan, plan_joules_per_step
from langadapt.recipe.train import TrainStageConfig
from langadapt.train.monitoring import energy, metrics
from langadapt.train.monitoring.callbacks import StepCost
from langadapt.train.monitoring.defaults import default_callbacks
from langadapt.train.monitoring.energy import (
    AmdSmiCounter,
    NvmlCounter,
    RaplCounter,
    energy_counter,
)
from langadapt.train.monitoring.validation import Validation

CUDA0 = torch.device("cuda", 0)


def powercap(root: Path, packages: dict[str, tuple[int, int]]) -> Path:
    """A fake /sys/class/powercap: {domain: (energy_uj, max_energy_range_uj)}."""
    for name, (value, top) in packages.items():
        (root / name).mkdir(parents=True)
        (root / name / "energy_uj").write_text(f"{value}\n")
        (root / name / "max_energy_range_uj").write_text(f"{top}\n")
    return root


def test_rapl_sums_packages_ignores_subdomains_and_unwraps_the_counter(tmp_path: Path) -> None:
    root = powercap(tmp_path, {"intel-rapl:0": (1_000_000, 10_000_000), "intel-rapl:1": (9_500_000, 10_000_000),
                               "intel-rapl:0:0": (5, 10_000_000)})  # core sub-domain: inside package 0
    counter = energy_counter(torch.device("cpu"), powercap=root)
    assert isinstance(counter, RaplCounter) and counter.source == "rapl:2 packages"
    assert counter.joules() == 0.0
    (root / "intel-rapl:0" / "energy_uj").write_text("3000000\n")  # +2 J
    (root / "intel-rapl:1" / "energy_uj").write_text("500000\n")  # wrapped: +1 J
    assert counter.joules() == pytest.approx(3.0)
    (root / "intel-rapl:0" / "energy_uj").write_text("3500000\n")
    assert counter.joules() == pytest.approx(3.5)


def test_cpu_without_readable_rapl_has_no_counter(tmp_path: Path) -> None:
    assert energy_counter(torch.device("cpu"), powercap=tmp_path) is None
    root = powercap(tmp_path / "locked", {"intel-rapl:0": (1, 10)})
    (root / "intel-rapl:0" / "energy_uj").unlink()  # as when it is root-only: unreadable
    assert energy_counter(torch.device("cpu"), powercap=root) is None


class FakeNvml:
    """pynvml's calls used by NvmlCounter; the counter is in millijoules."""

    class NVMLError_NotSupported(Exception):
        pass

    def __init__(self, supported: bool = True) -> None:
        self.millijoules, self.supported, self.by_index = 5_000_000, supported, []

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid: str):
        raise AssertionError("torch without CUDA has no UUID: the index is used")

    def nvmlDeviceGetHandleByIndex(self, index: int):
        self.by_index.append(index)
        return f"gpu{index}"

    def nvmlDeviceGetName(self, handle) -> bytes:
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetTotalEnergyConsumption(self, handle) -> int:
        if not self.supported:
            raise self.NVMLError_NotSupported("Not Supported")
        return self.millijoules


def test_nvidia_gpus_read_nvml_millijoules(monkeypatch) -> None:
    nvml = FakeNvml()
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(energy, "_import", lambda name: nvml if name == "pynvml" else None)
    counter = energy_counter(torch.device("cuda", 3))
    assert isinstance(counter, NvmlCounter) and counter.source == "nvml:NVIDIA H100 80GB HBM3"
    assert nvml.by_index == [3]
    start = counter.joules()
    nvml.millijoules += 123_456
    assert counter.joules() - start == pytest.approx(123.456)


def test_no_bindings_or_an_unsupported_counter_means_no_energy(monkeypatch) -> None:
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(energy, "_import", lambda name: None)
    assert energy_counter(CUDA0) is None
    monkeypatch.setattr(energy, "_import", lambda name: FakeNvml(supported=False))
    assert energy_counter(CUDA0) is None  # pre-Volta: NVMLError_NotSupported at start-up, not mid-run


def test_amd_gpus_read_the_amdsmi_accumulator(monkeypatch) -> None:
    state = {"ticks": 1000}
    amdsmi = SimpleNamespace(
        amdsmi_init=lambda: None,
        amdsmi_get_processor_handles=lambda: ["gcd0", "gcd1"],
        amdsmi_get_gpu_device_bdf=lambda h: {"gcd0": "0000:c1:00.0", "gcd1": "0000:c6:00.0"}[h],
        # ROCm 6.x names it energy_accumulator (older: power); resolution in microjoules per tick
        amdsmi_get_energy_count=lambda h: {"energy_accumulator": state["ticks"], "counter_resolution": 15.3},
    )
    monkeypatch.setattr(torch.version, "hip", "6.2")
    monkeypatch.setattr(energy, "_import", lambda name: amdsmi if name == "amdsmi" else None)
    counter = energy_counter(torch.device("cuda", 1))
    assert isinstance(counter, AmdSmiCounter) and counter.source == "amdsmi:0000:c6:00.0"
    start = counter.joules()
    state["ticks"] += 1_000_000
    assert counter.joules() - start == pytest.approx(15.3)
    amdsmi.amdsmi_get_energy_count = lambda h: {"power": 2_000_000, "counter_resolution": 15.3}
    assert counter.joules() == pytest.approx(30.6)


class Watts:
    """A counter of a device drawing constant power: joules = watts x seconds."""

    source = "fake:100W"

    def __init__(self, watts: float) -> None:
        self.watts = watts

    def joules(self) -> float:
        return self.watts * time.perf_counter()


class SlowValidation(Validation):
    """Due at every other step; takes time (and so energy) that must not count as training."""

    def __init__(self) -> None:  # no held-out sets: `due` and `run` below stand in for them
        pass

    def due(self, step: int, total: int) -> bool:
        return step % 2 == 0

    def run(self, engine) -> dict:
        time.sleep(0.05)
        return {"valid": {"xx": {"loss": 1.0, "bits_per_byte": 2.0, "tokens": 4}}, "valid_seconds": 0.05}


def test_joules_per_step_is_power_times_step_time_without_validation_time(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(metrics, "energy_counter", lambda device: Watts(100.0))
    callbacks = default_callbacks(TrainStageConfig(steps=6, log_every=2, loggers=[]), tmp_path, "run/stage2")
    summary = drive(callbacks, range(1, 7), 6, cost=StepCost(1000, 1.0, None, 4, torch.device("cpu")),
                    work=lambda step: time.sleep(0.02),  # the "training step"
                    log_every=2, validation=SlowValidation())
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "loss" in r]
    assert [r["step"] for r in train] == [2, 4, 6] and len(rows) == 6
    for row in train:  # 100 W x seconds per step, where tokens/s gives the seconds per step
        seconds_per_step = 1000 / row["tokens_per_second"]
        assert row["joules_per_step"] == pytest.approx(100.0 * seconds_per_step, rel=0.02)
        assert row["joules_per_step"] < 100.0 * 0.05  # the 50 ms validation is not in it
    assert summary["energy_source"] == "fake:100W"
    assert summary["joules_per_step"] == pytest.approx(4 * summary["joules_per_step_per_device"])
    assert summary["validation"]["step"] == 6
    assert summary["tokens_per_second"] > 1000 / (0.02 + 0.05 / 2)  # the steps' time only, not validation's
    assert summary["elapsed_seconds"] > 6 * 0.02 + 3 * 0.05  # wall time: validation included


def test_plan_joules_per_step_is_tdp_times_the_planned_step_time() -> None:
    dims = ModelDims(name="m", hidden=2048, layers=16, heads=16, kv_heads=8, ffn=5632, vocab=32000, tied=False)
    stage = StagePlanInput(name="stage2", steps=1000, seq_len=2048, global_batch=64)
    plan = build_plan(dims, [stage], hardware="h100", mfu=0.4, num_gpus=8)
    step_seconds = plan["stages"][0]["flops_per_token"] * 64 * 2048 / (8 * 0.4 * 989e12)
    assert plan_joules_per_step(plan)["stage2"] == pytest.approx(8 * 700.0 * step_seconds, rel=1e-9)
