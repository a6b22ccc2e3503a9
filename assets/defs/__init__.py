"""The project's Dagster definitions, one folder a component: `dg` and assets.definitions load them."""
