"""Accelerators, GPU-hours, energy and CO2.

Peaks are dense bf16 (no structured sparsity) from the vendors' datasheets: NVIDIA H100 SXM5
989.4 TFLOP/s at 700 W; A100 SXM4 312 TFLOP/s at 400 W; AMD MI250X 383 TFLOP/s and 560 W per
module, which holds two GCDs that the OS (and LUMI) shows as two GPUs, so 191.5 TFLOP/s and
280 W per GCD. Power is the board's maximum (TDP), so energy is an upper bound for the devices;
the PUE adds the data centre's cooling and power losses (nodes' CPUs and network are not
counted).

Grid intensities are life-cycle gCO2e/kWh: 24 for hydropower (IPCC AR5 WGIII Annex III median;
LUMI in Kajaani runs on 100% hydroelectric power), 490 for gas and 820 for coal (same source),
and 480 for the 2023 world average (Ember, Global Electricity Review 2024).
"""

from __future__ import annotations

from dataclasses import dataclass

from langadapt.errors import LangadaptError


@dataclass(frozen=True)
class Hardware:
    """One accelerator as the planner sees it."""

    name: str
    peak_flops: float  # dense bf16 FLOP/s per device
    watts: float  # board power per device (TDP)
    memory_gb: float  # device memory, GB (1e9 bytes)


PEAK_BF16_TFLOPS = {
    "H200": 989.0,
    "H100": 989.0,  # SXM; the PCIe card is 756
    "GH200": 989.0,
    "A100": 312.0,
    "MI300X": 1307.4,
    "MI250X": 191.5,  # per GCD (a LUMI-G "GPU")
    "MI250": 181.0,  # per GCD
    "L40S": 362.0,
    "A10G": 125.0,
}
"""Dense bf16 peak TFLOP/s per device, keyed by a substring of the name the device reports: the one
table both `plan` (presets below) and the trainer's measured MFU (`langadapt.train.flops`) read."""

PRESETS: dict[str, Hardware] = {
    "h100": Hardware("H100 SXM", PEAK_BF16_TFLOPS["H100"] * 1e12, 700.0, 80.0),
    "a100": Hardware("A100 SXM 80GB", PEAK_BF16_TFLOPS["A100"] * 1e12, 400.0, 80.0),
    "mi250x": Hardware("MI250X GCD", PEAK_BF16_TFLOPS["MI250X"] * 1e12, 280.0, 64.0),
}
ALIASES = {"h100-sxm": "h100", "a100-80gb": "a100", "mi250x-gcd": "mi250x", "lumi": "mi250x"}

CUSTOM_PREFIX = "custom:"
MAX_PEAK_TFLOPS = 100_000.0
"""Far above any accelerator (an H100 is 989): a larger custom peak is a typo for a smaller one."""


def custom_peak_tflops(spec: str) -> float:
    """The peak of `custom:<TFLOP/s>`: a finite number in (0, MAX_PEAK_TFLOPS], else one error line."""
    text = spec[len(CUSTOM_PREFIX):].strip()
    try:
        peak = float(text) if len(text) <= 32 else float("nan")
    except ValueError:
        peak = float("nan")
    if not 0.0 < peak <= MAX_PEAK_TFLOPS:  # also false for nan
        raise LangadaptError(f"hardware {spec!r}: {CUSTOM_PREFIX}<peak TFLOP/s> needs a number above 0 and "
                             f"at most {MAX_PEAK_TFLOPS:g}, e.g. {CUSTOM_PREFIX}500")
    return peak


GRIDS: dict[str, float] = {"hydro": 24.0, "lumi": 24.0, "world": 480.0, "gas": 490.0, "coal": 820.0}
"""Life-cycle grid intensity presets, gCO2e/kWh (sources in the module docstring)."""


def get_hardware(
    name: str,
    peak_tflops: float | None = None,
    watts: float | None = None,
    memory_gb: float | None = None,
) -> Hardware:
    """A preset by name, with any of its numbers overridden; `custom` needs peak, power and memory;
    `custom:<TFLOP/s>` is a device of that peak with an H100's power and memory (the recipe's
    `cluster.hardware` form: the schema validates it here, so `plan` never meets a bad one)."""
    key = ALIASES.get(name.lower(), name.lower())
    if key.startswith(CUSTOM_PREFIX):
        peak = custom_peak_tflops(name)
        base = PRESETS["h100"]
        return Hardware("custom", peak * 1e12, base.watts if watts is None else watts,
                        base.memory_gb if memory_gb is None else memory_gb)
    if key == "custom":
        if peak_tflops is None or watts is None or memory_gb is None:
            raise LangadaptError("hardware 'custom' needs peak_tflops, watts and memory_gb")
        return Hardware("custom", peak_tflops * 1e12, watts, memory_gb)
    if key not in PRESETS:
        raise LangadaptError(f"hardware {name!r}: unknown; use one of {', '.join([*PRESETS, *ALIASES])} "
                             f"or {CUSTOM_PREFIX}<peak TFLOP/s>")
    base = PRESETS[key]
    return Hardware(
        base.name,
        base.peak_flops if peak_tflops is None else peak_tflops * 1e12,
        base.watts if watts is None else watts,
        base.memory_gb if memory_gb is None else memory_gb,
    )


def grid_intensity(grid: str | float) -> float:
    """gCO2e/kWh for a preset name or a number."""
    if isinstance(grid, (int, float)):
        return float(grid)
    if grid.lower() not in GRIDS:
        raise LangadaptError(f"grid {grid!r}: unknown; give gCO2e/kWh or one of {', '.join(GRIDS)}")
    return GRIDS[grid.lower()]


def gpu_hours(flops: float, mfu: float, peak_flops: float) -> float:
    """Device-hours to do `flops` at `mfu` of one device's `peak_flops`."""
    if not 0.0 < mfu <= 1.0:
        raise LangadaptError(f"mfu {mfu}: must be in (0, 1], e.g. 0.4 for 40%")
    return flops / (mfu * peak_flops) / 3600.0


def energy_kwh(hours: float, watts: float, pue: float = 1.0) -> float:
    """Energy of `hours` device-hours at `watts` per device, times the data centre's PUE."""
    return hours * watts * pue / 1000.0


def co2_kg(kwh: float, grid_g_per_kwh: float) -> float:
    """Emissions of `kwh` on a grid of `grid_g_per_kwh` gCO2e/kWh."""
    return kwh * grid_g_per_kwh / 1000.0
