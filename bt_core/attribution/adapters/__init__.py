"""Adapters to the field's attribution libraries, as optional extras.

Each adapter registers only where its library is installed (`importlib.util.find_spec`): the library
itself is imported when the estimator scores, not here, so listing estimators stays fast (dattri's
algorithms take seconds to import). If an installed library then fails to import, scoring raises
that ImportError and the checklist reports it as the estimator's failure.

    trak_traker      pip install "behaviortrace[trak]"     (traker)
    tracin_dattri    pip install "behaviortrace[dattri]"   (dattri)
    trak_dattri      pip install "behaviortrace[dattri]"
    tracincp_captum  pip install "behaviortrace[captum]"   (captum)
    ekfac_kronfluence  pip install "behaviortrace[kronfluence]" &&
                       pip install --no-deps kronfluence==1.0.1   (see pyproject.toml)
    adamw_influence_dattri  pip install "behaviortrace[dattri-llm]"  (dattri-llm)
    dvemb_dattri            pip install "behaviortrace[dattri-llm]"
"""

from __future__ import annotations

import importlib
import importlib.util

INSTALL = {
    "trak": 'pip install "behaviortrace[trak]"',
    "dattri": 'pip install "behaviortrace[dattri]"',
    "captum": 'pip install "behaviortrace[captum]"',
    # kronfluence without its torchvision requirement, which breaks transformers (pyproject.toml)
    "kronfluence": (
        'pip install "behaviortrace[kronfluence]" && pip install --no-deps kronfluence==1.0.1'
    ),
    "dattri_llm": 'pip install "behaviortrace[dattri-llm]"',
}
ADAPTERS = {
    "trak": "traker_adapter",
    "dattri": "dattri_adapter",
    "captum": "captum_adapter",
    "kronfluence": "kronfluence_adapter",
    "dattri_llm": "dattri_llm_adapter",
}
MISSING: dict[str, str] = {}  # library → install command, for the libraries not installed here
ESTIMATORS = {
    "trak_traker": "trak",
    "tracin_dattri": "dattri",
    "trak_dattri": "dattri",
    # adapter estimator → the library it needs (tests check the names)
    "tracincp_captum": "captum",
    "ekfac_kronfluence": "kronfluence",
    "adamw_influence_dattri": "dattri_llm",
    "dvemb_dattri": "dattri_llm",
}


def installed(library: str) -> bool:
    return importlib.util.find_spec(library) is not None


for _lib, _mod in ADAPTERS.items():
    if installed(_lib):
        # registers; an error here is our bug, so it propagates
        importlib.import_module(f"{__name__}.{_mod}")
    else:
        MISSING[_lib] = INSTALL[_lib]
