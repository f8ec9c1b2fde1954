"""What a recipe will cost before any GPU hour is spent: FLOPs, GPU-hours, memory, energy.

Pure functions, offline: a model is only its shape (`models`), the rest is arithmetic with
published conventions (`flops`: 6N and PaLM's attention term; `memory`: ZeRO and Korthikanti et
al.; `hardware`: datasheet peaks and power). `plan.build_plan` / `plan.render_plan` put them
together for `langadapt plan RECIPE [--json]`.
"""

from langadapt.planning.models import ModelDims, load_model_dims
from langadapt.planning.plan import StagePlanInput, build_plan, render_plan

__all__ = ["ModelDims", "StagePlanInput", "build_plan", "load_model_dims", "render_plan"]
