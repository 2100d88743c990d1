"""The SOURCE prefixes of the family: `mlflow+URI/runs/ID` (a server or a local store),
`mlflow://ID` (the server in MLFLOW_TRACKING_URI). A leaf module: the package's
detection answer reads them without importing the readers."""

PREFIX = "mlflow+"
SCHEME = "mlflow://"
SCHEMES = (PREFIX, SCHEME)
