#!/usr/bin/env bash
# Move a file larger than one transfer in parts, and put it back together with its SHA-256 checked.
#
#   scripts/gpu/parts.sh split FILE SIZE DIR      # DIR/p000/part.000, DIR/p001/part.001, … of SIZE
#                                                 # bytes (e.g. 42000000) each: one folder per transfer
#   scripts/gpu/parts.sh join DIR OUT SHA256      # joins DIR/part.* in order into OUT, checks it
#   scripts/gpu/parts.sh collect FROM DIR         # copies FROM/part.* and FROM/*.sha256 into DIR (a
#                                                 # carried folder is replaced by the next transfer:
#                                                 # keep the parts)
#
# join writes OUT only when the full SHA-256 matches (exit 1 and no OUT otherwise), and says which
# parts are there, so a missing part is named rather than producing a short file.
set -euo pipefail
usage() { echo "usage: $0 split FILE SIZE DIR | join DIR OUT SHA256 | collect FROM DIR" >&2; exit 2; }
[ $# -ge 1 ] || usage
case "$1" in
split)
    [ $# -eq 4 ] || usage
    [ -f "$2" ] || { echo "$2: no such file" >&2; exit 2; }
    mkdir -p "$4"
    split -b "$3" -d -a 3 "$2" "$4/part."
    (cd "$4" && sha256sum part.* > parts.sha256)
    for part in "$4"/part.*; do  # each part in a folder of its own, with the list of all parts
        n=${part##*.}; mkdir -p "$4/p$n" && mv "$part" "$4/p$n/" && cp "$4/parts.sha256" "$4/p$n/"
    done
    echo "$(ls -d "$4"/p[0-9]* | wc -l) parts of $2 ($(stat -c %s "$2") B) in $4/p000 …; SHA-256 $(sha256sum "$2" | cut -d' ' -f1)"
    ;;
collect)
    [ $# -eq 3 ] || usage
    mkdir -p "$3"
    found=$(ls "$2"/part.* 2>/dev/null || true)
    [ -n "$found" ] || { echo "$2 holds no part.*" >&2; exit 2; }
    cp "$2"/part.* "$3"/
    cp "$2"/*.sha256 "$3"/ 2>/dev/null || true  # parts.sha256, and a whole file's SHA-256 beside it
    echo "collected: $(cd "$3" && ls part.* | tr '\n' ' ')"
    ;;
join)
    [ $# -eq 4 ] || usage
    parts=$(ls "$2"/part.* 2>/dev/null | sort || true)
    [ -n "$parts" ] || { echo "$2 holds no part.*" >&2; exit 2; }
    if [ -f "$2/parts.sha256" ]; then  # every part listed at the split is here and intact
        (cd "$2" && sha256sum --quiet -c parts.sha256) || { echo "a part is missing or damaged (see above)" >&2; exit 1; }
    fi
    mkdir -p "$(dirname "$3")"  # the model cache's folder for it need not exist yet
    tmp="$3.joining"
    # shellcheck disable=SC2086  # the part names come from split: no spaces
    cat $parts > "$tmp"
    got=$(sha256sum "$tmp" | cut -d' ' -f1)
    if [ "$got" != "$4" ]; then
        rm -f "$tmp"
        echo "SHA-256 mismatch: joined $(echo $parts | wc -w) parts into $got, expected $4; nothing written" >&2
        exit 1
    fi
    mv "$tmp" "$3"
    echo "joined $(echo $parts | wc -w) parts into $3 ($(stat -c %s "$3") B), SHA-256 verified"
    ;;
*) usage ;;
esac
