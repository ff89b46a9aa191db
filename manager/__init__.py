"""The manager CLI (issue #6)."""
