"""The SOURCE prefixes of the family. A leaf module: the package's detection answer reads
them without importing the readers."""

SCHEMES = ("prom+http://", "prom+https://")
