"""The lake's Iceberg REST catalog (`/iceberg`), read side only: each table load is a read decision
for the token's user, recorded with the engine that asked, and an engine is served only the versions
the catalog holds committed."""
