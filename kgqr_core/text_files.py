"""How kgqr reads the text files people hand it (queries, judgments, splits, structures)."""

from __future__ import annotations

# Windows editors and Excel's "UTF-8" exports start a file with a byte-order mark, which
# plain "utf-8" keeps as part of the first line: a CSV's first column was "\ufeffid" (a
# KeyError), a JSON line "Unexpected UTF-8 BOM". "utf-8-sig" reads files with and without.
TEXT_ENCODING = "utf-8-sig"
