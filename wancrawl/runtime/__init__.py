"""The service process's runtime: which event loop runs it (eventloop), how long its loop is
held and by what (looplag: lag samples, collector passes, the stall watchdog, the per-pass work
budget), and the C allocator's heap trimming (malloc)."""
