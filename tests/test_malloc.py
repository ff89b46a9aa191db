"""wancrawl/runtime/malloc.py: the C heap kept between lexbor's parses (issue 24)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agent.settings import MemorySettings

# Parses a 24 KB page 400 times after a warm-up and prints the page faults per parse: with the
# heap kept, the tree's blocks are reused from the heap, not faulted in from the kernel anew.
_PROBE = r"""
import resource, sys
from selectolax.lexbor import LexborHTMLParser
from wancrawl.runtime import malloc
keep = sys.argv[1] == "keep"
if keep:
    assert malloc.keep_heap(32 * 1024 * 1024, 4 * 1024 * 1024)
page = ("<html><head><title>t</title></head><body>" + "".join(
    f'<div class="c{i}"><p>text {i} <a href="/p/{i}.html">link {i}</a></p></div>' for i in range(300)) + "</body></html>")
for _ in range(50):
    LexborHTMLParser(page)
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(400):
    LexborHTMLParser(page)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / 400)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_kept_heap_parses_without_page_faults():
    out = subprocess.run([sys.executable, "-c", _PROBE, "keep"], capture_output=True, text=True, check=True)
    assert float(out.stdout) < 1.0, out.stdout


def test_the_settings_bounds():
    MemorySettings(heap_keep_bytes=0, heap_mmap_bytes=0)
    for bad in ({"heap_keep_bytes": -1}, {"heap_keep_bytes": 2**31}, {"heap_mmap_bytes": 33 * 1024 * 1024}):
        with pytest.raises(ValueError):
            MemorySettings(**bad)
