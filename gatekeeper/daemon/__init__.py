"""`gatekeeper serve`: watch many runs, keep state across restarts, export, alert.

config.py (the YAML file) · state.py (SQLite WAL store) · tracking.py (debounce) ·
watch.py (one run's poll) · scheduler.py (APScheduler jobs, timeouts, discovery) ·
exporter.py (Prometheus) · http.py (endpoints) · service.py (wiring).
"""
