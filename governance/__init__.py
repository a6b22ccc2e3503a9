"""Custody's core: specs, zones, ingestion, the catalog, the ledger and lineage. Never imports dagster."""
