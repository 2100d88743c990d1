"""Subcommands beyond `check`/`validate`/`checks`: each module registers its own through
`gatekeeper.cli.EXTENSIONS` (serve, history, watch/run)."""
