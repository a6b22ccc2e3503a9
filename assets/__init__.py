"""Custody's Dagster code location: one software-defined asset per spec."""
