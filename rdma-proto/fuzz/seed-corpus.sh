#!/bin/sh
# Seeds fuzz/corpus/parse_line/ from the golden vectors in ../tests/golden/:
# each handshake transcript whole (prefixes `C: `/`S: ` stripped), each of its lines alone, and
# the bad-lines file. Run from anywhere; then `cargo fuzz run parse_line` (see README.md).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
golden="$here/../tests/golden"
out="$here/corpus/parse_line"
mkdir -p "$out"
for f in "$golden"/handshake-*.jsonl; do
    base=$(basename "$f" .jsonl)
    sed 's/^[CS]: //' "$f" > "$out/$base"
    i=0
    sed 's/^[CS]: //' "$f" | while IFS= read -r line; do
        i=$((i + 1))
        printf '%s\n' "$line" > "$out/$base-$i"
    done
done
cp "$golden/bad-lines.jsonl" "$out/bad-lines"
echo "seeded $(ls "$out" | wc -l) files into $out"
