"""The PySpark jobs on Delta Lake (ingest, episodes, daily_metrics, recommend, maintenance,
dashboard), their transforms (``jobs.transforms``) and what they share: conf, Delta I/O, the
pipeline state."""
