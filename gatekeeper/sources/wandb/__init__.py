"""The wandb source family: local `.wandb` run directories and runs on a wandb server."""
