"""``python -m shardcron.dev.docs_reference [PAGE ...]``: rewrite the generated part of the reference pages
(every page when none is named); ``--check`` writes nothing and exits 1 naming the pages that drifted."""

from __future__ import annotations

import argparse
import sys

from shardcron.dev.docs_reference.pages import PAGES, REFERENCE, ROOT, fresh


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m shardcron.dev.docs_reference", description=__doc__)
    p.add_argument("pages", nargs="*", choices=[[], *PAGES], metavar="PAGE", help=f"one of {', '.join(PAGES)}")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page differs")
    a = p.parse_args(argv)
    drifted = []
    for page in a.pages or PAGES:
        path = REFERENCE / page
        before = path.read_text(encoding="utf-8")
        after = fresh(page, before)
        if after == before:
            continue
        drifted.append(str(path.relative_to(ROOT)))
        if not a.check:
            path.write_text(after, encoding="utf-8")
    verb = "differ from the code" if a.check else "rewritten"
    print(f"{', '.join(drifted)}: {verb}" if drifted else "the reference pages match the code", file=sys.stderr)
    return 1 if a.check and drifted else 0


if __name__ == "__main__":
    sys.exit(main())
