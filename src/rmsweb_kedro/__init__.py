"""RMSWeb recipe as Kedro pipelines."""

__version__ = "0.1.0"
