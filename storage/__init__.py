"""The storage service: WARC files and an SQL index (issue #5)."""
