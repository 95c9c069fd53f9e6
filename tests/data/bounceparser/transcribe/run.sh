#!/bin/sh
# Regenerates ../expected-check_report.jsonl from the project's own .t files: each .t that
# calls check_report is run with transcribe/TestBounceParser.pm in place of t/'s, which
# prints the expectations instead of checking them. Run from tests/data/bounceparser.
set -e
tmp=$(mktemp -d)
mkdir -p "$tmp/t"
cp transcribe/TestBounceParser.pm "$tmp/t/"
ln -s "$PWD/t/corpus" "$tmp/t/corpus"  # the .t files glob it
for t in $(grep -l check_report t/*.t | sort); do
  cp "$t" "$tmp/t/"
  (cd "$tmp" && perl -T "$t" 2>/dev/null | grep '^{' || true)
done > expected-check_report.jsonl
rm -rf "$tmp"
