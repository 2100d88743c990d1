"""The JSONL source family: record files written by trainers (miles, per-step rows)."""
