#!/usr/bin/env python3
"""A folder's `mod.rs` under crates/*/src holds its docs, `mod` declarations and re-exports only.

Allowed outside comments: attributes, `mod x;`, `pub mod x;`, `use …;` / `pub use …;` (over
several lines too). Anything else (a type, a function, an impl, a constant) belongs in a file
named for it. Exits 1 and names each offending line.
"""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
decl = re.compile(r"^(pub(\([a-z:_ ]+\))?\s+)?(mod\s+\w+\s*;|use\s)")
bad = []
for path in sorted(root.glob("crates/*/src/**/mod.rs")):
    in_use = False
    in_block_comment = False
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if in_block_comment:
            in_block_comment = "*/" not in line
            continue
        if line.startswith("/*"):
            in_block_comment = "*/" not in line
            continue
        if not line or line.startswith("//"):
            continue
        if in_use:
            in_use = not line.endswith(";")
            continue
        if line.startswith("#[") or line.startswith("#!["):
            continue
        if decl.match(line):
            in_use = not line.endswith(";")
            continue
        bad.append(f"{path.relative_to(root)}:{number}: {line[:80]}")
if bad:
    print("mod.rs files hold docs, declarations and re-exports only; move these into files named for them:")
    print("\n".join(bad[:400]))
    if len(bad) > 400:
        print(f"… and {len(bad) - 400} more lines")
    sys.exit(1)
print("mod.rs files: docs, declarations and re-exports only")
