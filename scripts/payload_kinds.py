"""Write docs/payload_kinds.md, the payload-kind glossary, from the kind specs and the protocols' ``sends``.

    python scripts/payload_kinds.py          # rewrite the page
    python scripts/payload_kinds.py --check  # exit 1 if the page is not what the specs give
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from privbench.fl.protocols import ClusterFedAvg, FedAvg, GeneFL, LocalOnly
from privbench.payloads.kinds import KINDS

PAGE = Path(__file__).resolve().parents[1] / "docs" / "payload_kinds.md"
PROTOCOLS = (GeneFL, ClusterFedAvg, FedAvg, LocalOnly)


def render() -> str:
    """The page's text."""
    rows = []
    for spec in KINDS.values():
        sent_by = ", ".join(f"`fl={p.name}`" for p in PROTOCOLS if spec.name in p.sends) or "-"
        carries = f"{spec.carries} (aggregate)" if spec.aggregate else spec.carries
        attacked = "yes" if spec.readable else f"no: {spec.unreadable_why}"
        notes = [n for n, on in (("audit-only: not protocol traffic, not counted in the bytes", spec.audit_only),
                                 ("sent once, before round 0", spec.once)) if on]
        what = spec.doc + (f" ({'; '.join(notes)})" if notes else "")
        rows.append(f"| `{spec.name}` | {spec.direction} | {carries} | {spec.base or '-'} | {attacked} | {sent_by} "
                    f"| {what} |")
    return "\n".join([
        "# Payload kinds",
        "",
        "Every message that crosses the wire is a payload of one of these kinds. This page is generated from the",
        "specs in `privbench/payloads/kinds.py` and the protocols' `sends` by `python scripts/payload_kinds.py`",
        "(`tests/test_docs.py` fails when they disagree). `payload=<kind>` chooses which of the victim's",
        "messages is attacked.",
        "",
        "| kind | direction | carries | relative to | attacked | sent by | what it is |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page differs from the specs")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not PAGE.is_file() or PAGE.read_text() != text:
            print(f"{PAGE} is out of date: python scripts/payload_kinds.py", file=sys.stderr)
            raise SystemExit(1)
        return
    PAGE.write_text(text)
    print(f"wrote {PAGE}")


if __name__ == "__main__":
    main()
