"""A run's layout (and `langadapt plan`, which reads it) loads without huggingface_hub (review s19
N4): the weights file names it needs are spelled in `inputs.model_folder`, checked here against hub's."""

from __future__ import annotations

import subprocess
import sys


def test_the_weights_names_are_hubs() -> None:
    from huggingface_hub import constants

    from langadapt.inputs.model_folder import SAFETENSORS, SAFETENSORS_INDEX
    from langadapt.run.layout import WEIGHTS

    assert (SAFETENSORS, SAFETENSORS_INDEX) == (constants.SAFETENSORS_SINGLE_FILE, constants.SAFETENSORS_INDEX_FILE)
    assert WEIGHTS == constants.SAFETENSORS_SINGLE_FILE


def test_the_layout_and_the_planner_import_no_huggingface_hub() -> None:
    probe = ("import sys; import langadapt.run.layout, langadapt.planning.recipe_plan; "
             "print('huggingface_hub' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
