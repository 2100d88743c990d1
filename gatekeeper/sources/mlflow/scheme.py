"""The SOURCE prefixes of the family: `mlflow+URI/runs/ID` (a server or a local store),
`mlflow://ID` (the server in MLFLOW_TRACKING_URI). A leaf module: the package's
detection answer reads them without importing the readers."""

import os

PREFIX = "mlflow+"
SCHEME = "mlflow://"
SCHEMES = (PREFIX, SCHEME)


def names_a_run(spec: str) -> bool:
    """True when the SOURCE names one run (`.../runs/ID`, `mlflow://ID`); False for a store
    alone (`mlflow+file:///PATH/mlruns`, `mlflow+http://HOST:PORT`, `mlflow://`), which a
    live watch reads as "the run created after the watch began"."""
    if spec.startswith(SCHEME):
        return bool(spec[len(SCHEME) :].strip("/"))
    _, sep, run_id = spec.rstrip("/").rpartition("/runs/")
    return bool(sep and run_id and "/" not in run_id)


def names_file_store(path: str) -> bool:
    """A local folder a live watch reads as an MLflow file store: named `mlruns` (mlflow's
    default; it may not exist yet), or holding the store's `.trash` folder."""
    base = os.path.basename(os.path.normpath(path))
    return base == "mlruns" or os.path.isdir(os.path.join(path, ".trash"))
