"""The SOURCE prefixes of the family (a local path needs none). A leaf module: the
package's detection answer reads them without importing the readers."""

SCHEMES = ("tensorboard://", "tb://")
