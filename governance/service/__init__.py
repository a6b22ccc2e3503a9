"""The Custody service: the login in front of the Dagster UI, sessions and tokens, and the HTTP API
for those who hold none of the catalog's, the lake's or the directory's credentials."""
