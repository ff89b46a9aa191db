"""The crawler agent (issue #4)."""
