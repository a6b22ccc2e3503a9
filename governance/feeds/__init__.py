"""Feeds: sources polled on a period, kept by the hour in content-named archives (seed 001's Hoard).

A collector downloads each feed into its workspace, packs every finished hour into a tar.gz named by
its hash and uploads it to the feed store; consolidation merges the archives that several replicas
uploaded for one hour into one; each complete hour then becomes a DropZone batch of the feed's
landing asset, ingested like any other.
"""
