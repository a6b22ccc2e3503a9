"""Lineage: provenance and impact over the catalog's version graph."""
