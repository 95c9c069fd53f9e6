"""mailqueue event analytics: PySpark transforms over the SES-shaped queue event log.

The package is shipped to EMR Serverless as a zip (`make pipeline-zip`), so it depends on
nothing outside the standard library and PySpark (the renderer, synthetic generator and
benchmark use the standard library only, plus DuckDB for the reference check).
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
