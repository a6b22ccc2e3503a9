"""Custody's Dagster code location: one software-defined asset per spec."""

from __future__ import annotations

import warnings

import dagster as dg

# Every process that runs a run reads the instance's python_logs handlers (assets/dagster.yaml), and
# Dagster says each time that such settings are in beta: on the CLI's or a run's console that is noise.
warnings.filterwarnings("ignore", message="Handling yaml-defined logging configuration", category=dg.BetaWarning)
