"""bench/scale.py still runs end to end (issue 24's million-page bench): a tiny crawl through the
real `agent run`, `consultant serve` and `storage serve`. The bench had silently stopped starting
once (agent_throughput.agent_config began to read an option scale.py did not define); figures
are not asserted here, only that a crawl of the asked size is measured and reported."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_scale_bench_crawls_and_reports_its_slices(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "scale.py"), "--pages", "300", "--slice", "150", "--agents", "1",
         "--sites-per-block", "1", "--timeout", "300"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    m = re.search(r"^1 agent\(s\): ([\d,]+) pages in", out.stdout, re.M)
    assert m and int(m.group(1).replace(",", "")) >= 300, out.stdout
    rows = [ln for ln in out.stdout.splitlines() if re.match(r"^\s+[\d,]+\s+\d+\.\d{3}\s", ln)]
    # A slice ends at a Status poll: a fast crawl may finish its 300 pages between two polls.
    assert rows and int(rows[-1].split()[0].replace(",", "")) >= 300, out.stdout
    last = out.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"last/first slice CPU per page: \d+\.\d{3}", last), last
