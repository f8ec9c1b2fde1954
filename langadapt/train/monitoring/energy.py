"""Measured energy of the training steps, where the hardware has an energy counter.

`langadapt plan` estimates energy from FLOPs, an assumed MFU and the board's TDP; this reads
what the device actually used, so the two can be put side by side (the evaluate report does):

- NVIDIA: NVML's total energy counter (`nvmlDeviceGetTotalEnergyConsumption`, millijoules since
  the driver loaded; Volta and later), through `pynvml` (the `nvidia-ml-py` package, `gpu` extra);
  the device is found by UUID, so CUDA_VISIBLE_DEVICES reordering cannot pick another GPU.
- AMD: amdsmi's energy accumulator (`amdsmi_get_energy_count`: ticks x counter resolution in
  microjoules), found by PCI bus id; amdsmi ships with ROCm (not on PyPI).
- CPU on Linux: RAPL package counters under /sys/class/powercap (microjoules, wrapping at
  `max_energy_range_uj`), when readable (many distributions make them root-only).
- Anything else: no counter; metrics carry no energy and the report says so.

A counter measures one device (the GPU of the rank that logs, or the CPU packages of its node);
the stage summary multiplies by the world size for the whole job, assuming alike devices.
Counters are cumulative, so the joules of a window of steps are one subtraction, whatever the
sampling rate: no power polling thread.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from types import ModuleType
from typing import Protocol

import torch

log = logging.getLogger("langadapt.train")

POWERCAP = Path("/sys/class/powercap")


class EnergyCounter(Protocol):
    """A cumulative energy counter of one device."""

    source: str
    """What is measured, e.g. "nvml:NVIDIA H100 80GB HBM3", "rapl:2 packages"."""

    def joules(self) -> float:
        """Energy used since an arbitrary origin (monotonic)."""
        ...


def _import(name: str) -> ModuleType | None:
    """The vendor's Python bindings, or None when not installed (tests replace this)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


class NvmlCounter:
    """NVML total energy counter of one NVIDIA GPU."""

    def __init__(self, nvml: ModuleType, device: torch.device) -> None:
        nvml.nvmlInit()
        self.nvml, self.handle = nvml, _nvml_handle(nvml, device)
        name = nvml.nvmlDeviceGetName(self.handle)
        self.source = f"nvml:{name.decode() if isinstance(name, bytes) else name}"
        self.joules()  # raises here (NVMLError_NotSupported before Volta), not mid-run

    def joules(self) -> float:
        return self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle) / 1000.0


def _nvml_handle(nvml: ModuleType, device: torch.device):
    """The NVML handle of torch's `device`: by UUID, else by index (no CUDA_VISIBLE_DEVICES)."""
    try:
        uuid = str(torch.cuda.get_device_properties(device).uuid)
        return nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    except (AssertionError, RuntimeError, AttributeError, ValueError):
        return nvml.nvmlDeviceGetHandleByIndex(device.index or 0)


class AmdSmiCounter:
    """amdsmi energy accumulator of one AMD GPU (a GCD on MI250X)."""

    def __init__(self, amdsmi: ModuleType, device: torch.device) -> None:
        amdsmi.amdsmi_init()
        handles = amdsmi.amdsmi_get_processor_handles()
        self.amdsmi, self.handle = amdsmi, handles[device.index or 0]
        bus = _pci_bus_id(device)
        for handle in handles if bus else []:
            if amdsmi.amdsmi_get_gpu_device_bdf(handle).lower().endswith(bus):
                self.handle = handle
        self.source = f"amdsmi:{amdsmi.amdsmi_get_gpu_device_bdf(self.handle)}"
        self.joules()

    def joules(self) -> float:
        info = self.amdsmi.amdsmi_get_energy_count(self.handle)
        ticks = info.get("energy_accumulator", info.get("power"))  # renamed in ROCm 6.x
        return ticks * info["counter_resolution"] / 1e6


def _pci_bus_id(device: torch.device) -> str | None:
    """"c1:00.0"-style bus id of torch's device, when this torch build reports it."""
    try:
        props = torch.cuda.get_device_properties(device)
        return f"{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    except (AssertionError, RuntimeError, AttributeError):
        return None


class RaplCounter:
    """The CPU packages' RAPL counters (summed), unwrapped at their `max_energy_range_uj`."""

    def __init__(self, domains: list[Path]) -> None:
        self.domains = domains
        self.ranges = [int((d / "max_energy_range_uj").read_text()) for d in domains]
        self.last = [self._read(d) for d in domains]
        self.total_uj = 0
        self.source = f"rapl:{len(domains)} package{'s' * (len(domains) > 1)}"

    @staticmethod
    def _read(domain: Path) -> int:
        return int((domain / "energy_uj").read_text())

    def joules(self) -> float:
        for i, domain in enumerate(self.domains):
            now = self._read(domain)
            delta = now - self.last[i]
            self.total_uj += delta if delta >= 0 else delta + self.ranges[i]  # wrapped once
            self.last[i] = now
        return self.total_uj / 1e6


def rapl_packages(root: Path = POWERCAP) -> list[Path]:
    """Top-level RAPL package domains (intel-rapl:N, also used by AMD CPUs); sub-domains would double-count."""
    return sorted(p for p in root.glob("intel-rapl:*") if p.name.count(":") == 1)


def energy_counter(device: torch.device, powercap: Path = POWERCAP) -> EnergyCounter | None:
    """The counter for `device`, or None (logged once) when the hardware or bindings report none."""
    try:
        if device.type == "cuda":
            rocm = torch.version.hip is not None
            module = _import("amdsmi" if rocm else "pynvml")
            if module is None:
                log.info("energy: %s is not installed; energy per step is not measured",
                         "amdsmi (ships with ROCm)" if rocm else "nvidia-ml-py (pip install 'langadapt[gpu]')")
                return None
            return AmdSmiCounter(module, device) if rocm else NvmlCounter(module, device)
        domains = rapl_packages(powercap)
        if device.type == "cpu" and domains:
            return RaplCounter(domains)
    except (OSError, ValueError, KeyError, IndexError, RuntimeError) as error:
        log.info("energy: no readable counter for %s (%s); energy per step is not measured", device, error)
        return None
    except Exception as error:  # noqa: BLE001 - vendor bindings raise their own error classes (NVMLError, ...)
        log.info("energy: %s counter unavailable (%s: %s)", device, type(error).__name__, error)
        return None
    log.info("energy: no energy counter for %s; energy per step is not measured", device)
    return None
