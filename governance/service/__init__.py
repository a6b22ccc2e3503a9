"""The Custody service: the login in front of the Dagster UI, sessions and tokens, and the HTTP API
for those who hold none of the catalog's, the lake's or the directory's credentials."""

# The service's own secrets: read once at start, then taken out of the environment, which the programs
# the service starts (Dagster's daemon, code servers, run workers; git) inherit, and need neither.
SECRETS = ("CUSTODY_SESSION_SECRET", "CUSTODY_GATEWAY_SECRET", "CUSTODY_UI_SIGNING_KEY")
