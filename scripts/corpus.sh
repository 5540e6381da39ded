#!/usr/bin/env bash
# Writes the default English corpus, the King James Bible from Debian's bible-kjv package
# (about 4.3 MB of text), to data/kjv.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p data
if [ ! -s data/kjv.txt ]; then
  bible "gen1:1-rev22:21" > data/kjv.txt.tmp
  mv data/kjv.txt.tmp data/kjv.txt
fi
echo "corpus: data/kjv.txt ($(wc -c < data/kjv.txt) bytes)"
