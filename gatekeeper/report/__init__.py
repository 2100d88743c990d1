"""Reporters: each turns a Verdict into one output (console, JSON, JUnit, GitHub)."""
