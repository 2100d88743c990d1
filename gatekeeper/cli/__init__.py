"""The command line: `main.py` builds the parser from every command's `register` and maps
errors to exit codes; `args.py` holds the shared option groups and the typed options they
become; one module per command (`check.py`, `watch.py`, `history.py`, ...)."""
