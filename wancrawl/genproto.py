"""Regenerate wancrawl/v1/*_pb2*.py from protos/ (`python -m wancrawl.genproto`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
PROTO_DIR = PROTO_ROOT / "wancrawl" / "v1"


def proto_files() -> list[Path]:
    return sorted(PROTO_DIR.glob("*.proto"))


def generate(out_dir: Path) -> list[Path]:
    """Run protoc (grpc_tools) on every proto into out_dir; return the files written."""
    from grpc_tools import protoc
    import grpc_tools

    out_dir.mkdir(parents=True, exist_ok=True)
    include = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *[str(p.relative_to(PROTO_ROOT)) for p in proto_files()],
    ]
    rc = protoc.main(args)
    if rc != 0:
        raise RuntimeError(f"protoc failed with exit code {rc}")
    gen = out_dir / "wancrawl" / "v1"
    return sorted(p for p in gen.iterdir() if p.name.endswith((".py", ".pyi")) and "_pb2" in p.name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.parse_args(argv)
    import tempfile
    import shutil

    target = ROOT / "wancrawl" / "v1"
    with tempfile.TemporaryDirectory() as tmp:
        written = generate(Path(tmp))
        for old in target.glob("*_pb2*.py*"):
            old.unlink()
        for f in written:
            shutil.copy2(f, target / f.name)
            print(f"wrote {(target / f.name).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
