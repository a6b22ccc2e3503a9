"""Lineage from tools Custody does not run: OpenLineage run events posted to the service, kept as
received, and joined to Custody's versions (the inputs they read) and to the datasets they wrote."""
