"""Custody's Dagster code location: one software-defined asset per spec."""

from __future__ import annotations

import warnings

# Every process that runs a run reads the instance's python_logs handlers (assets/dagster.yaml), and
# Dagster says each time that such settings are in beta: on the CLI's or a run's console that is noise.
# Matched by its words alone: naming Dagster's warning class would load Dagster wherever a transform
# under assets.transforms is imported, as checking a spec's transform does.
warnings.filterwarnings("ignore", message="Handling yaml-defined logging configuration")
