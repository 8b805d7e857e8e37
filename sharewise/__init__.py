"""sharewise: measure, predict and act on GPU co-location interference between DL training jobs."""

__version__ = "0.1.0"
