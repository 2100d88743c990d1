"""The SOURCE prefix of a run on a wandb server (a local run directory needs none). A leaf
module: the package's detection answer reads it without importing the readers."""

SCHEME = "wandb://"
