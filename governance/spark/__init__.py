"""Spark as Custody uses it: a deployment's settings and the code shipped to executors (`conf`),
failures read for what they say (`errors`), the row counts of a query's SQL metrics (`metrics`) and
spec column types as Spark and Arrow types (`types`)."""
