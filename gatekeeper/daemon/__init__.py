"""`gatekeeper serve`: watch many runs, keep state across restarts, export, alert.

config.py (the YAML file) · state.py (the state store: one contract, SQLite WAL by default) ·
state_postgres.py (the same on PostgreSQL) · lock.py (one daemon per SQLite file) ·
lease.py (replicas sharing a PostgreSQL state) · tracking.py (debounce) ·
watch.py (one run's poll) · due.py (the runs by due time) · scheduler.py (dispatch,
timeouts, discovery) · exporter.py (Prometheus) · http.py (endpoints) · service.py (wiring).
"""
